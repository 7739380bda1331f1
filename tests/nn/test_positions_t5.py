"""T5 relative position biases (`bifocal_jax/nn/positions/t5.py`) against a float64
reference written from flaxformer's `_relative_position_bucket`."""

import math

import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from flax import nnx

from bifocal_jax.nn import model as model_lib
from bifocal_jax.nn.positions import t5


def reference_bucket(relative, bidirectional, num_buckets=32, max_distance=128):
  """One relative position (key - query) -> its bucket, in plain Python."""
  ret, n = 0, -relative
  if bidirectional:
    num_buckets //= 2
    ret += num_buckets if n < 0 else 0
    n = abs(n)
  else:
    n = max(n, 0)
  max_exact = num_buckets // 2
  if n < max_exact:
    return ret + n
  large = max_exact + int(math.log(n / max_exact + np.finfo(np.float32).eps) /
                          math.log(max_distance / max_exact) * (num_buckets - max_exact))
  return ret + min(large, num_buckets - 1)


@pytest.mark.parametrize("bidirectional", [True, False])
def test_buckets_match_the_reference(bidirectional):
  relative = np.arange(-300, 301)
  got = np.asarray(t5.relative_position_bucket(jnp.asarray(relative), bidirectional=bidirectional))
  want = [reference_bucket(int(r), bidirectional) for r in relative]
  np.testing.assert_array_equal(got, want)
  assert got.max() == 31 and got.min() == 0


def test_bucket_landmarks():
  # Decoder: a key d tokens back is bucket d below 16, the last bucket from 128 on.
  b = lambda r, bi: int(t5.relative_position_bucket(jnp.asarray(r), bidirectional=bi))
  assert [b(-d, False) for d in (0, 1, 15)] == [0, 1, 15]
  assert b(-128, False) == b(-1000, False) == 31 and b(5, False) == 0  # the future: bucket 0
  # Encoder: keys to the right use the upper 16 buckets.
  assert b(3, True) == 16 + 3 and b(-3, True) == 3 and b(-500, True) == 15


def test_bias_is_the_table_at_the_buckets():
  module = t5.T5Bias(3, num_buckets=32, max_distance=128, rngs=nnx.Rngs(0))
  table = np.asarray(module.rel_embedding[...], np.float64)
  pos = jnp.arange(10)[None]
  got = np.asarray(module.bias_fn(causal=True)(None, None, pos, pos))[0]
  for i in range(10):
    for j in range(10):
      np.testing.assert_allclose(got[:, i, j], table[:, reference_bucket(j - i, False)], rtol=1e-6)
  # variance_scaling(1.0, "fan_avg", "uniform") of (heads, buckets): limit sqrt(3 / fan_avg).
  assert np.abs(table).max() <= math.sqrt(3 / ((3 + 32) / 2))


def test_one_table_shared_by_all_layers(position_config):
  cfg = ml_collections.ConfigDict(dict(num_layers=3, d_model=16, num_heads=2, head_dim=-1,
                                       mlp_dim=16, dtype="float32"))
  model = model_lib.Transformer(cfg, position_config("t5"), vocab_size=8, causal=True,
                                rngs=nnx.Rngs(0))
  params = nnx.state(model, nnx.Param)
  names = ["/".join(map(str, path)) for path, _ in params.flat_state()]
  assert [n for n in names if "rel_embedding" in n] == ["position/rel_embedding"]
  assert all(block.attn.position is None for block in model.blocks)
