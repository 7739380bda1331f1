r"""Chomsky-hierarchy `parity_check`: the parity of the ones in a bit string.

Regular; Deletang et al., ICLR 2023, as their code defines it: the parity of the ones in a
bit string. See `bifocal_jax.tasks.chomsky`.

  python -m bifocal_jax.train --config parity_check --workdir runs/parity_check
  python -m bifocal_jax.train --config parity_check:tiny --workdir /tmp/parity_check_tiny
  python -m bifocal_jax.train --config parity_check:paper --workdir runs/parity_check_paper
  python -m bifocal_jax.tasks --config parity_check --split test_length --num 5 --format che

Variants: default (CPU-sized), `tiny` (tests), `paper` (5 layers, width 64,
8 heads, batch 128; for an accelerator). See `_chomsky.py`.
"""

from bifocal_jax.configs import _chomsky

VARIANTS = _chomsky.VARIANTS


def get_config(arg=None):
  return _chomsky.get_config("parity_check", arg)
