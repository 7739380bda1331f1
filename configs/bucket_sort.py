r"""`bifocal_jax/configs/bucket_sort.py` for a checkout's command lines (run from its root):

  python train.py --config configs/bucket_sort.py --workdir runs/bucket_sort
  python train.py --config configs/bucket_sort.py:tiny --workdir /tmp/bucket_sort_tiny
  python train.py --config configs/bucket_sort.py:paper --workdir runs/bucket_sort_paper
  python -m bifocal_jax.tasks --config configs/bucket_sort.py --split test_length --num 5 --format che
"""

from bifocal_jax.configs.bucket_sort import get_config  # noqa: F401
