r"""Chomsky-hierarchy `odds_first`: a bit string's even positions, then its odd ones.

Context-sensitive; Deletang et al., ICLR 2023, as their code defines it: a bit string's
bits at positions 2, 4, 6 .. (1-based), then those at 1, 3, 5 .. See
`bifocal_jax.tasks.chomsky`.

  python -m bifocal_jax.train --config odds_first --workdir runs/odds_first
  python -m bifocal_jax.train --config odds_first:tiny --workdir /tmp/odds_first_tiny
  python -m bifocal_jax.train --config odds_first:paper --workdir runs/odds_first_paper
  python -m bifocal_jax.tasks --config odds_first --split test_length --num 5 --format che

Variants: default (CPU-sized), `tiny` (tests), `paper` (5 layers, width 64,
8 heads, batch 128; for an accelerator). See `_chomsky.py`.
"""

from bifocal_jax.configs import _chomsky

VARIANTS = _chomsky.VARIANTS


def get_config(arg=None):
  return _chomsky.get_config("odds_first", arg)
