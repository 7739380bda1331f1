"""KERPLE biases (`bifocal_jax/nn/positions/kerple.py`) against float64 references
written from chijames/KERPLE `megatron/mpu/layers.py`."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from flax import nnx

from bifocal_jax.nn import model as model_lib
from bifocal_jax.nn.positions import bounded
from bifocal_jax.nn.positions import kerple

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


def test_the_initial_draw_is_clipped_into_the_bounds():
  """Their first forward pass clamps `torch.rand`'s draw in place; ours is
  clipped at construction: the same draw, the values below 0.01 at 0.01."""
  num_heads = 512  # seed 0 draws 2 of the p's and 8 of the a's below 0.01
  rngs = nnx.Rngs(0)
  p_draw = np.asarray(jax.random.uniform(rngs.params(), (num_heads,)) * 2.0)
  a_draw = np.asarray(jax.random.uniform(rngs.params(), (num_heads,)))
  eps = np.float32(kerple.EPS)
  assert (p_draw < eps).any() and (a_draw < eps).any()
  for kernel, p_upper in (("log", None), ("power", 2.0)):
    module = kerple.KerpleBias(num_heads, kernel=kernel, rngs=nnx.Rngs(0))
    for variable, draw, upper in ((module.bias_p, p_draw, p_upper), (module.bias_a, a_draw, None)):
      assert isinstance(variable, bounded.BoundedParam) and isinstance(variable, nnx.Param)
      assert (variable.lower, variable.upper) == (kerple.EPS, upper)
      np.testing.assert_array_equal(np.asarray(variable[...]), np.maximum(draw, eps))


def test_project_clips_the_bounded_params_and_nothing_else():
  module = kerple.KerpleBias(3, kernel="power", rngs=nnx.Rngs(0))
  module.other = nnx.Param(jnp.asarray([-5.0, 0.5, 5.0]))  # no bounds
  _, params = nnx.split(module, nnx.Param)
  params["bias_p"][...] = jnp.asarray([-1.0, 0.5, 3.0])  # past both bounds, and inside
  params["bias_a"][...] = jnp.asarray([-1.0, 0.5, 30.0])  # a has no upper bound
  out = bounded.project(params)
  np.testing.assert_array_equal(np.asarray(out["bias_p"][...]), np.float32([kerple.EPS, 0.5, 2.0]))
  np.testing.assert_array_equal(np.asarray(out["bias_a"][...]), np.float32([kerple.EPS, 0.5, 30.0]))
  assert type(out["bias_p"]) is bounded.BoundedParam and out["bias_p"].upper == 2.0
  assert out["other"] is params["other"]
  np.testing.assert_array_equal(np.asarray(out["other"][...]), [-5.0, 0.5, 5.0])
  with pytest.raises(ValueError, match="lower or an upper"):
    bounded.BoundedParam(jnp.zeros(2))
  with pytest.raises(ValueError, match="must not exceed"):
    bounded.BoundedParam(jnp.zeros(2), lower=1.0, upper=0.0)


def test_bounded_params_survive_split_merge_and_checkpoints(tmp_path):
  """The bounds are tree structure, not leaves: checkpoints hold the same
  arrays under the same paths as plain `nnx.Param`s, and restore (onto the
  structure of the run's state) as `BoundedParam`s with their bounds."""
  from bifocal_jax.training import checkpoint as checkpoint_lib  # pylint: disable=g-import-not-at-top
  graphdef, params = nnx.split(kerple.KerpleBias(4, kernel="power", rngs=nnx.Rngs(0)), nnx.Param)
  plain = jax.tree.map(lambda v: nnx.Param(v[...]), params,
                       is_leaf=lambda x: isinstance(x, nnx.Variable))
  assert checkpoint_lib.flatten(params).keys() == checkpoint_lib.flatten(plain).keys()
  merged = nnx.merge(graphdef, params)
  assert isinstance(merged.bias_p, bounded.BoundedParam) and merged.bias_p.upper == 2.0
  abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding),
                          dict(params=params))
  with checkpoint_lib.Checkpointer(str(tmp_path), save_every=1, keep=1, async_save=False) as ckpt:
    ckpt.save(1, dict(params=params), None, dict(steps=np.zeros(1, np.int32)), {}, force=True)
    restored, _ = ckpt.restore(1, abstract)
  for name in ("bias_p", "bias_a"):
    got, want = restored["params"][name], params[name]
    assert type(got) is bounded.BoundedParam and (got.lower, got.upper) == (want.lower, want.upper)
    np.testing.assert_array_equal(np.asarray(got[...]), np.asarray(want[...]))
