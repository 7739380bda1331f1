r"""Chomsky-hierarchy task `modular_arithmetic` (regular; Deletang et al., ICLR
2023), as their code defines it: the value mod 5 of `d op d op ... d` (`+ -
*`, no brackets). See `bifocal_jax.tasks.chomsky`.

  python train.py --config configs/modular_arithmetic.py --workdir runs/modular_arithmetic
  python train.py --config configs/modular_arithmetic.py:tiny --workdir /tmp/modular_arithmetic_tiny
  python train.py --config configs/modular_arithmetic.py:paper --workdir runs/modular_arithmetic_paper
  python -m bifocal_jax.tasks --config configs/modular_arithmetic.py --split test_length --num 5 --format che

Variants: default (CPU-sized), `tiny` (tests), `paper` (5 layers, width 64,
8 heads, batch 128; for an accelerator). See `configs/_chomsky.py`.
"""

from configs import _chomsky


def get_config(arg=None):
  return _chomsky.get_config("modular_arithmetic", arg)
