r"""Chomsky-hierarchy `even_pairs`: the parity of a bit string's 01/10 pairs.

Regular; Deletang et al., ICLR 2023, as their code defines it: whether a bit string has an
odd number of `01`/`10` pairs. See `bifocal_jax.tasks.chomsky`.

  python -m bifocal_jax.train --config even_pairs --workdir runs/even_pairs
  python -m bifocal_jax.train --config even_pairs:tiny --workdir /tmp/even_pairs_tiny
  python -m bifocal_jax.train --config even_pairs:paper --workdir runs/even_pairs_paper
  python -m bifocal_jax.tasks --config even_pairs --split test_length --num 5 --format che

Variants: default (CPU-sized), `tiny` (tests), `paper` (5 layers, width 64,
8 heads, batch 128; for an accelerator). See `_chomsky.py`.
"""

from bifocal_jax.configs import _chomsky

VARIANTS = _chomsky.VARIANTS


def get_config(arg=None):
  return _chomsky.get_config("even_pairs", arg)
