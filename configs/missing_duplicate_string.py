r"""`bifocal_jax/configs/missing_duplicate_string.py` for a checkout's command lines (run from its root):

  python train.py --config configs/missing_duplicate_string.py --workdir runs/missing_duplicate_string
  python train.py --config configs/missing_duplicate_string.py:tiny --workdir /tmp/missing_duplicate_string_tiny
  python train.py --config configs/missing_duplicate_string.py:paper --workdir runs/missing_duplicate_string_paper
  python -m bifocal_jax.tasks --config configs/missing_duplicate_string.py --split test_length --num 5 --format che
"""

from bifocal_jax.configs.missing_duplicate_string import get_config  # noqa: F401
