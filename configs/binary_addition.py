r"""Chomsky-hierarchy task `binary_addition` (context-sensitive; Deletang et al.,
ICLR 2023), as their code defines it: the sum of two little-endian binary
numbers, then END. See `bifocal_jax.tasks.chomsky`.

  python train.py --config configs/binary_addition.py --workdir runs/binary_addition
  python train.py --config configs/binary_addition.py:tiny --workdir /tmp/binary_addition_tiny
  python train.py --config configs/binary_addition.py:paper --workdir runs/binary_addition_paper
  python -m bifocal_jax.tasks --config configs/binary_addition.py --split test_length --num 5 --format che

Variants: default (CPU-sized), `tiny` (tests), `paper` (5 layers, width 64,
8 heads, batch 128; for an accelerator). See `configs/_chomsky.py`.
"""

from configs import _chomsky


def get_config(arg=None):
  return _chomsky.get_config("binary_addition", arg)
