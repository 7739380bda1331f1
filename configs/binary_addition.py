r"""`bifocal_jax/configs/binary_addition.py` for a checkout's command lines (run from its root):

  python train.py --config configs/binary_addition.py --workdir runs/binary_addition
  python train.py --config configs/binary_addition.py:tiny --workdir /tmp/binary_addition_tiny
  python train.py --config configs/binary_addition.py:paper --workdir runs/binary_addition_paper
  python -m bifocal_jax.tasks --config configs/binary_addition.py --split test_length --num 5 --format che
"""

from bifocal_jax.configs.binary_addition import get_config  # noqa: F401
