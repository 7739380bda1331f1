r"""`bifocal_jax/configs/odds_first.py` for a checkout's command lines (run from its root):

  python train.py --config configs/odds_first.py --workdir runs/odds_first
  python train.py --config configs/odds_first.py:tiny --workdir /tmp/odds_first_tiny
  python train.py --config configs/odds_first.py:paper --workdir runs/odds_first_paper
  python -m bifocal_jax.tasks --config configs/odds_first.py --split test_length --num 5 --format che
"""

from bifocal_jax.configs.odds_first import get_config  # noqa: F401
