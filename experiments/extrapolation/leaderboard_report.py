"""The leaderboards: per held-out split, the scratch kinds ranked.

Each kind's mean over seeds with its 95% interval, its paired differences from
`rope` and from the first kind (a difference is called only where its interval
excludes zero; the kinds not told apart from the first are listed), how
many seeds reach the split's target where the preset sets one (issue 31:
0.99 closing-bracket accuracy on Dyck's `test_depth`, 0.90 on
`k8_m20.test`), and the kind's training step time over RoPE's from the step
benchmark (`step_costs`): what a kind costs beside what it buys. With two
targets on a task, a plot of every kind on one target split against the
other (`targets_plot`).
"""

from __future__ import annotations

import json
import os

import numpy as np

from bifocal_jax.evaluation import stats
from experiments.extrapolation import plot_style
from experiments.extrapolation import runs as runs_lib
from experiments.extrapolation.report_tables import (
    METRIC_NAMES, fmt_interval, markdown_table, metric_value, seed_values)

# Training step time against RoPE's, each file against its own RoPE, comma-separated;
# the first file that has a kind gives it: the kinds changed by the roster-fidelity fix
# and the pre-registered question's candidates, every kind before the fix
# (`step_benchmark.py --kinds=all`), then the mixed kinds chosen from the rosters.
STEP_COSTS_FILE = ",".join(
    os.path.join(runs_lib.BENCHMARK_RESULTS, name)
    for name in ("step_after_fidelity.json", "step_all_kinds.json", "step_mixed_chosen.json"))


def step_costs(paths: str = STEP_COSTS_FILE) -> tuple[tuple[str, ...], dict[str, list[float]]]:
  """`step_benchmark.py` results' training step time of each `position.kind`
  over RoPE's, measured in the same run: (their configs, {kind: [ratio per
  config]}). `paths`: comma-separated files; a kind comes from the first file
  that measured it; files that are absent are left out (none: ((), {})). A
  malformed file, or files of different configs, is a one-line ValueError."""
  configs, kinds = (), {}
  for path in paths.split(","):
    if not os.path.exists(path):
      continue
    try:
      with open(path) as f:
        results = json.load(f)["results"]
      these = tuple(r["config"] for r in results)
      found = {"rope": [1.0] * len(results), "bifocal": [r["bifocal_over_rope"] for r in results]}
      for kind in results[0]["kinds_over_rope"]:
        found[kind] = [r["kinds_over_rope"][kind] for r in results]
    except (ValueError, KeyError, TypeError, IndexError) as e:
      raise ValueError(f"{path}: not a step_benchmark.py result with kinds_over_rope "
                       f"({type(e).__name__}: {e})") from None
    if configs and these != configs:
      raise ValueError(f"{path}: its configs {list(these)} are not the first file's "
                       f"{list(configs)}")
    configs = these
    kinds = {**found, **kinds}
  return configs, kinds


def _step_cost(runs: dict[int, dict], costs: dict[str, list[float]]) -> str:
  """`1.05x / 0.94x`: a cell's kind's step time over RoPE's per benchmark
  config, or `-` for a kind the benchmark did not measure."""
  kind = runs_lib.kind_overrides(next(iter(runs.values()))["kind"])["position.kind"]
  return " / ".join(f"{r:.2f}x" for r in costs[kind]) if kind in costs else "-"


def _minus(mine: dict, other: dict) -> dict | None:
  """`mine - other`, paired over the seeds both have (None: none, or the same)."""
  common = sorted(set(mine) & set(other))
  if mine is other or not common:
    return None
  return stats.paired_difference([mine[s] for s in common], [other[s] for s in common])


def _board(values: dict[str, dict[int, float]], target: float | None, split: str,
           scratch: dict, costs: tuple[tuple[str, ...], dict[str, list[float]]]) -> list[str]:
  """One leaderboard's lines: `values` `{kind: {seed: accuracy}}` ranked by
  mean, the kinds not told apart from the first, and with a `target` the
  seeds reaching it on `split`."""
  configs, kind_costs = costs
  header = ["rank", "position", "seeds", "mean [95% interval]", "minus rope (paired)",
            "minus #1 (paired)",
            *([f"seeds >= {target:g}"] if target is not None else []),
            *([f"step time / rope ({' / '.join(configs)})"] if kind_costs else [])]
  rows = [header, ["---"] * len(header)]
  ranked = sorted(values, key=lambda kind: -float(np.mean(list(values[kind].values()))))
  reached, level = [], []
  leader, rope = values[ranked[0]], values.get("rope", {})
  for rank, kind in enumerate(ranked, 1):
    mine = values[kind]
    behind = _minus(mine, leader)
    if behind is not None and not behind.get("decided"):
      level.append(kind)
    row = [str(rank), kind, str(len(mine)), fmt_interval(stats.seed_interval(list(mine.values()))),
           fmt_interval(_minus(mine, rope), signed=True), fmt_interval(behind, signed=True)]
    if target is not None:
      hits = sum(v >= target for v in mine.values())
      row.append(f"{hits}/{len(mine)}")
      if hits:
        reached.append(f"{kind} ({hits}/{len(mine)})")
    if kind_costs:
      row.append(_step_cost(scratch[kind], kind_costs))
    rows.append(row)
  lines = [markdown_table(rows), "",
           f"Not told apart from the first, {ranked[0]} (the paired interval includes zero): "
           f"{', '.join(level) or 'no kind'}."]
  if target is not None:
    lines += ["", f"Reaching {target:g} on `{split}` (any seed): "
              f"{', '.join(reached) if reached else 'no kind'}."]
  return lines


def leaderboard(groups: dict, splits: list[str], targets: dict[str, float],
                costs: tuple[tuple[str, ...], dict[str, list[float]]] = ((), {})) -> str:
  """Per held-out split (every split but `valid`), the scratch kinds ranked by
  their mean over seeds (closing-bracket accuracy where the summaries carry
  it, else token accuracy), each with its 95% interval and its paired
  difference from `rope` (bold: decided); a split in `targets` adds how many
  seeds reach its target, and a line saying whether any kind does; then the
  same ranking of each seed's mean over the held-out splits. With `costs`
  (`step_costs()`), a column of each kind's step time over RoPE's."""
  scratch = {key[1]: runs for key, runs in groups.items() if key[0] == "scratch"}
  if len(scratch) < 2:
    return ""
  metric = _metric(scratch, splits[0])
  configs, kind_costs = costs
  held_out = [s for s in splits if s != "valid"]
  by_split = {split: {kind: v for kind, runs in scratch.items()
                      if (v := seed_values(runs, split, metric))} for split in held_out}
  parts = []
  for split in held_out:
    if by_split[split]:
      parts += [f"`{split}`:", "", *_board(by_split[split], targets.get(split), split, scratch,
                                           costs), ""]
  # Each seed's mean over the splits: one ranking for a user who wants one pick.
  overall = {kind: {seed: float(np.mean([by_split[s][kind][seed] for s in held_out]))
                    for seed in scratch[kind]
                    if all(seed in by_split[s].get(kind, {}) for s in held_out)}
             for kind in scratch}
  overall = {kind: v for kind, v in overall.items() if v}
  if len(held_out) > 1 and overall:
    parts += [f"The mean over the held-out splits ({', '.join(f'`{s}`' for s in held_out)}; "
              "each seed's mean, the seeds with all of them):", "",
              *_board(overall, None, "", scratch, costs), ""]
  if not parts:
    return ""
  name = METRIC_NAMES[metric]
  step_files = "; a kind not in the first, from the next: ".join(
      f"`{os.path.relpath(p, runs_lib.REPO)}`" for p in STEP_COSTS_FILE.split(","))
  cost = (" The step time is the training step's, over RoPE's, measured on the CPU "
          f"({step_files}, its configs "
          f"{', '.join(f'`{c}`' for c in configs)}; commands in README, Performance): what a "
          "kind costs beside what it buys (both bifocal splits: the benchmark's `bifocal`, "
          "heads split). On this shared CPU ratios within about 0.3 of "
          "each other are not told apart (one kind read 1.27x and 0.86x in two runs: README)."
          if kind_costs else "")
  return "\n".join([f"Leaderboards ({name}, scratch runs, best first; the differences from "
                    "`rope` and from the first kind over the seeds both have, **bold** where "
                    "the 95% interval excludes zero; each interval on its own, not corrected "
                    "for the table's many comparisons, and one that includes zero says the "
                    f"seeds do not tell the two apart, not that they are equal).{cost}", "",
                    *parts]).rstrip()


def _metric(scratch: dict, split: str) -> str:
  return ("close_accuracy" if any(metric_value(s, split, "close_accuracy") is not None
                                  for runs in scratch.values() for s in runs.values())
          else "accuracy")


def targets_plot(task: str, groups: dict, targets: dict[str, float], path: str) -> str | None:
  """Each scratch kind's mean on the first target split (x) against the
  second (y), with its seed intervals as error bars and the targets as
  dashed lines: where every kind stands against both at once. None unless
  `targets` names exactly two splits some kind has."""
  if len(targets) != 2:
    return None
  (split_x, target_x), (split_y, target_y) = targets.items()
  scratch = {key[1]: runs for key, runs in groups.items() if key[0] == "scratch" and runs}
  points = {}
  for kind, runs in scratch.items():
    x = seed_values(runs, split_x, _metric(scratch, split_x))
    y = seed_values(runs, split_y, _metric(scratch, split_y))
    if x and y:
      points[kind] = (stats.seed_interval(list(x.values())), stats.seed_interval(list(y.values())))
  if not points:
    return None
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, ax = plt.subplots(figsize=(7, 5.5))
  plot_style.kinds_scatter(ax, points)
  ax.axvline(target_x, color="grey", ls="--", lw=0.8)
  ax.axhline(target_y, color="grey", ls="--", lw=0.8)
  # Room past both targets, so that a line at the edge still reads as one.
  ax.set_xlim(right=max(ax.get_xlim()[1], target_x + 0.01))
  ax.set_ylim(top=max(ax.get_ylim()[1], target_y + 0.02))
  ax.set_xlabel(f"{split_x}: {METRIC_NAMES[_metric(scratch, split_x)]} (target {target_x:g}, "
                "dashed)")
  ax.set_ylabel(f"{split_y}: {METRIC_NAMES[_metric(scratch, split_y)]} (target {target_y:g}, "
                "dashed)")
  ax.grid(alpha=0.3)
  return plot_style.save(fig, np.array([ax]), path, f"{task}: every kind against both targets "
                         "(scratch runs; mean over seeds, 95% intervals)")
