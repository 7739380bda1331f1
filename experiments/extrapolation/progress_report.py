"""Where a sweep stands: each part of its preset, runs planned against runs
landed, and the CPU time the rest would take at the landed runs' pace.

A table of the report (`report.report`), rebuilt from the
summaries alone, so a status line in RESULTS.md never has to list runs by hand.
Its estimate of a run's time (`expected_seconds`) is also what `--stop_by`
expects. How good that estimate is for a kind's first run on a task:

  python -m experiments.extrapolation.progress_report --results results/converged
"""

from __future__ import annotations

import argparse
import collections
import statistics

from bifocal_jax.nn import positions
from experiments.extrapolation import leaderboard_report
from experiments.extrapolation import run_summary
from experiments.extrapolation.report_tables import markdown_table
from experiments.extrapolation.runs import Preset, Run, kind_overrides


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


def step_cost(kind: str, costs: dict[str, list[float]]) -> float | None:
  """A sweep kind's training step time over RoPE's for a run-time estimate:
  the slowest of its readings in `costs` (`leaderboard_report.step_costs`),
  for a mixed kind its slower part's (each part runs on half the heads, so
  this errs long); None if the benchmark has not timed it (or it is no kind)."""
  try:
    parts = [p.name for p in positions.parts(kind_overrides(kind)["position.kind"])]
  except ValueError:
    return None
  if any(p not in costs for p in parts):
    return None
  return max(max(costs[p]) for p in parts)


def expected_seconds(kind: str, own: list[float], scratch: dict[str, list[float]],
                     every: list[float], costs: dict[str, list[float]]) -> float | None:
  """How long a pending run of `kind` should take, from the `seconds` of
  landed runs: the median of its kind's on its task and arm (`own`); for a
  kind not run there, its `step_cost` times the task's pace, the median over
  the kinds run from scratch on the task (`scratch`: {kind: seconds}) of
  their median time over their own step cost (step times measured
  interleaved in one process, so the ratios are not one day's load against
  another's; every kind's runs, so no one kind's busy days set the pace);
  else the longest run of its task and arm (`every`); None without any."""
  if own:
    return statistics.median(own)
  cost = step_cost(kind, costs)
  paces = [statistics.median(seconds) / c for other, seconds in scratch.items()
           if seconds and (c := step_cost(other, costs)) is not None]
  if cost is not None and paces:
    return cost * statistics.median(paces)
  return max(every) if every else None


def _scratch_seconds(cells: dict) -> dict[str, list[float]]:
  """{kind: seconds of its runs from scratch} of one task's cells."""
  scratch = collections.defaultdict(list)
  for (arm, _), seeds in cells.items():
    if arm == "scratch":
      for s in seeds.values():
        scratch[s["kind"]].append(s["seconds"])
  return scratch


def first_run_check(cells: dict, costs: dict[str, list[float]]) -> dict[str, float]:
  """{kind: what `expected_seconds` expects of its first run over its median
  time} for each kind run from scratch on one task (`cells`), as if that kind
  had not run (its runs left out of the task's pace)."""
  scratch = _scratch_seconds(cells)
  out = {}
  for kind, seconds in sorted(scratch.items()):
    others = {k: v for k, v in scratch.items() if k != kind}
    expected = expected_seconds(kind, [], others, [], costs)
    if expected is not None and step_cost(kind, costs) is not None:
      out[kind] = expected / statistics.median(seconds)
  return out


def length_groups(overrides) -> int:
  """The `data.length_groups` of a run's overrides (a summary's dict, or a
  task's pairs): 1, one padded batch, where unset."""
  return dict(overrides or {}).get("data.length_groups", 1)


def trained_alike(cells: dict, groups: int) -> dict:
  """One task's cells, only the runs trained in `groups` length groups
  (`length_groups.py`: the same update, another step time), when any was;
  else all of them."""
  alike = {key: {seed: s for seed, s in seeds.items()
                 if length_groups(s.get("overrides")) == groups}
           for key, seeds in cells.items()}
  alike = {key: seeds for key, seeds in alike.items() if seeds}
  return alike or cells


def run_seconds(table: dict, run: Run, costs: dict[str, list[float]]) -> float | None:
  """`expected_seconds` of `run` from the summaries' cells (`table`): those
  trained in the run's length groups where any was (`trained_alike`)."""
  cells = trained_alike(table.get(run.task.name, {}), length_groups(run.task.overrides))
  return expected_seconds(
      run.kind, [s["seconds"] for s in cells.get((run.arm, run.group), {}).values()],
      _scratch_seconds(cells),
      [s["seconds"] for (arm, _), seeds in cells.items() if arm == run.arm
       for s in seeds.values()], costs)


def progress_table(preset: Preset, table: dict, budgets: dict,
                   costs: dict[str, list[float]] | None = None) -> str:
  """One row per (task, part) in the order the preset runs them: runs landed
  of those planned, seeds landed per kind, the last landing, and the CPU hours
  the rest would take (`run_seconds`; `?` where a pending run has no
  estimate). Tasks whose calibration found them not learned are left out
  (their runs are never made).

  `table`: `run_summary.cells` of the summaries; `budgets`: the
  calibration's records (`budgets.json`); `costs`: each kind's step times over
  RoPE's (`leaderboard_report.step_costs`)."""
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
    left = [run_seconds(table, r, costs or {}) for r in runs if r not in done]
    hours = ("-" if not left else "not calibrated" if preset.calibrated and task not in budgets
             else "?" if None in left else f"{sum(left) / 3600:.1f}")
    rows.append([task, part, f"{len(done)} / {len(runs)}", _seed_range(list(seeds.values())),
                 max((s["date"] for s in done.values()), default="-"), hours])
  header = ["task", "part", "runs landed", "seeds landed per kind", "last landed",
            "CPU hours left (est.)"]
  return markdown_table([header, ["---"] * len(header)] + rows)


def progress_section(preset: Preset, table: dict, budgets: dict,
                     costs: dict[str, list[float]] | None = None) -> str:
  """The table with what it counts and how it estimates."""
  chosen = (" Kinds the preset chooses from its results (`Preset.extend`) are counted once "
            "chosen." if preset.extend else "")
  return ("Progress, in the order the sweep runs its parts. CPU hours left: each pending run "
          "at the median time of its kind's landed runs on the task and arm; for a kind "
          "not run there, at the kind's training step time over RoPE's (the step "
          "benchmark's slower config) times the task's pace (the median over its kinds "
          "of their median time over their own step time); else at the task and arm's "
          "longest run; one core a run. Rough: a landed run that shared the machine "
          "recorded a longer time (a kind's runs of one task differ up to several-fold); "
          "`?`: a run nothing has timed yet." + chosen + "\n\n"
          + progress_table(preset, table, budgets, costs))


def main(argv: list[str] | None = None) -> None:
  """Per task: `first_run_check`'s ratios (expected over taken), their median and range."""
  parser = argparse.ArgumentParser(description=main.__doc__)
  parser.add_argument("--results", required=True, help="A preset's results directory.")
  parser.add_argument("--step_costs", default=leaderboard_report.STEP_COSTS_FILE)
  args = parser.parse_args(argv)
  _, costs = leaderboard_report.step_costs(args.step_costs)
  table = run_summary.cells(run_summary.load_summaries(args.results))
  for task in sorted(table):
    ratios = first_run_check(table[task], costs)
    if ratios:
      values = sorted(ratios.values())
      print(f"{task}: {len(values)} kinds, each expected (as if not yet run) at "
            f"{statistics.median(values):.2f}x its median time "
            f"(range {values[0]:.2f}-{values[-1]:.2f}x)")


if __name__ == "__main__":
  main()
