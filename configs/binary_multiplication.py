r"""`bifocal_jax/configs/binary_multiplication.py` for a checkout's command lines (run from its root):

  python train.py --config configs/binary_multiplication.py --workdir runs/binary_multiplication
  python train.py --config configs/binary_multiplication.py:tiny --workdir /tmp/binary_multiplication_tiny
  python train.py --config configs/binary_multiplication.py:paper --workdir runs/binary_multiplication_paper
  python -m bifocal_jax.tasks --config configs/binary_multiplication.py --split test_length --num 5 --format che
"""

from bifocal_jax.configs.binary_multiplication import get_config  # noqa: F401
