"""FIRE (`bifocal_jax/nn/positions/fire.py`) against a float64 reference written
from mcleish7/arithmetic `cramming/architectures/embeddings.py` (class FIRE)."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from flax import nnx

from bifocal_jax.nn import model as model_lib
from bifocal_jax.nn.positions import fire

H = 3


def reference(length, p, threshold_pos=None):
  """float64 FIRE.forward(seq_length) at positions 0 .. L-1: [H, L, L]."""
  pos = np.arange(length, dtype=np.float64)
  rel = pos[:, None] - pos[None, :]
  threshold = abs(p["l_multiplier"] * p["init_l"])
  normalizer = np.maximum(pos, threshold)[:, None]
  rel = np.log(np.abs(p["c"] * rel) + 1)
  normalizer = np.log(np.abs(p["c"] * normalizer) + 1)
  x = rel / (normalizer + 1e-6)
  h = np.maximum(x[..., None] * p["w1"][0] + p["b1"], 0)  # nn.Linear(1, W) then ReLU
  return np.moveaxis(h @ p["w2"] + p["b2"], -1, 0)


@pytest.mark.parametrize("init_l", [512.0, 3.0])  # threshold above, and below, the positions
def test_bias_matches_the_reference(init_l):
  module = fire.FireBias(H, init_l=init_l, rngs=nnx.Rngs(0))
  module.c[...] = jnp.asarray(0.37)  # trained values, not the initial ones
  module.l_multiplier[...] = jnp.asarray(1.3)
  params = {k: np.asarray(v, np.float64) for k, v in module.params().items()}
  pos = jnp.arange(20)[None]
  got = np.asarray(module.bias_fn(causal=True)(None, None, pos, pos))[0]
  np.testing.assert_allclose(got, reference(20, params), rtol=1e-5, atol=1e-5)


def test_defaults_and_torch_initialisation():
  module = fire.FireBias(H, rngs=nnx.Rngs(0))
  assert module.w1.shape == (1, 32) and module.w2.shape == (32, H)
  assert float(module.c[...]) == pytest.approx(0.1) and float(module.init_l[...]) == 512.0
  assert not isinstance(module.init_l, nnx.Param)  # requires_grad=False
  assert np.abs(module.w1[...]).max() <= 1.0 and np.abs(module.w2[...]).max() <= 32**-0.5
  grads = jax.grad(lambda c: fire.fire_bias(jnp.arange(8)[None], jnp.arange(8)[None],
                                            {**module.params(), "c": c}).sum())(jnp.asarray(0.1))
  assert np.isfinite(grads) and grads != 0


def test_per_layer_parameters(position_config):
  cfg = ml_collections.ConfigDict(dict(num_layers=2, d_model=16, num_heads=2, head_dim=-1,
                                       mlp_dim=16, dtype="float32"))
  model = model_lib.Transformer(cfg, position_config("fire", fire_mlp_width=8), vocab_size=8,
                                causal=True, rngs=nnx.Rngs(0))
  a, b = (blk.attn.position.w1[...] for blk in model.blocks)
  assert a.shape == (1, 8) and not np.allclose(a, b)
