r"""Chomsky-hierarchy `solve_equation`: the unknown of a bracketed equation mod 5.

Deterministic context-free; Deletang et al., ICLR 2023, as their code defines it: the
digit `x` stands for in a bracketed equation mod 5. See `bifocal_jax.tasks.chomsky`.

  python -m bifocal_jax.train --config solve_equation --workdir runs/solve_equation
  python -m bifocal_jax.train --config solve_equation:tiny --workdir /tmp/solve_equation_tiny
  python -m bifocal_jax.train --config solve_equation:paper --workdir runs/solve_equation_paper
  python -m bifocal_jax.tasks --config solve_equation --split test_length --num 5 --format che

Variants: default (CPU-sized), `tiny` (tests), `paper` (5 layers, width 64,
8 heads, batch 128; for an accelerator). See `_chomsky.py`.
"""

from bifocal_jax.configs import _chomsky

VARIANTS = _chomsky.VARIANTS


def get_config(arg=None):
  return _chomsky.get_config("solve_equation", arg)
