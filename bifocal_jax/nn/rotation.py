"""Rotating queries and keys by their rotary angles, with a hand-written backward.

The angles are computed once per layer and call and shared by queries and
keys; the backward pass rotates the cotangents back by the same angles and
takes the gradient of the frequencies from them (`rotate_queries_keys`).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from bifocal_jax.nn import rope as rope_lib


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def rotate_queries_keys(qk_2xBxLxHxK, positions_BxL, frequencies, layout: str = "half"):
  """`rope.apply_rope` of stacked queries and keys, with a hand-written backward.

  The angles are computed once per call (per layer), shared by queries and
  keys, and saved for the backward pass, which needs only the rotated
  outputs: the gradient of a rotation by theta is the rotation by -theta, and
  d loss / d theta = sum(d_out2 * out1 - d_out1 * out2) over the batch. Left
  to autodiff and XLA, cos/sin are recomputed in each fusion that uses them
  (per sequence, query/key and gradient) and the unrotated inputs are kept
  for the frequency gradient.
  """
  cos, sin = rope_lib.rotary_cos_sin(positions_BxL, frequencies)
  return rope_lib.rotate(qk_2xBxLxHxK, cos, sin, layout)


def _rotate_queries_keys_fwd(qk, positions, frequencies, layout):
  # The barrier materialises the [B|1, L, H|1, pairs] angles once.
  cos, sin = jax.lax.optimization_barrier(rope_lib.rotary_cos_sin(positions, frequencies))
  out = rope_lib.rotate(qk, cos, sin, layout)
  return out, (out, cos, sin, positions, frequencies)


def _rotate_queries_keys_bwd(layout, residuals, d_out):
  out, cos, sin, positions, frequencies = residuals
  pairs = cos.shape[-1]
  d_qk = rope_lib.rotate(d_out, cos, -sin, layout)
  (out1, out2), (d1,
                 d2) = (_pair_halves(x.astype(jnp.float32), pairs, layout) for x in (out, d_out))
  d_angles = d2 * out1 - d1 * out2  # [2, B, L, H, pairs]
  # angles = positions * frequencies: d_frequencies = sum over (q|k, batch, seq) of
  # positions * d_angles, as a matrix-vector product (XLA:CPU reduces the major
  # dimensions of d_angles more slowly: docs/performance.md).
  weight = jnp.broadcast_to(positions.astype(jnp.float32), d_angles.shape[:3]).reshape(-1)
  d_frequencies = jnp.dot(weight, d_angles.reshape(weight.shape[0],
                                                   -1)).reshape(d_angles.shape[-2:])  # [H, pairs]
  if frequencies.ndim == 1 or frequencies.shape[0] != d_frequencies.shape[0]:
    d_frequencies = d_frequencies.sum(0)  # one spectrum shared by the heads
  return d_qk, _zero_cotangent(positions), d_frequencies.reshape(frequencies.shape)


rotate_queries_keys.defvjp(_rotate_queries_keys_fwd, _rotate_queries_keys_bwd)


def _pair_halves(x, pairs: int, layout: str):
  """The two members of each rotated channel pair (see `rope.rotate`)."""
  if layout == "half":
    return x[..., :pairs], x[..., pairs:2 * pairs]
  return x[..., 0:2 * pairs:2], x[..., 1:2 * pairs:2]


def _zero_cotangent(x):
  if jnp.issubdtype(x.dtype, jnp.inexact):
    return jnp.zeros_like(x)
  return np.zeros(x.shape, jax.dtypes.float0)
