r"""Chomsky-hierarchy task `bucket_sort` (context-sensitive; Deletang et al., ICLR
2023), as their code defines it: a string over 0..4, sorted. See
`bifocal_jax.tasks.chomsky`.

  python train.py --config configs/bucket_sort.py --workdir runs/bucket_sort
  python train.py --config configs/bucket_sort.py:tiny --workdir /tmp/bucket_sort_tiny
  python train.py --config configs/bucket_sort.py:paper --workdir runs/bucket_sort_paper
  python -m bifocal_jax.tasks --config configs/bucket_sort.py --split test_length --num 5 --format che

Variants: default (CPU-sized), `tiny` (tests), `paper` (5 layers, width 64,
8 heads, batch 128; for an accelerator). See `configs/_chomsky.py`.
"""

from configs import _chomsky


def get_config(arg=None):
  return _chomsky.get_config("bucket_sort", arg)
