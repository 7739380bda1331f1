r"""`bifocal_jax/configs/modular_arithmetic.py` for a checkout's command lines (run from its root):

  python train.py --config configs/modular_arithmetic.py --workdir runs/modular_arithmetic
  python train.py --config configs/modular_arithmetic.py:tiny --workdir /tmp/modular_arithmetic_tiny
  python train.py --config configs/modular_arithmetic.py:paper --workdir runs/modular_arithmetic_paper
  python -m bifocal_jax.tasks --config configs/modular_arithmetic.py --split test_length --num 5 --format che
"""

from bifocal_jax.configs.modular_arithmetic import get_config  # noqa: F401
