r"""Chomsky-hierarchy `compute_sqrt`: a binary number's integer square root.

Context-sensitive; Deletang et al., ICLR 2023, as their code defines it: the floor of the
square root of a binary number. See `bifocal_jax.tasks.chomsky`.

  python -m bifocal_jax.train --config compute_sqrt --workdir runs/compute_sqrt
  python -m bifocal_jax.train --config compute_sqrt:tiny --workdir /tmp/compute_sqrt_tiny
  python -m bifocal_jax.train --config compute_sqrt:paper --workdir runs/compute_sqrt_paper
  python -m bifocal_jax.tasks --config compute_sqrt --split test_length --num 5 --format che

Variants: default (CPU-sized), `tiny` (tests), `paper` (5 layers, width 64,
8 heads, batch 128; for an accelerator). See `_chomsky.py`.
"""

from bifocal_jax.configs import _chomsky

VARIANTS = _chomsky.VARIANTS


def get_config(arg=None):
  return _chomsky.get_config("compute_sqrt", arg)
