r"""`bifocal_jax/configs/reverse_string.py` for a checkout's command lines (run from its root):

  python train.py --config configs/reverse_string.py --workdir runs/reverse_string
  python train.py --config configs/reverse_string.py:tiny --workdir /tmp/reverse_string_tiny
  python train.py --config configs/reverse_string.py:paper --workdir runs/reverse_string_paper
  python -m bifocal_jax.tasks --config configs/reverse_string.py --split test_length --num 5 --format che
"""

from bifocal_jax.configs.reverse_string import get_config  # noqa: F401
