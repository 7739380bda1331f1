r"""Chomsky-hierarchy task `even_pairs` (regular; Deletang et al., ICLR 2023), as
their code defines it: whether a bit string has an odd number of `01`/`10`
pairs. See `bifocal_jax.tasks.chomsky`.

  python train.py --config configs/even_pairs.py --workdir runs/even_pairs
  python train.py --config configs/even_pairs.py:tiny --workdir /tmp/even_pairs_tiny
  python train.py --config configs/even_pairs.py:paper --workdir runs/even_pairs_paper
  python -m bifocal_jax.tasks --config configs/even_pairs.py --split test_length --num 5 --format che

Variants: default (CPU-sized), `tiny` (tests), `paper` (5 layers, width 64,
8 heads, batch 128; for an accelerator). See `configs/_chomsky.py`.
"""

from configs import _chomsky


def get_config(arg=None):
  return _chomsky.get_config("even_pairs", arg)
