r"""Chomsky-hierarchy task `stack_manipulation` (Deletang et al., ICLR 2023; our code).

  python train.py --config configs/stack_manipulation.py --workdir runs/stack_manipulation
  python train.py --config configs/stack_manipulation.py:tiny --workdir /tmp/stack_manipulation_tiny
  python train.py --config configs/stack_manipulation.py:paper --workdir runs/stack_manipulation_paper

Variants: default (CPU-sized), `tiny` (tests), `paper` (5 layers, width 64,
8 heads, batch 128; for an accelerator). See `bifocal_jax.config.chomsky_config`.
"""

from bifocal_jax import config as config_lib


def get_config(arg=None):
  return config_lib.chomsky_config("stack_manipulation", arg)
