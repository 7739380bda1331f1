"""Where a sweep stands: each part of its preset, runs planned against runs
landed, and the CPU time the rest would take at the landed runs' pace.

A table of the report (`extrapolation_report.report`), rebuilt from the
summaries alone, so a status line in RESULTS.md never has to list runs by hand.
"""

from __future__ import annotations

import collections
import statistics

from extrapolation_runs import Preset, Run
from report_tables import markdown_table


def part_of(preset: Preset, run: Run) -> str:
  """The part of `preset` that `run` belongs to, as the progress table names it."""
  task = run.task
  if run.arm in ("surgery", "continue"):
    return "the paper's protocol (surgery, continue)"
  if run.arm != "scratch":
    return f"{run.arm} arms"
  if run.kind in task.chosen_kinds:
    return "chosen from the results: " + ", ".join(f"`{k}`" for k in task.chosen_kinds)
  if run.kind in task.later_kinds:
    return f"the roster ({len(task.later_kinds)} kinds)"
  if run.seed not in preset.seeds:
    return "further seeds"
  return f"{len(task.kinds or preset.kinds)} kinds"


def _seed_range(counts: list[int]) -> str:
  low, high = min(counts), max(counts)
  return str(low) if low == high else f"{low}-{high}"


def _seconds(table: dict, task: str, arm: str, group: str) -> list[float]:
  return [s["seconds"] for s in table.get(task, {}).get((arm, group), {}).values()]


def run_seconds(table: dict, run: Run) -> float | None:
  """What `run` should take, from the landed runs: the median of its kind's
  on its task and arm; else its task's `rope` median times the kind's time
  over `rope`'s on another task where both landed (a kind's cost relative to
  RoPE carries across tasks); None when neither has landed."""
  own = _seconds(table, run.task.name, run.arm, run.group)
  if own:
    return statistics.median(own)
  rope = _seconds(table, run.task.name, "scratch", "rope")
  for task in sorted(table):
    kind, base = (_seconds(table, task, run.arm, run.group),
                  _seconds(table, task, "scratch", "rope"))
    if rope and kind and base:
      return statistics.median(rope) * statistics.median(kind) / statistics.median(base)
  return None


def progress_table(preset: Preset, table: dict, budgets: dict) -> str:
  """One row per (task, part) in the order the preset runs them: runs landed
  of those planned, seeds landed per kind, the last landing, and the CPU hours
  the rest would take (`run_seconds`; `?` where a pending run has no
  estimate). Tasks whose calibration found them not learned are left out
  (their runs are never made).

  `table`: `extrapolation_report.cells` of the summaries; `budgets`: the
  calibration's records (`budgets.json`)."""
  not_learned = {name for name, record in budgets.items() if record.get("budget") is None}
  parts: dict = collections.OrderedDict()
  for run in preset.runs():
    if not (preset.calibrated and run.task.name in not_learned):
      parts.setdefault((run.task.name, part_of(preset, run)), []).append(run)
  rows = []
  for (task, part), runs in parts.items():
    landed = {r: table.get(task, {}).get((r.arm, r.group), {}).get(r.seed) for r in runs}
    done = {r: s for r, s in landed.items() if s is not None}
    seeds = collections.Counter()
    for r in runs:
      seeds[(r.arm, r.group)] += r in done
    left = [run_seconds(table, r) for r in runs if r not in done]
    hours = ("-" if not left else "not calibrated" if preset.calibrated and task not in budgets
             else "?" if None in left else f"{sum(left) / 3600:.1f}")
    rows.append([task, part, f"{len(done)} / {len(runs)}", _seed_range(list(seeds.values())),
                 max((s["date"] for s in done.values()), default="-"), hours])
  header = ["task", "part", "runs landed", "seeds landed per kind", "last landed",
            "CPU hours left (est.)"]
  return markdown_table([header, ["---"] * len(header)] + rows)


def progress_section(preset: Preset, table: dict, budgets: dict) -> str:
  """The table with what it counts and how it estimates."""
  chosen = (" Kinds the preset chooses from its results (`Preset.extend`) are counted once "
            "chosen." if preset.extend else "")
  return ("Progress, in the order the sweep runs its parts. CPU hours left: each pending run "
          "at the median time of its kind's landed runs on the task, else at its task's "
          "`rope` time scaled by the kind's cost over `rope` on another task; one core a "
          "run. Rough either way: a landed run that shared the machine recorded a longer "
          "time, and the scaling sets runs of different days and loads against each other "
          "(a kind's runs of one task can differ several-fold); `?`: a run nothing has timed "
          "yet." + chosen + "\n\n"
          + progress_table(preset, table, budgets))
