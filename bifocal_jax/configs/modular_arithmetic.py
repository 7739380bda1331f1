r"""Chomsky-hierarchy `modular_arithmetic`: an unbracketed expression's value mod 5.

Regular; Deletang et al., ICLR 2023, as their code defines it: the value mod 5 of `d op d
op ... d` (`+ - *`, no brackets). See `bifocal_jax.tasks.chomsky`.

  python -m bifocal_jax.train --config modular_arithmetic --workdir runs/modular_arithmetic
  python -m bifocal_jax.train --config modular_arithmetic:tiny --workdir /tmp/modular_arithmetic_tiny
  python -m bifocal_jax.train --config modular_arithmetic:paper --workdir runs/modular_arithmetic_paper
  python -m bifocal_jax.tasks --config modular_arithmetic --split test_length --num 5 --format che

Variants: default (CPU-sized), `tiny` (tests), `paper` (5 layers, width 64,
8 heads, batch 128; for an accelerator). See `_chomsky.py`.
"""

from bifocal_jax.configs import _chomsky

VARIANTS = _chomsky.VARIANTS


def get_config(arg=None):
  return _chomsky.get_config("modular_arithmetic", arg)
