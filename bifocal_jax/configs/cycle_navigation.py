r"""Chomsky-hierarchy `cycle_navigation`: the final state of moves on a 5-cycle.

Regular; Deletang et al., ICLR 2023, as their code defines it: the final state of moves on
a 5-cycle. See `bifocal_jax.tasks.chomsky`.

  python -m bifocal_jax.train --config cycle_navigation --workdir runs/cycle_navigation
  python -m bifocal_jax.train --config cycle_navigation:tiny --workdir /tmp/cycle_navigation_tiny
  python -m bifocal_jax.train --config cycle_navigation:paper --workdir runs/cycle_navigation_paper
  python -m bifocal_jax.tasks --config cycle_navigation --split test_length --num 5 --format che

Variants: default (CPU-sized), `tiny` (tests), `paper` (5 layers, width 64,
8 heads, batch 128; for an accelerator). See `_chomsky.py`.
"""

from bifocal_jax.configs import _chomsky

VARIANTS = _chomsky.VARIANTS


def get_config(arg=None):
  return _chomsky.get_config("cycle_navigation", arg)
