r"""Chomsky-hierarchy task `odds_first` (Deletang et al., ICLR 2023; our code).

  python train.py --config configs/odds_first.py --workdir runs/odds_first
  python train.py --config configs/odds_first.py:tiny --workdir /tmp/odds_first_tiny
  python train.py --config configs/odds_first.py:paper --workdir runs/odds_first_paper

Variants: default (CPU-sized), `tiny` (tests), `paper` (5 layers, width 64,
8 heads, batch 128; for an accelerator). See `configs/_chomsky.py`.
"""

from configs import _chomsky


def get_config(arg=None):
  return _chomsky.get_config("odds_first", arg)
