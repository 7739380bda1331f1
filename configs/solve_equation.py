r"""Chomsky-hierarchy task `solve_equation` (deterministic context-free; Deletang
et al., ICLR 2023), as their code defines it: the digit `x` stands for in a
bracketed equation mod 5. See `bifocal_jax.tasks.chomsky`.

  python train.py --config configs/solve_equation.py --workdir runs/solve_equation
  python train.py --config configs/solve_equation.py:tiny --workdir /tmp/solve_equation_tiny
  python train.py --config configs/solve_equation.py:paper --workdir runs/solve_equation_paper
  python -m bifocal_jax.tasks --config configs/solve_equation.py --split test_length --num 5 --format che

Variants: default (CPU-sized), `tiny` (tests), `paper` (5 layers, width 64,
8 heads, batch 128; for an accelerator). See `configs/_chomsky.py`.
"""

from configs import _chomsky


def get_config(arg=None):
  return _chomsky.get_config("solve_equation", arg)
