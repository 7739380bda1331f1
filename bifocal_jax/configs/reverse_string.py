r"""Chomsky-hierarchy `reverse_string`: a bit string reversed.

Deterministic context-free; Deletang et al., ICLR 2023, as their code defines it: a bit
string reversed. See `bifocal_jax.tasks.chomsky`.

  python -m bifocal_jax.train --config reverse_string --workdir runs/reverse_string
  python -m bifocal_jax.train --config reverse_string:tiny --workdir /tmp/reverse_string_tiny
  python -m bifocal_jax.train --config reverse_string:paper --workdir runs/reverse_string_paper
  python -m bifocal_jax.tasks --config reverse_string --split test_length --num 5 --format che

Variants: default (CPU-sized), `tiny` (tests), `paper` (5 layers, width 64,
8 heads, batch 128; for an accelerator). See `_chomsky.py`.
"""

from bifocal_jax.configs import _chomsky

VARIANTS = _chomsky.VARIANTS


def get_config(arg=None):
  return _chomsky.get_config("reverse_string", arg)
