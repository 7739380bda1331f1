"""ALiBi (Press et al. 2022) and its randomized form (Ruoss et al. 2023).

Decoder (causal): `-slope * (i - j)`, Press et al.'s causal ALiBi, the
project's `alibi` as before.

Encoder (bidirectional): the Chomsky-hierarchy benchmark's form
(google-deepmind/neural_networks_chomsky_hierarchy,
`models/positional_encodings.py: compute_alibi_encodings_biases`):
`slope * (-|i - j| + 0.5 * [i > j])`, query i, key j: the 0.5 on keys to the
left breaks the left/right symmetry. `position.alibi_offset` sets that 0.5
(None: 0.5 in the encoder, 0 in the decoder; 0 in the encoder gives the
symmetric `-slope * |i - j|` the project used before). Both sit on the
*scaled* scores ("ALiBi encodings are not scaled with the 1 / sqrt(d_k)
factor"), with the official implementation's slopes (`alibi_slopes`).

`randomized_alibi` (google-deepmind/randomized_positional_encodings,
`compute_noisy_alibi_encodings_biases`, `randomize_both_sides=False`): the
distance `|i - j|` is replaced by `r_{|i-j|}`, where `0 = r_0 < r_1 < ... <
r_{L-1}` are sorted draws without replacement from `[1, max_position)`, one
set per batch (also at evaluation, as their code draws them at every call;
in a padded batch each sequence gets the set of its own real length):
`slope * (-r_{|i-j|} + offset * [i > j])`, drawn anew in every layer (their
attention module draws with `hk.next_rng_key()`; `position.draw_per_layer`).
Their code is the encoder's; the decoder uses the same distances under the
causal mask.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx

from bifocal_jax.nn import rope as rope_lib
from bifocal_jax.nn.positions import base

ENCODER_OFFSET = 0.5  # the Chomsky-hierarchy benchmark's left/right symmetry breaker


def resolved_offset(position, *, causal: bool) -> float:
  offset = position.get("alibi_offset")
  if offset is None:
    return 0.0 if causal else ENCODER_OFFSET
  return float(offset)


def alibi_slopes(num_heads: int) -> np.ndarray:
  """ALiBi head slopes (Press et al., 2022), including the non-power-of-2 rule."""
  if not isinstance(num_heads, (int, np.integer)) or num_heads < 1:
    raise ValueError(f"num_heads must be a positive integer, got {num_heads!r}")

  def pow2(n):
    start = 2.0**(-(2.0**-(math.log2(n) - 3)))
    return [start * start**i for i in range(n)]

  if math.log2(num_heads).is_integer():
    slopes = pow2(num_heads)
  else:
    closest = 2**math.floor(math.log2(num_heads))
    slopes = pow2(closest) + pow2(2 * closest)[0::2][:num_heads - closest]
  return np.asarray(slopes, np.float32)


def alibi_bias(q_positions_BxQ, k_positions_BxS, slopes_H, *, offset: float = 0.0) -> jax.Array:
  """`slope * (-|i - j| + offset * [i > j])` as `[B, H, Q, S]` float32 (positions
  `[..., Q]`, `[..., S]`; offset 0: Press et al.'s `-slope * |i - j|`)."""
  distance_BxQxS = jnp.abs(q_positions_BxQ[..., :, None].astype(jnp.float32) -
                           k_positions_BxS[..., None, :].astype(jnp.float32))
  bias = -jnp.asarray(slopes_H, jnp.float32)[:, None, None] * distance_BxQxS[..., None, :, :]
  if offset:
    left = (q_positions_BxQ[..., :, None] > k_positions_BxS[..., None, :])[..., None, :, :]
    bias = bias + jnp.where(left, jnp.float32(offset), 0.0) * jnp.asarray(
        slopes_H, jnp.float32)[:, None, None]
  return bias


def randomized_alibi_bias(q_index_BxQ, k_index_BxS, distances_BxL, slopes_H, *,
                          offset: float = 0.0) -> jax.Array:
  """`slope * (-r_{|i-j|} + offset * [i > j])` as `[B, H, Q, S]` float32,
  `r = distances_BxL` (a row per sequence, or `[1, L]` or `[L]` for all)
  indexed by the index difference."""
  diff_BxQxS = q_index_BxQ[..., :, None] - k_index_BxS[..., None, :]
  distances_Bx1xL = jnp.atleast_2d(distances_BxL).astype(jnp.float32)[:, None, :]
  # Gathered once, not fused: fused into the score kernels, XLA:CPU redoes
  # the gather for every batch row of each (the train step before and after:
  # docs/performance.md, "Position kinds").
  r = jax.lax.optimization_barrier(
      jnp.take_along_axis(distances_Bx1xL, jnp.abs(diff_BxQxS), axis=-1, mode="clip"))
  slopes = jnp.asarray(slopes_H, jnp.float32)[:, None, None]
  return slopes * (-r + offset * (diff_BxQxS > 0).astype(jnp.float32))[..., None, :, :]


class AlibiBias(nnx.Module):
  """Per-layer ALiBi slopes (a buffer, not trained)."""

  def __init__(self, num_heads: int, *, offset: float, randomized: bool = False):
    self.slopes = nnx.Variable(jnp.asarray(alibi_slopes(num_heads)))
    self.offset = float(offset)
    self.randomized = randomized

  def bias_fn(self, *, causal: bool, distances_BxL=None) -> base.BiasFn:
    del causal
    slopes, offset = self.slopes[...], self.offset
    if self.randomized and distances_BxL is not None:  # None: the in-order distances
      r_BxL = distances_BxL
      return lambda q, k, qp, kp: randomized_alibi_bias(qp, kp, r_BxL, slopes, offset=offset)
    return lambda q, k, qp, kp: alibi_bias(qp, kp, slopes, offset=offset)


def _layer(randomized):

  def build(position, *, d_model, num_heads, head_dim, causal, rngs):
    del d_model, head_dim, rngs
    return AlibiBias(num_heads, offset=resolved_offset(position, causal=causal),
                     randomized=randomized)

  return build


def draw_distances(key: jax.Array, length: int, max_position: int, *,
                   lengths_B: jax.Array | None = None) -> jax.Array:
  """`[0, r_1, ..., r_{L-1}]`: sorted draws without replacement from `[1, max_position)`
  (`jrandom.choice(arange(1, noise_max_length), (L - 1,), replace=False)`, sorted),
  as `[1, L]`.

  `lengths_B`: each sequence's real tokens, before its padding. Then `[B, L]`:
  row `b`'s first `lengths_B[b]` distances are the source's draw for an
  unpadded batch of that length (the padding's are the rest of the draw), and
  sequences of one length get the same distances (the source's one set per
  batch).
  """
  if length > max_position:
    raise ValueError(f"sequence length {length} exceeds position.max_position={max_position}")
  rows = 1 if lengths_B is None else lengths_B.shape[0]
  if length <= 1:
    return jnp.zeros((rows, length), jnp.int32)
  # r_1 < ... < r_{L-1}: sorted positions of `[0, max_position - 1)` plus one,
  # drawn as the per-batch randomized positions are (one draw, each row the
  # subset of its own length).
  r_BxL1 = rope_lib.randomized_positions(
      key, (rows, length - 1), max_position - 1,
      lengths=None if lengths_B is None else jnp.maximum(lengths_B, 1) - 1, shared=True)
  return jnp.concatenate([jnp.zeros((rows, 1), jnp.int32), r_BxL1 + 1], axis=1)


SCHEMES = (
    base.Scheme(
        "alibi", base.BIAS,
        "Press et al. 2022 (decoder); the Chomsky-hierarchy benchmark's offset form "
        "(encoder)", layer=_layer(False)),
    base.Scheme("randomized_alibi", base.BIAS,
                "Ruoss et al. 2023, compute_noisy_alibi_encodings_biases", layer=_layer(True),
                randomize=base.DISTANCES, layer_draws=True),
)

CONFIG_KEYS = {
    # the encoder's left/right offset (None: 0.5 in the encoder, 0 in the decoder)
    "alibi_offset": ml_collections.config_dict.placeholder(float),
}
