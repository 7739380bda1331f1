r"""`bifocal_jax/configs/even_pairs.py` for a checkout's command lines (run from its root):

  python train.py --config configs/even_pairs.py --workdir runs/even_pairs
  python train.py --config configs/even_pairs.py:tiny --workdir /tmp/even_pairs_tiny
  python train.py --config configs/even_pairs.py:paper --workdir runs/even_pairs_paper
  python -m bifocal_jax.tasks --config configs/even_pairs.py --split test_length --num 5 --format che
"""

from bifocal_jax.configs.even_pairs import get_config  # noqa: F401
