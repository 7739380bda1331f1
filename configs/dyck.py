r"""`bifocal_jax/configs/dyck.py` for a checkout's command lines (run from its root):

  python train.py --config configs/dyck.py --workdir runs/dyck
  python train.py --config configs/dyck.py:tiny --workdir /tmp/dyck_tiny
  python train.py --config configs/dyck.py:paper --workdir runs/dyck_paper
  python train.py --config configs/dyck.py --config.position.kind=rope --workdir runs/dyck_rope
"""

from bifocal_jax.configs.dyck import get_config  # noqa: F401
