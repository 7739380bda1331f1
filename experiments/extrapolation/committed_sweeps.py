"""Each sweep's committed run summaries, and the numbers the summary quotes from them.

`load(name)` reads `results/<name>/` (the summaries and `budgets.json`) into a
`Sweep`: its cells by task, the seeds its preset plans for each cell, and the
values of a split in the leaderboards' metric. The helpers format those values
as the report does (`fmt_interval` without its bold, means to three decimals),
pair two cells over the seeds both have (`stats.paired_difference`), and give
each learnable-spectrum kind's paired difference from RoPE on the held-out
splits (`held_out_comparisons`).
"""

from __future__ import annotations

import collections
import dataclasses
import os

import numpy as np

from bifocal_jax.evaluation import stats
from experiments.extrapolation import leaderboard_report
from experiments.extrapolation import presets as presets_lib
from experiments.extrapolation import runs as runs_lib
from experiments.extrapolation.report_tables import fmt_interval, metric_value
from experiments.extrapolation.run_summary import cells, load_budgets, load_summaries

PRESET_NAMES = ("cpu", "converged", "converged_chomsky")
LEARNABLE = ("bifocal_heads", "bifocal_pairs", "spectral")
REFERENCE = "rope"


@dataclasses.dataclass
class Sweep:
  """One preset's committed summaries: `table` `{task: {(arm, group): {seed:
  summary}}}`, and `planned` `{(task, arm, group): seeds}` (the runs the
  preset makes for its learned tasks)."""
  name: str
  results_dir: str
  preset: object
  table: dict
  budgets: dict
  planned: dict

  def groups(self, task: str) -> dict:
    return self.table.get(task, {})

  def scratch(self, task: str) -> dict:
    return {g: runs for (arm, g), runs in self.groups(task).items() if arm == "scratch"}

  def held_out(self, task: str) -> list[str]:
    splits = dict.fromkeys(split for runs in self.groups(task).values() for s in runs.values()
                           for split in s["splits"])
    return [s for s in splits if s != "valid"]

  def metric(self, task: str) -> str:
    return leaderboard_report._metric(self.scratch(task), self.held_out(task)[0])  # pylint: disable=protected-access

  def values(self, task: str, split: str, arm: str = "scratch") -> dict[str, dict[int, float]]:
    """{group: {seed: value}} on `split` in the leaderboards' metric."""
    metric = self.metric(task)
    return {g: v for (a, g), runs in self.groups(task).items() if a == arm
            if (v := {seed: x for seed, s in runs.items()
                      if (x := metric_value(s, split, metric)) is not None})}

  def overall(self, task: str) -> dict[str, dict[int, float]]:
    """Each seed's mean over the held-out splits (the leaderboards' last board)."""
    held = self.held_out(task)
    by_split = {split: self.values(task, split) for split in held}
    out = {kind: {seed: float(np.mean([by_split[s][kind][seed] for s in held]))
                  for seed in runs if all(seed in by_split[s].get(kind, {}) for s in held)}
           for kind, runs in self.scratch(task).items()}
    return {kind: v for kind, v in out.items() if v}

  def seeds(self, task: str, group: str, arm: str = "scratch") -> tuple[int, int]:
    """(landed, planned) seeds of a cell."""
    landed = len(self.groups(task).get((arm, group), {}))
    return landed, len(self.planned.get((task, arm, group), ())) or landed

  def label(self, task: str, group: str, arm: str = "scratch") -> str:
    """`group`, with "(3 of 5 seeds)" where the cell still lacks seeds."""
    landed, planned = self.seeds(task, group, arm)
    return f"`{group}`" + (f" ({landed} of {planned} seeds)" if landed < planned else "")

  def pending(self) -> list[tuple[str, str, str, list[int], list[int]]]:
    """(task, arm, group, seeds landed, seeds planned) of every cell short of seeds."""
    out = []
    for (task, arm, group), planned in self.planned.items():
      landed = sorted(self.groups(task).get((arm, group), {}))
      if len(landed) < len(planned):
        out.append((task, arm, group, landed, sorted(planned)))
    return out


def load(name: str, results_root: str = runs_lib.RESULTS_DIR) -> Sweep:
  results_dir = os.path.join(results_root, name)
  preset = presets_lib.PRESETS[name].resolved(results_dir)
  return of(name, results_dir, preset, cells(load_summaries(results_dir)),
            load_budgets(results_dir))


def of(name: str, results_dir: str, preset, table: dict, budgets: dict) -> Sweep:
  """The `Sweep` of summaries already read (`table`, `budgets`) for `preset`
  resolved against `results_dir`: what `report` has in hand."""
  planned = collections.defaultdict(set)
  for run in preset.runs():
    if not preset.calibrated or (budgets.get(run.task.name) or {}).get("budget"):
      planned[(run.task.name, run.arm, run.group)].add(run.seed)
  return Sweep(name, results_dir, preset, table, budgets, dict(planned))


# --- numbers, as the report formats them -----------------------------------

def iv(out: dict | None, signed: bool = False) -> str:
  """`fmt_interval` without its bold."""
  return fmt_interval(out, signed=signed).replace("**", "")


def mean(values: dict[int, float]) -> str:
  return f"{stats.seed_interval(list(values.values()))['mean']:.3f}"


def interval(values: dict[int, float]) -> str:
  return iv(stats.seed_interval(list(values.values())))


def minus(mine: dict[int, float], other: dict[int, float]) -> dict | None:
  """`mine - other` paired over the seeds both have (the leaderboards' column)."""
  return leaderboard_report._minus(mine, other)  # pylint: disable=protected-access


def ranked(values: dict[str, dict[int, float]]) -> list[str]:
  return sorted(values, key=lambda kind: -float(np.mean(list(values[kind].values()))))


def paired(groups: dict, a: tuple[str, str], b: tuple[str, str], value) -> dict | None:
  """`a - b` over the seeds both cells have a `value(summary)` for (the
  report's paired tables)."""
  if a not in groups or b not in groups:
    return None
  va, vb = ({s: v for s, summary in groups[key].items() if (v := value(summary)) is not None}
            for key in (a, b))
  common = sorted(set(va) & set(vb))
  if not common:
    return None
  return stats.paired_difference([va[s] for s in common], [vb[s] for s in common])


def final_loss(summary: dict):
  return summary.get("final_train_loss")


def join(items: list[str], empty: str = "none") -> str:
  items = list(items)
  if not items:
    return empty
  return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def task_name(sweep: Sweep, task: str) -> str:
  return f"`{task}`"


def held_out_comparisons(sweep: Sweep, task: str, kinds=LEARNABLE):
  """[(kind, split, paired difference from RoPE)] on the held-out splits."""
  out = []
  for split in sweep.held_out(task):
    values = sweep.values(task, split)
    for kind in kinds:
      if kind in values and REFERENCE in values:
        out.append((kind, split, minus(values[kind], values[REFERENCE])))
  return out

