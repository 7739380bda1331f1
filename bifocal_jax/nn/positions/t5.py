"""T5 relative position biases (Raffel et al. 2020), as google/flaxformer's
`components/relative_position_biases.py: RelativePositionBiases` defines them
with the T5.1.1 configuration (`t5x/configs/t5/architectures/t5_1_1_flaxformer.gin`):
32 buckets, max distance 128, one `[heads, buckets]` table shared by all the
layers of the stack (`shared_relative_position_bias_factory`), initialised
`variance_scaling(1.0, "fan_avg", "uniform")`; bidirectional buckets in the
encoder, causal ones in the decoder.

The relative position is `key - query`; half the buckets (in the encoder)
tell its sign; of the rest, half are exact distances and half grow
logarithmically up to `max_distance`, beyond which everything shares the last
bucket. The bias is added to the logits; T5 has no `1/sqrt(d)` (its query
initialisation absorbs it), so on our scaled scores the bias sits where T5's
does relative to `q . k`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx

from bifocal_jax.nn.positions import base

NUM_BUCKETS, MAX_DISTANCE = 32, 128


def relative_position_bucket(relative_position, *, bidirectional: bool = True,
                             num_buckets: int = NUM_BUCKETS, max_distance: int = MAX_DISTANCE,
                             xp=jnp):
  """flaxformer's `_relative_position_bucket` (relative = key - query), int32 buckets."""
  ret = 0
  n = -relative_position
  if bidirectional:
    num_buckets //= 2
    ret += (n < 0).astype(xp.int32) * num_buckets
    n = xp.abs(n)
  else:
    n = xp.maximum(n, 0)
  max_exact = num_buckets // 2
  is_small = n < max_exact
  val_if_large = max_exact + (xp.log(n.astype(xp.float32) / max_exact + xp.finfo(xp.float32).eps) /
                              np.log(max_distance / max_exact) *
                              (num_buckets - max_exact)).astype(xp.int32)
  val_if_large = xp.minimum(val_if_large, num_buckets - 1)
  return ret + xp.where(is_small, n, val_if_large)


class T5Bias(nnx.Module):
  """The `[heads, buckets]` table (`rel_embedding`), shared by all layers."""

  def __init__(self, num_heads: int, *, num_buckets: int, max_distance: int, rngs: nnx.Rngs):
    init = jax.nn.initializers.variance_scaling(1.0, "fan_avg", "uniform")
    self.rel_embedding = nnx.Param(init(rngs.params(), (num_heads, num_buckets), jnp.float32))
    self.num_buckets, self.max_distance = num_buckets, max_distance

  def bias_fn(self, *, causal: bool, distances_BxL=None) -> base.BiasFn:
    del distances_BxL
    table = self.rel_embedding[...]

    def fn(q, k, qp, kp):
      del q, k
      bucket = relative_position_bucket(kp[..., None, :] - qp[..., :, None],
                                        bidirectional=not causal, num_buckets=self.num_buckets,
                                        max_distance=self.max_distance)  # [B, Q, S]
      return jnp.moveaxis(jnp.take(table, bucket, axis=1), 0, 1)  # [B, H, Q, S]

    return fn


def _resolved(position):
  buckets = position.get("t5_buckets")
  distance = position.get("t5_max_distance")
  return (NUM_BUCKETS if buckets is None else int(buckets),
          MAX_DISTANCE if distance is None else int(distance))


def _shared(position, *, num_heads, rngs, **_):
  buckets, distance = _resolved(position)
  return T5Bias(num_heads, num_buckets=buckets, max_distance=distance, rngs=rngs)


def _check(position, *, num_heads, head_dim):
  del num_heads, head_dim
  buckets, distance = _resolved(position)
  if buckets < 4 or buckets % 2:
    raise ValueError(f"position.t5_buckets={buckets!r}: must be an even integer >= 4")
  if distance <= buckets // 2:
    raise ValueError(f"position.t5_max_distance={distance!r}: must exceed t5_buckets / 2")


SCHEMES = (base.Scheme(
    "t5", base.BIAS, "Raffel et al. 2020; google/flaxformer components/relative_position_biases.py",
    shared=_shared, check=_check),)

CONFIG_KEYS = {
    "t5_buckets": ml_collections.config_dict.placeholder(int),  # None: 32
    "t5_max_distance": ml_collections.config_dict.placeholder(int),  # None: 128
}
