r"""`bifocal_jax/configs/compute_sqrt.py` for a checkout's command lines (run from its root):

  python train.py --config configs/compute_sqrt.py --workdir runs/compute_sqrt
  python train.py --config configs/compute_sqrt.py:tiny --workdir /tmp/compute_sqrt_tiny
  python train.py --config configs/compute_sqrt.py:paper --workdir runs/compute_sqrt_paper
  python -m bifocal_jax.tasks --config configs/compute_sqrt.py --split test_length --num 5 --format che
"""

from bifocal_jax.configs.compute_sqrt import get_config  # noqa: F401
