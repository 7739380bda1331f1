r"""Chomsky-hierarchy `duplicate_string`: a bit string written twice.

Context-sensitive; Deletang et al., ICLR 2023, as their code defines it: a bit string
written twice. See `bifocal_jax.tasks.chomsky`.

  python -m bifocal_jax.train --config duplicate_string --workdir runs/duplicate_string
  python -m bifocal_jax.train --config duplicate_string:tiny --workdir /tmp/duplicate_string_tiny
  python -m bifocal_jax.train --config duplicate_string:paper --workdir runs/duplicate_string_paper
  python -m bifocal_jax.tasks --config duplicate_string --split test_length --num 5 --format che

Variants: default (CPU-sized), `tiny` (tests), `paper` (5 layers, width 64,
8 heads, batch 128; for an accelerator). See `_chomsky.py`.
"""

from bifocal_jax.configs import _chomsky

VARIANTS = _chomsky.VARIANTS


def get_config(arg=None):
  return _chomsky.get_config("duplicate_string", arg)
