r"""Chomsky-hierarchy task `cycle_navigation` (Deletang et al., ICLR 2023; our code).

  python train.py --config configs/cycle_navigation.py --workdir runs/cycle_navigation
  python train.py --config configs/cycle_navigation.py:tiny --workdir /tmp/cycle_navigation_tiny
  python train.py --config configs/cycle_navigation.py:paper --workdir runs/cycle_navigation_paper

Variants: default (CPU-sized), `tiny` (tests), `paper` (5 layers, width 64,
8 heads, batch 128; for an accelerator). See `configs/_chomsky.py`.
"""

from configs import _chomsky


def get_config(arg=None):
  return _chomsky.get_config("cycle_navigation", arg)
