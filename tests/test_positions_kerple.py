"""KERPLE biases (`bifocal_jax/positions/kerple.py`) against float64 references
written from chijames/KERPLE `megatron/mpu/layers.py`."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from flax import nnx

from bifocal_jax import model as model_lib
from bifocal_jax.positions import kerple

L, H = 7, 3


def reference(kind, p, a):
  diff = np.tril(np.arange(L)[:, None] - np.arange(L)[None, :]).astype(np.float64)
  if kind == "log":
    p, a = np.maximum(p, 0.01), np.maximum(a, 0.01)
    return -p[:, None, None] * np.log(1 + a[:, None, None] * diff)
  p, a = np.clip(p, 0.01, 2), np.maximum(a, 0.01)
  return -a[:, None, None] * diff**p[:, None, None]


@pytest.mark.parametrize("kind", ["log", "power"])
def test_bias_matches_the_reference(kind):
  p = np.asarray([0.005, 0.7, 2.5])  # below, inside and above the clamps
  a = np.asarray([0.3, 0.001, 1.2])
  fn = kerple.kerple_log_bias if kind == "log" else kerple.kerple_power_bias
  pos = jnp.arange(L)[None]
  got = fn(pos, pos, jnp.asarray(p, jnp.float32), jnp.asarray(a, jnp.float32))[0]
  lower = np.tril(np.ones((L, L), bool))
  np.testing.assert_allclose(np.asarray(got)[:, lower], reference(kind, p, a)[:, lower],
                             rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", ["log", "power"])
def test_gradients_are_finite_and_pass_the_clamp(kind):
  fn = kerple.kerple_log_bias if kind == "log" else kerple.kerple_power_bias
  pos = jnp.arange(L)[None]
  grads = jax.grad(lambda p, a: fn(pos, pos, p, a).sum(), argnums=(0, 1))(
      jnp.asarray([0.005, 0.7, 1.0]), jnp.asarray([0.3, 0.5, 0.001]))
  for g in grads:
    assert np.all(np.isfinite(g)) and np.all(g != 0)  # straight-through, as their .data.clamp


def test_initialisation_and_sharing(position_config):
  cfg = ml_collections.ConfigDict(dict(num_layers=2, d_model=16, num_heads=4, head_dim=-1,
                                       mlp_dim=16, dtype="float32"))
  model = model_lib.Transformer(cfg, position_config("kerple_power"), vocab_size=8, causal=True,
                                rngs=nnx.Rngs(0))
  p, a = np.asarray(model.position.bias_p[...]), np.asarray(model.position.bias_a[...])
  assert p.shape == a.shape == (4,) and np.all((0 <= p) & (p <= 2)) and np.all((0 <= a) & (a <= 1))
  assert all(block.attn.position is None for block in model.blocks)
  with pytest.raises(ValueError, match="kerple_log.*bidirectional encoder"):
    model_lib.Transformer(cfg, position_config("kerple_log"), vocab_size=8, causal=False,
                          rngs=nnx.Rngs(0))
