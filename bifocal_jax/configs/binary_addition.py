r"""Chomsky-hierarchy `binary_addition`: the sum of two binary numbers.

Context-sensitive; Deletang et al., ICLR 2023, as their code defines it: the sum of two
little-endian binary numbers, then END. See `bifocal_jax.tasks.chomsky`.

  python -m bifocal_jax.train --config binary_addition --workdir runs/binary_addition
  python -m bifocal_jax.train --config binary_addition:tiny --workdir /tmp/binary_addition_tiny
  python -m bifocal_jax.train --config binary_addition:paper --workdir runs/binary_addition_paper
  python -m bifocal_jax.tasks --config binary_addition --split test_length --num 5 --format che

Variants: default (CPU-sized), `tiny` (tests), `paper` (5 layers, width 64,
8 heads, batch 128; for an accelerator). See `_chomsky.py`.
"""

from bifocal_jax.configs import _chomsky

VARIANTS = _chomsky.VARIANTS


def get_config(arg=None):
  return _chomsky.get_config("binary_addition", arg)
