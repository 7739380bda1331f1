r"""`bifocal_jax/configs/modular_arithmetic_brackets_depth.py` for a checkout's command lines (run from its root):

  python train.py --config configs/modular_arithmetic_brackets_depth.py --workdir runs/modular_arithmetic_brackets_depth
  python train.py --config configs/modular_arithmetic_brackets_depth.py:tiny --workdir /tmp/modular_arithmetic_brackets_depth_tiny
  python train.py --config configs/modular_arithmetic_brackets_depth.py:paper --workdir runs/modular_arithmetic_brackets_depth_paper
  python train.py --config configs/modular_arithmetic_brackets_depth.py --config.task.d_train=2 --workdir runs/modular_arithmetic_brackets_depth_d2
"""

from bifocal_jax.configs.modular_arithmetic_brackets_depth import get_config  # noqa: F401
