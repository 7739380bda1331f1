r"""Chomsky-hierarchy `modular_arithmetic_brackets`: a bracketed expression's value mod 5.

Deterministic context-free; Deletang et al., ICLR 2023, as their code defines it: the
value mod 5 of a fully bracketed expression (`+ - *`). See `bifocal_jax.tasks.chomsky`.

  python -m bifocal_jax.train --config modular_arithmetic_brackets --workdir runs/modular_arithmetic_brackets
  python -m bifocal_jax.train --config modular_arithmetic_brackets:tiny --workdir /tmp/modular_arithmetic_brackets_tiny
  python -m bifocal_jax.train --config modular_arithmetic_brackets:paper --workdir runs/modular_arithmetic_brackets_paper
  python -m bifocal_jax.tasks --config modular_arithmetic_brackets --split test_length --num 5 --format che

Variants: default (CPU-sized), `tiny` (tests), `paper` (5 layers, width 64,
8 heads, batch 128; for an accelerator). See `_chomsky.py`.
"""

from bifocal_jax.configs import _chomsky

VARIANTS = _chomsky.VARIANTS


def get_config(arg=None):
  return _chomsky.get_config("modular_arithmetic_brackets", arg)
