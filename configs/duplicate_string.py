r"""`bifocal_jax/configs/duplicate_string.py` for a checkout's command lines (run from its root):

  python train.py --config configs/duplicate_string.py --workdir runs/duplicate_string
  python train.py --config configs/duplicate_string.py:tiny --workdir /tmp/duplicate_string_tiny
  python train.py --config configs/duplicate_string.py:paper --workdir runs/duplicate_string_paper
  python -m bifocal_jax.tasks --config configs/duplicate_string.py --split test_length --num 5 --format che
"""

from bifocal_jax.configs.duplicate_string import get_config  # noqa: F401
