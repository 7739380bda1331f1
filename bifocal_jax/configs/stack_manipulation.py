r"""Chomsky-hierarchy `stack_manipulation`: the stack after POP/PUSH actions.

Deterministic context-free; Deletang et al., ICLR 2023, as their code defines it: the
stack after POP/PUSH actions, top first, then END. See `bifocal_jax.tasks.chomsky`.

  python -m bifocal_jax.train --config stack_manipulation --workdir runs/stack_manipulation
  python -m bifocal_jax.train --config stack_manipulation:tiny --workdir /tmp/stack_manipulation_tiny
  python -m bifocal_jax.train --config stack_manipulation:paper --workdir runs/stack_manipulation_paper
  python -m bifocal_jax.tasks --config stack_manipulation --split test_length --num 5 --format che

Variants: default (CPU-sized), `tiny` (tests), `paper` (5 layers, width 64,
8 heads, batch 128; for an accelerator). See `_chomsky.py`.
"""

from bifocal_jax.configs import _chomsky

VARIANTS = _chomsky.VARIANTS


def get_config(arg=None):
  return _chomsky.get_config("stack_manipulation", arg)
