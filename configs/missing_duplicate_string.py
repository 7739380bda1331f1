r"""Chomsky-hierarchy task `missing_duplicate_string` (context-sensitive; Deletang
et al., ICLR 2023), as their code defines it: the bit hidden in a bit string
written twice. See `bifocal_jax.tasks.chomsky`.

  python train.py --config configs/missing_duplicate_string.py --workdir runs/missing_duplicate_string
  python train.py --config configs/missing_duplicate_string.py:tiny --workdir /tmp/missing_duplicate_string_tiny
  python train.py --config configs/missing_duplicate_string.py:paper --workdir runs/missing_duplicate_string_paper
  python -m bifocal_jax.tasks --config configs/missing_duplicate_string.py --split test_length --num 5 --format che

Variants: default (CPU-sized), `tiny` (tests), `paper` (5 layers, width 64,
8 heads, batch 128; for an accelerator). See `configs/_chomsky.py`.
"""

from configs import _chomsky


def get_config(arg=None):
  return _chomsky.get_config("missing_duplicate_string", arg)
