r"""`bifocal_jax/configs/stack_manipulation.py` for a checkout's command lines (run from its root):

  python train.py --config configs/stack_manipulation.py --workdir runs/stack_manipulation
  python train.py --config configs/stack_manipulation.py:tiny --workdir /tmp/stack_manipulation_tiny
  python train.py --config configs/stack_manipulation.py:paper --workdir runs/stack_manipulation_paper
  python -m bifocal_jax.tasks --config configs/stack_manipulation.py --split test_length --num 5 --format che
"""

from bifocal_jax.configs.stack_manipulation import get_config  # noqa: F401
