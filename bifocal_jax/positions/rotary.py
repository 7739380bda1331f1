"""Rotary schemes (the project's own family): `rope`, `partial_rope`,
`randomized_rope`, `spectral`, `bifocal`, and `nope` (no positions).

The maths and the modules live in `bifocal_jax/rope.py`; here each kind
picks its module, held at `block.attn.rope` (surgery swaps it there).
"""

from __future__ import annotations

import ml_collections

from bifocal_jax import rope as rope_lib
from bifocal_jax.positions import base


def spectral_eyes(position: ml_collections.ConfigDict, *, num_heads: int,
                  head_dim: int) -> tuple[int | None, int | None]:
  """`(spectral_heads, spectral_pairs)` of a bifocal `position` config, -1
  resolved: the count for its `split` (heads: half the heads; pairs: half
  the pairs), None for the other. The one place these defaults are resolved.

  Raises a ValueError naming the key when the count does not fit the model.
  """
  if position.split == "heads":
    n = num_heads // 2 if position.spectral_heads == -1 else position.spectral_heads
    if not 1 <= n <= num_heads:
      raise ValueError(f"position.spectral_heads={position.spectral_heads!r}: must be -1 (half) "
                       f"or in [1, model.num_heads={num_heads}]")
    return n, None
  if position.split == "pairs":
    pairs = head_dim // 2
    n = max(pairs // 2, 1) if position.spectral_pairs == -1 else position.spectral_pairs
    if not 1 <= n <= pairs:
      raise ValueError(f"position.spectral_pairs={position.spectral_pairs!r}: must be -1 (half) "
                       f"or in [1, head_dim/2={pairs}]")
    return None, n
  raise ValueError(f"position.split={position.split!r}: must be 'heads' or 'pairs'")


def _common(position, head_dim):
  return dict(theta=position.base, embedding_size=head_dim, layout=position.layout)


def _geometric(position, *, num_heads, head_dim):
  del num_heads
  return rope_lib.GeometricRoPE(**_common(position, head_dim))


def _partial(position, *, num_heads, head_dim):
  del num_heads
  return rope_lib.GeometricRoPE(**_common(position, head_dim),
                                rotary_fraction=position.rotary_fraction)


def _spectral(position, *, num_heads, head_dim):
  return rope_lib.SpectralRoPE(**_common(position, head_dim), num_heads=num_heads)


def _bifocal(position, *, num_heads, head_dim):
  spectral_heads, spectral_pairs = spectral_eyes(position, num_heads=num_heads, head_dim=head_dim)
  return rope_lib.BifocalRoPE(**_common(position,
                                        head_dim), num_heads=num_heads, split=position.split,
                              spectral_heads=spectral_heads, spectral_pairs=spectral_pairs)


SCHEMES = (
    base.Scheme("nope", base.NONE, "no positional signal (causal masking only)"),
    base.Scheme("rope", base.ROTARY, "Su et al. 2021, geometric spectrum", rope=_geometric),
    base.Scheme("partial_rope", base.ROTARY,
                "RoPE on a fraction of each head (Gemma's rope_proportion)", rope=_partial),
    base.Scheme("randomized_rope", base.ROTARY,
                "Ruoss et al. 2023: RoPE at sorted random positions, drawn per sequence",
                rope=_geometric, randomize=base.PER_SEQUENCE),
    base.Scheme("spectral", base.ROTARY, "ours: every head's spectrum trainable", rope=_spectral),
    base.Scheme("bifocal", base.ROTARY, "ours: geometric and spectral eyes (arXiv 2601.22402)",
                rope=_bifocal),
)
