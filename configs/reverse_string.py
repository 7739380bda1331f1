r"""Chomsky-hierarchy task `reverse_string` (Deletang et al., ICLR 2023; our code).

  python train.py --config configs/reverse_string.py --workdir runs/reverse_string
  python train.py --config configs/reverse_string.py:tiny --workdir /tmp/reverse_string_tiny
  python train.py --config configs/reverse_string.py:paper --workdir runs/reverse_string_paper

Variants: default (CPU-sized), `tiny` (tests), `paper` (5 layers, width 64,
8 heads, batch 128; for an accelerator). See `configs/_chomsky.py`.
"""

from configs import _chomsky


def get_config(arg=None):
  return _chomsky.get_config("reverse_string", arg)
