r"""Chomsky-hierarchy `bucket_sort`: a string over 0..4, sorted.

Context-sensitive; Deletang et al., ICLR 2023, as their code defines it: a string over
0..4, sorted. See `bifocal_jax.tasks.chomsky`.

  python -m bifocal_jax.train --config bucket_sort --workdir runs/bucket_sort
  python -m bifocal_jax.train --config bucket_sort:tiny --workdir /tmp/bucket_sort_tiny
  python -m bifocal_jax.train --config bucket_sort:paper --workdir runs/bucket_sort_paper
  python -m bifocal_jax.tasks --config bucket_sort --split test_length --num 5 --format che

Variants: default (CPU-sized), `tiny` (tests), `paper` (5 layers, width 64,
8 heads, batch 128; for an accelerator). See `_chomsky.py`.
"""

from bifocal_jax.configs import _chomsky

VARIANTS = _chomsky.VARIANTS


def get_config(arg=None):
  return _chomsky.get_config("bucket_sort", arg)
