r"""`bifocal_jax/configs/modular_arithmetic_brackets.py` for a checkout's command lines (run from its root):

  python train.py --config configs/modular_arithmetic_brackets.py --workdir runs/modular_arithmetic_brackets
  python train.py --config configs/modular_arithmetic_brackets.py:tiny --workdir /tmp/modular_arithmetic_brackets_tiny
  python train.py --config configs/modular_arithmetic_brackets.py:paper --workdir runs/modular_arithmetic_brackets_paper
  python -m bifocal_jax.tasks --config configs/modular_arithmetic_brackets.py --split test_length --num 5 --format che
"""

from bifocal_jax.configs.modular_arithmetic_brackets import get_config  # noqa: F401
