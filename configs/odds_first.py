r"""Chomsky-hierarchy task `odds_first` (Deletang et al., ICLR 2023; our code).

  python train.py --config configs/odds_first.py --workdir runs/odds_first
  python train.py --config configs/odds_first.py:tiny --workdir /tmp/odds_first_tiny
  python train.py --config configs/odds_first.py:paper --workdir runs/odds_first_paper

Variants: default (CPU-sized), `tiny` (tests), `paper` (5 layers, width 64,
8 heads, batch 128; for an accelerator). See `bifocal_jax.config.chomsky_config`.
"""

from bifocal_jax import config as config_lib


def get_config(arg=None):
  return config_lib.chomsky_config("odds_first", arg)
