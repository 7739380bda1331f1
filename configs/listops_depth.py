r"""`bifocal_jax/configs/listops_depth.py` for a checkout's command lines (run from its root):

  python train.py --config configs/listops_depth.py --workdir runs/listops_depth
  python train.py --config configs/listops_depth.py:tiny --workdir /tmp/listops_depth_tiny
  python train.py --config configs/listops_depth.py:paper --workdir runs/listops_depth_paper
  python train.py --config configs/listops_depth.py:minmax --workdir runs/listops_depth_minmax
  python train.py --config configs/listops_depth.py --config.position.kind=rope --workdir runs/listops_depth_rope
  python -m bifocal_jax.tasks --config configs/listops_depth.py --split valid --num 3
"""

from bifocal_jax.configs.listops_depth import get_config  # noqa: F401
