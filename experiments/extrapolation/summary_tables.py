"""RESULTS.md's tables, computed from the sweeps.

  * `compact_board`: a task's leaderboards in one table (the first `TOP`
    kinds and `ALWAYS`, ranked by the mean over the held-out splits; **bold**
    where the paired difference from RoPE excludes zero);
  * `size_table`: each kind's mean at two model sizes;
  * `pending_table`: the cells with fewer seeds than their preset plans;
  * `not_run`: the tasks of calibrated presets left out (not learned at the
    budget, or not calibrated).
"""

from __future__ import annotations

from experiments.extrapolation.committed_sweeps import (
    LEARNABLE, REFERENCE, Sweep, join, mean, minus, ranked)
from experiments.extrapolation.report_tables import markdown_table

# Rows of a compact leaderboard: the first kinds, then these wherever they rank.
TOP = 8
ALWAYS = (REFERENCE, *LEARNABLE)


def compact_board(sweep: Sweep, task: str) -> str:
  """The leaderboards in one table: rows by the mean over the held-out
  splits (each seed's; the leaderboards' last board), the first `TOP` kinds
  and `ALWAYS`; each held-out split's mean over seeds, **bold** where the
  paired difference from RoPE excludes zero."""
  held = sweep.held_out(task)
  overall = sweep.overall(task)
  order = ranked(overall)
  by_split = {split: sweep.values(task, split) for split in held}
  shown = [k for i, k in enumerate(order) if i < TOP or k in ALWAYS]
  header = ["rank", "position", "seeds", *(f"`{s}`" for s in held),
            *(["mean over them"] if len(held) > 1 else [])]
  rows = [header, ["---"] * len(header)]
  for kind in shown:
    landed, planned = sweep.seeds(task, kind)
    cells_ = []
    for split in held:
      v = by_split[split].get(kind)
      if not v:
        cells_.append("-")
        continue
      d = minus(v, by_split[split].get(REFERENCE, {})) if kind != REFERENCE else None
      cells_.append(f"**{mean(v)}**" if d is not None and d["decided"] else mean(v))
    if len(held) > 1:
      d = minus(overall[kind], overall.get(REFERENCE, {})) if kind != REFERENCE else None
      cells_.append(f"**{mean(overall[kind])}**" if d is not None and d["decided"]
                    else mean(overall[kind]))
    rows.append([str(order.index(kind) + 1), kind,
                 f"{landed}" + (f" of {planned}" if landed < planned else ""), *cells_])
  more = len(order) - len(shown)
  return markdown_table(rows) + (f"\n\n{more} more kinds, each split's full leaderboard with "
                                 "intervals and step times: the page." if more else "")


def size_table(sweep: Sweep, small: str, large: str) -> str:
  kinds = [k for k in sweep.scratch(large) if k in sweep.scratch(small)]
  splits = [s for s in sweep.held_out(large) if s in sweep.held_out(small)]
  header = ["position", *(f"`{s}`: 2 -> 5 layers" for s in splits)]
  rows = [header, ["---"] * len(header)]
  for kind in kinds:
    rows.append([kind, *(f"{mean(sweep.values(small, s)[kind])} -> "
                         f"{mean(sweep.values(large, s)[kind])}" for s in splits)])
  return markdown_table(rows)


def pending_table(sweeps: dict[str, Sweep]) -> str:
  header = ["sweep", "task", "cell", "seeds landed", "seeds planned"]
  rows = [header, ["---"] * len(header)]
  for sweep in sweeps.values():
    for task, arm, group, landed, planned in sweep.pending():
      rows.append([f"`{sweep.name}`", task, f"{group} ({arm})",
                   ", ".join(map(str, landed)) or "none", ", ".join(map(str, planned))])
  return markdown_table(rows) if len(rows) > 2 else "None: every cell has its seeds."


def not_run(sweeps: dict[str, Sweep]) -> list[str]:
  out = []
  for sweep in sweeps.values():
    if not sweep.preset.calibrated:
      continue
    unlearned = [t.name for t in sweep.preset.tasks
                 if t.name in sweep.budgets and not sweep.budgets[t.name].get("budget")]
    uncalibrated = [t.name for t in sweep.preset.tasks if t.name not in sweep.budgets]
    if unlearned:
      out.append(f"`{sweep.name}`: {len(unlearned)} tasks its model does not learn in "
                 f"distribution at the calibrated budget, left out of the verdicts "
                 f"({join([f'`{t}`' for t in unlearned])}).")
    if uncalibrated:
      out.append(f"`{sweep.name}`: {join([f'`{t}`' for t in uncalibrated])} not calibrated "
                 "and not run (too long for this CPU).")
  return out

