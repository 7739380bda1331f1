r"""Chomsky-hierarchy task `modular_arithmetic_brackets` (deterministic context-
free; Deletang et al., ICLR 2023), as their code defines it: the value mod 5
of a fully bracketed expression (`+ - *`). See `bifocal_jax.tasks.chomsky`.

  python train.py --config configs/modular_arithmetic_brackets.py --workdir runs/modular_arithmetic_brackets
  python train.py --config configs/modular_arithmetic_brackets.py:tiny --workdir /tmp/modular_arithmetic_brackets_tiny
  python train.py --config configs/modular_arithmetic_brackets.py:paper --workdir runs/modular_arithmetic_brackets_paper
  python -m bifocal_jax.tasks --config configs/modular_arithmetic_brackets.py --split test_length --num 5 --format che

Variants: default (CPU-sized), `tiny` (tests), `paper` (5 layers, width 64,
8 heads, batch 128; for an accelerator). See `configs/_chomsky.py`.
"""

from configs import _chomsky


def get_config(arg=None):
  return _chomsky.get_config("modular_arithmetic_brackets", arg)
