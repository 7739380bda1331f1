r"""`bifocal_jax/configs/cycle_navigation.py` for a checkout's command lines (run from its root):

  python train.py --config configs/cycle_navigation.py --workdir runs/cycle_navigation
  python train.py --config configs/cycle_navigation.py:tiny --workdir /tmp/cycle_navigation_tiny
  python train.py --config configs/cycle_navigation.py:paper --workdir runs/cycle_navigation_paper
  python -m bifocal_jax.tasks --config configs/cycle_navigation.py --split test_length --num 5 --format che
"""

from bifocal_jax.configs.cycle_navigation import get_config  # noqa: F401
