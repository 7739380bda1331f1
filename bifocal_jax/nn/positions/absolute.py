"""Absolute position embeddings added to the token embeddings at the input:
`sin_cos`, `learnt` and their randomized forms.

Sources: google-deepmind/neural_networks_chomsky_hierarchy and
google-deepmind/randomized_positional_encodings, `models/positional_encodings.py`
(`sinusoid_position_encoding`, `noisy_fixed_positional_encodings`) and
`models/transformer.py` (`TransformerEmbedder.add_positional_encodings`).

- `sin_cos`: `[sin(p w_i), cos(p w_i)]` (the sines in the first half of the
  model dimension D, the cosines in the second), `w_i = max_time^(-2i / D)`,
  `max_time` 10,000. Positions count up, `0 .. L-1`, as the
  randomized-encodings repository's fixed code does; the Chomsky-hierarchy
  encoder builds them with `causal=True`, i.e. counting *down* (`L .. 1`, L
  the padded length of the batch here), which produced that paper's numbers:
  `position.reverse_sin_cos=True` reproduces it.
- `learnt`: a trainable `[max_position, D]` table (`hk.Embed`'s default
  initialiser: a normal truncated at two standard deviations, stddev 1),
  looked up at the positions.
- `randomized_sin_cos`, `randomized_learnt` (their NOISY_SIN_COS and
  NOISY_LEARNT): the same encodings at sorted positions drawn without
  replacement from `[0, max_position)`, one draw shared by the batch, at
  every call (training and, with `position.randomize_eval`, evaluation), as
  `jrandom.choice(..., replace=False)` then `jnp.sort` does there; a padded
  sequence takes its unpadded length's subset of it (`rope.randomized_positions`).

Differences from their models: they scale the token embeddings (initialised at
stddev 0.02) by `sqrt(D)` before adding the encodings and apply dropout; ours
are initialised at stddev `D^-0.5` (about the same scale at D = 64) and have no
dropout.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_collections
from flax import nnx

from bifocal_jax.nn.positions import base

MAX_TIME = 10_000.0  # their SinCosParams.max_time


def resolved_max_time(position) -> float:
  value = position.get("max_time")
  return MAX_TIME if value is None else float(value)


def sinusoid(positions, dim: int, max_time: float = MAX_TIME) -> jax.Array:
  """`[..., dim]` float32: `[sin(p w), cos(p w)]`, `w_i = max_time^(-2i/dim)` (dim even)."""
  if dim % 2:
    raise ValueError(f"sin/cos encodings need an even dimension, got {dim}")
  inv_freq = max_time**(-jnp.arange(0, dim, 2, dtype=jnp.float32) / dim)
  angles = jnp.asarray(positions, jnp.float32)[..., None] * inv_freq
  return jnp.concatenate([jnp.sin(angles), jnp.cos(angles)], axis=-1)


class SinCos(nnx.Module):
  """Fixed sin/cos encodings of the positions: `emb(positions_BxL) -> [B, L, D]`."""

  def __init__(self, dim: int, *, max_time: float = MAX_TIME, reverse: bool = False):
    self.dim, self.max_time, self.reverse = dim, float(max_time), reverse

  def __call__(self, positions_BxL: jax.Array) -> jax.Array:
    if self.reverse:  # the Chomsky-hierarchy encoder's arange(L, 0, -1)
      positions_BxL = positions_BxL.shape[-1] - positions_BxL
    return sinusoid(positions_BxL, self.dim, self.max_time)


class Learnt(nnx.Module):
  """A trainable table of `max_position` rows: `emb(positions_BxL) -> [B, L, D]`."""

  def __init__(self, dim: int, max_position: int, *, rngs: nnx.Rngs):
    # hk.Embed's default w_init: TruncatedNormal(stddev=1.0), cut at +-2.
    self.table_PxD = nnx.Param(
        jax.random.truncated_normal(rngs.params(), -2.0, 2.0, (max_position, dim), jnp.float32))

  def __call__(self, positions_BxL: jax.Array) -> jax.Array:
    return jnp.take(self.table_PxD[...], positions_BxL, axis=0, mode="clip")


def _sin_cos(position, *, d_model, rngs, **_):
  del rngs
  return SinCos(d_model, max_time=resolved_max_time(position),
                reverse=bool(position.get("reverse_sin_cos")))


def _randomized_sin_cos(position, *, d_model, rngs, **_):
  del rngs
  return SinCos(d_model, max_time=resolved_max_time(position))


def _learnt(position, *, d_model, rngs, **_):
  return Learnt(d_model, int(position.max_position), rngs=rngs)


def _check(position, *, num_heads, head_dim):
  del num_heads, head_dim
  if position.get("max_time") is not None and not position.max_time > 0:
    raise ValueError(f"position.max_time={position.max_time!r}: must be positive")


SOURCE = "neural_networks_chomsky_hierarchy / randomized_positional_encodings, " \
         "models/positional_encodings.py"
SCHEMES = (
    base.Scheme("sin_cos", base.ABSOLUTE, f"Vaswani et al. 2017; {SOURCE}", embedding=_sin_cos,
                check=_check),
    base.Scheme("learnt", base.ABSOLUTE, f"LEARNT; {SOURCE}", embedding=_learnt),
    base.Scheme("randomized_sin_cos", base.ABSOLUTE, f"Ruoss et al. 2023, NOISY_SIN_COS; {SOURCE}",
                embedding=_randomized_sin_cos, randomize=base.PER_BATCH, check=_check),
    base.Scheme("randomized_learnt", base.ABSOLUTE, f"Ruoss et al. 2023, NOISY_LEARNT; {SOURCE}",
                embedding=_learnt, randomize=base.PER_BATCH),
)

CONFIG_KEYS = {
    # sin/cos wavelength scale (None: their max_time, 10,000); also `relative`'s
    "max_time": ml_collections.config_dict.placeholder(float),
    # sin_cos positions counted down, L .. 1, as the Chomsky-hierarchy encoder (None: False)
    "reverse_sin_cos": ml_collections.config_dict.placeholder(bool),
}
