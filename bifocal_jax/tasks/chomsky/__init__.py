"""The 15 tasks of the Chomsky-hierarchy benchmark (Deletang et al., ICLR 2023),
as their code defines them, and our depth-controlled arithmetic variant.

One module per level of the hierarchy, as theirs: `regular` (even_pairs,
modular_arithmetic, parity_check, cycle_navigation), `dcf` (deterministic
context-free: modular_arithmetic_brackets, reverse_string, solve_equation,
stack_manipulation), `cs` (context-sensitive: duplicate_string,
missing_duplicate_string, odds_first, binary_addition, binary_multiplication,
compute_sqrt, bucket_sort); `arithmetic_depth` holds our variant
(`modular_arithmetic_brackets_depth`), and `common` the layout, splits and id
space they share. Each task's docstring says where its original's docstring
and code disagree (we follow the code).
"""

import ml_collections

from bifocal_jax.tasks.chomsky import arithmetic_depth, common, cs, dcf, regular
from bifocal_jax.tasks.chomsky.common import ChomskyTask

ORIGINAL_TASKS = (*regular.TASKS, *dcf.TASKS, *cs.TASKS)
TASKS = (*ORIGINAL_TASKS, arithmetic_depth.ModularArithmeticBracketsDepth)


def default_config(name: str) -> ml_collections.ConfigDict:
  """Every key task `name` accepts, with its defaults."""
  if name == arithmetic_depth.ModularArithmeticBracketsDepth.name:
    return arithmetic_depth.default_config()
  return common.default_config(name)


__all__ = ["ChomskyTask", "ORIGINAL_TASKS", "TASKS", "default_config"]
