"""Rotary schemes: `rope`, the two partial-rotary conventions `partial_rope`
(GPT-NeoX's `rotary_pct`) and `p_rope` (Gemma's `rope_proportion`),
`randomized_rope`, the project's `spectral` and `bifocal`, and `nope` (no
positions).

At head dimension 16 and `position.rotary_fraction=0.5` the two partial
conventions rotate the same 4 pairs at different speeds: `partial_rope` with
the spectrum of the 8 rotated channels (slowest pair 10000^(-6/8), 0.001
rad/token), `p_rope` with the first 4 of the whole head's 8 frequencies
(slowest 10000^(-6/16), 0.032 rad/token), the 4 slowest dropped (p-RoPE,
Barbero et al. 2024).

The maths and the modules live in `bifocal_jax/nn/rope.py`; here each kind
picks its module, held at `block.attn.rope` (surgery swaps it there).
"""

from __future__ import annotations

import ml_collections

from bifocal_jax.nn import rope as rope_lib
from bifocal_jax.nn.positions import base


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


def _proportional(position, *, num_heads, head_dim):
  del num_heads
  return rope_lib.GeometricRoPE(**_common(position, head_dim),
                                rope_proportion=position.rotary_fraction)


def _spectral(position, *, num_heads, head_dim):
  return rope_lib.SpectralRoPE(**_common(position, head_dim), num_heads=num_heads)


def _check_bifocal(position, *, num_heads, head_dim):
  spectral_eyes(position, num_heads=num_heads, head_dim=head_dim)


def _bifocal_from_rope(position, *, num_heads, head_dim):
  spectral_heads, spectral_pairs = spectral_eyes(position, num_heads=num_heads, head_dim=head_dim)
  return dict(split=position.split, spectral_heads=spectral_heads, spectral_pairs=spectral_pairs)


def _bifocal(position, *, num_heads, head_dim):
  spectral_heads, spectral_pairs = spectral_eyes(position, num_heads=num_heads, head_dim=head_dim)
  return rope_lib.BifocalRoPE(**_common(position,
                                        head_dim), num_heads=num_heads, split=position.split,
                              spectral_heads=spectral_heads, spectral_pairs=spectral_pairs)


SCHEMES = (
    base.Scheme("nope", base.NONE, "no positional signal (causal masking only)"),
    base.Scheme("rope", base.ROTARY, "Su et al. 2021, geometric spectrum", rope=_geometric,
                from_rope=lambda position, **dims: None),  # the control arm: continued as it is
    base.Scheme(
        "partial_rope", base.ROTARY,
        "GPT-NeoX's rotary_pct: RoPE on the first channels of each head, with their "
        "own spectrum", rope=_partial),
    base.Scheme(
        "p_rope", base.ROTARY,
        "Gemma's rope_proportion (p-RoPE, Barbero et al. 2024): the head's spectrum on "
        "the first pairs, the slowest pairs position-free", rope=_proportional),
    base.Scheme(
        "randomized_rope", base.ROTARY,
        "Ruoss et al. 2023 (NOISY_ROTARY): RoPE at sorted random positions, one draw "
        "per batch, anew in every layer", rope=_geometric, randomize=base.PER_BATCH,
        layer_draws=True),
    base.Scheme("spectral", base.ROTARY, "ours: every head's spectrum trainable", rope=_spectral,
                from_rope=lambda position, **dims: dict(per_head=True)),
    base.Scheme("bifocal", base.ROTARY, "ours: geometric and spectral eyes (arXiv 2601.22402)",
                rope=_bifocal, check=_check_bifocal, from_rope=_bifocal_from_rope),
)
