r"""OUR depth-controlled `modular_arithmetic_brackets`: bracketed expressions mod 5.

A variant of the Chomsky-hierarchy task `modular_arithmetic_brackets`, not a task of Deletang et al. 2023: expressions
mod 5 with operator precedence and optional brackets, whose nesting depth is
drawn first; training depth <= `task.d_train` (3), `test_length` longer
(41..500) at training depths, `test_depth` deeper (4..6) at training lengths.
See `bifocal_jax.tasks.chomsky.arithmetic_depth` for how it differs.

  python -m bifocal_jax.train --config modular_arithmetic_brackets_depth --workdir runs/modular_arithmetic_brackets_depth
  python -m bifocal_jax.train --config modular_arithmetic_brackets_depth:tiny --workdir /tmp/modular_arithmetic_brackets_depth_tiny
  python -m bifocal_jax.train --config modular_arithmetic_brackets_depth:paper --workdir runs/modular_arithmetic_brackets_depth_paper
  python -m bifocal_jax.train --config modular_arithmetic_brackets_depth --config.task.d_train=2 --workdir runs/modular_arithmetic_brackets_depth_d2

Variants: default (CPU-sized), `tiny` (tests), `paper` (5 layers, width 64,
8 heads, batch 128; for an accelerator). See `_chomsky.py`.
"""

from bifocal_jax.configs import _chomsky

VARIANTS = _chomsky.VARIANTS


def get_config(arg=None):
  return _chomsky.get_config("modular_arithmetic_brackets_depth", arg)
