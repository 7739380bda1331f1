r"""`bifocal_jax/configs/solve_equation.py` for a checkout's command lines (run from its root):

  python train.py --config configs/solve_equation.py --workdir runs/solve_equation
  python train.py --config configs/solve_equation.py:tiny --workdir /tmp/solve_equation_tiny
  python train.py --config configs/solve_equation.py:paper --workdir runs/solve_equation_paper
  python -m bifocal_jax.tasks --config configs/solve_equation.py --split test_length --num 5 --format che
"""

from bifocal_jax.configs.solve_equation import get_config  # noqa: F401
