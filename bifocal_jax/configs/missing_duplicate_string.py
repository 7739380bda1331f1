r"""Chomsky-hierarchy `missing_duplicate_string`: a doubled string's hidden bit.

Context-sensitive; Deletang et al., ICLR 2023, as their code defines it: the bit hidden in
a bit string written twice. See `bifocal_jax.tasks.chomsky`.

  python -m bifocal_jax.train --config missing_duplicate_string --workdir runs/missing_duplicate_string
  python -m bifocal_jax.train --config missing_duplicate_string:tiny --workdir /tmp/missing_duplicate_string_tiny
  python -m bifocal_jax.train --config missing_duplicate_string:paper --workdir runs/missing_duplicate_string_paper
  python -m bifocal_jax.tasks --config missing_duplicate_string --split test_length --num 5 --format che

Variants: default (CPU-sized), `tiny` (tests), `paper` (5 layers, width 64,
8 heads, batch 128; for an accelerator). See `_chomsky.py`.
"""

from bifocal_jax.configs import _chomsky

VARIANTS = _chomsky.VARIANTS


def get_config(arg=None):
  return _chomsky.get_config("missing_duplicate_string", arg)
