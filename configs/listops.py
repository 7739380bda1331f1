r"""`bifocal_jax/configs/listops.py` for a checkout's command lines (run from its root):

  python train.py --config configs/listops.py --workdir runs/listops
  python train.py --config configs/listops.py:tiny --workdir /tmp/listops_tiny
  python train.py --config configs/listops.py:paper --workdir runs/listops_paper
  python -m bifocal_jax.tasks --config configs/listops.py --split test_depth --num 3
"""

from bifocal_jax.configs.listops import get_config  # noqa: F401
