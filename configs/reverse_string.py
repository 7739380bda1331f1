r"""Chomsky-hierarchy task `reverse_string` (deterministic context-free; Deletang
et al., ICLR 2023), as their code defines it: a bit string reversed. See
`bifocal_jax.tasks.chomsky`.

  python train.py --config configs/reverse_string.py --workdir runs/reverse_string
  python train.py --config configs/reverse_string.py:tiny --workdir /tmp/reverse_string_tiny
  python train.py --config configs/reverse_string.py:paper --workdir runs/reverse_string_paper
  python -m bifocal_jax.tasks --config configs/reverse_string.py --split test_length --num 5 --format che

Variants: default (CPU-sized), `tiny` (tests), `paper` (5 layers, width 64,
8 heads, batch 128; for an accelerator). See `configs/_chomsky.py`.
"""

from configs import _chomsky


def get_config(arg=None):
  return _chomsky.get_config("reverse_string", arg)
