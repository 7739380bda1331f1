r"""Chomsky-hierarchy task `stack_manipulation` (Deletang et al., ICLR 2023; our code).

  python train.py --config configs/stack_manipulation.py --workdir runs/stack_manipulation
  python train.py --config configs/stack_manipulation.py:tiny --workdir /tmp/stack_manipulation_tiny
  python train.py --config configs/stack_manipulation.py:paper --workdir runs/stack_manipulation_paper

Variants: default (CPU-sized), `tiny` (tests), `paper` (5 layers, width 64,
8 heads, batch 128; for an accelerator). See `configs/_chomsky.py`.
"""

from configs import _chomsky


def get_config(arg=None):
  return _chomsky.get_config("stack_manipulation", arg)
