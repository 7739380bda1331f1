r"""The converged sweep's choices from the roster's results: as made, and what
the rules (`roster_rules.py`) answer on today's roster, or what it still lacks.

  python -m experiments.extrapolation.roster_choices
"""

from __future__ import annotations

import os
import sys

from experiments.extrapolation import roster_rules as rules
from experiments.extrapolation import run_summary
from experiments.extrapolation.presets import PRESETS
from experiments.extrapolation.runs import RESULTS_DIR

RESULTS = os.path.join(RESULTS_DIR, "converged")


def main() -> int:
  preset = PRESETS["converged"]
  table = run_summary.cells(run_summary.load_summaries(RESULTS))
  for what, tasks, choose, made in (
      ("five best on the 5-layer model", (rules.DYCK,), rules.five_best,
       rules.MADE.get(rules.DYCK_5LAYER)),
      ("mixed pairings", (rules.DYCK, rules.LISTOPS), rules.mixed_pairings,
       rules.MADE.get(rules.DYCK))):
    if made:
      print(f"{what}, as made: {', '.join(made)}")
    lacking = rules.missing(preset, table, tasks)
    if lacking:
      print(f"{what}, by the rule on today's roster: not yet; {len(lacking)} cells short, e.g. "
            f"{', '.join(lacking[:4])}")
    else:
      print(f"{what}, by the rule on today's roster: {', '.join(choose(table))}")
  return 0


if __name__ == "__main__":
  try:
    sys.exit(main())
  except ValueError as e:  # a malformed results file, named
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
