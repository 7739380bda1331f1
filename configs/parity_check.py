r"""`bifocal_jax/configs/parity_check.py` for a checkout's command lines (run from its root):

  python train.py --config configs/parity_check.py --workdir runs/parity_check
  python train.py --config configs/parity_check.py:tiny --workdir /tmp/parity_check_tiny
  python train.py --config configs/parity_check.py:paper --workdir runs/parity_check_paper
  python -m bifocal_jax.tasks --config configs/parity_check.py --split test_length --num 5 --format che
"""

from bifocal_jax.configs.parity_check import get_config  # noqa: F401
