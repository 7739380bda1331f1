"""What a scheme's fix changed: its withdrawn summaries (`superseded.py`)
against their reruns on the same seeds.

`section(sweep, cells)` is the preset page's section: per rerun cell and
held-out split, the mean before and after over the seeds both have, the
paired difference (after - before), and the cell's call against RoPE before
and after (ahead, behind, or not told apart: the paired interval over seeds);
then the conclusions that moved: calls against RoPE that changed, and splits
whose first kind changed when the superseded cells are put back.
`verdict(sweep, cells)` is RESULTS.md's line with the same numbers. While a
rerun cell lacks some of the seeds withdrawn from it, both say so: its
conclusions are provisional.
"""

from __future__ import annotations

import dataclasses

from experiments.extrapolation.committed_sweeps import REFERENCE, Sweep, join, mean, minus, ranked
from experiments.extrapolation.report_tables import METRIC_NAMES, fmt_interval, markdown_table


def _cells_by_task(sweep: Sweep, cells: list[dict]) -> dict[str, list[dict]]:
  """The superseded cells of the tasks `sweep` has, in the sweep's task order."""
  out = {}
  for task in sweep.table:
    mine = [c for c in cells if c["task"] == task]
    if mine:
      out[task] = mine
  return out


def before(sweep: Sweep, cells: list[dict]) -> Sweep:
  """`sweep` with each superseded cell's old summaries in place of its
  reruns, on the seeds rerun so far: before and after hold the same seeds (a
  cell not rerun yet is in neither)."""
  table = {task: dict(groups) for task, groups in sweep.table.items()}
  for c in cells:
    if c["task"] in table and (rerun := table[c["task"]].get((c["arm"], c["group"]))):
      table[c["task"]][(c["arm"], c["group"])] = {
          seed: summary for seed, summary in c["seeds"].items() if seed in rerun}
  return dataclasses.replace(sweep, table=table)


def _call(sweep: Sweep, task: str, split: str, kind: str) -> str:
  """`kind` against RoPE on `split`: "ahead", "behind" or "not told apart"."""
  values = sweep.values(task, split)
  diff = minus(values.get(kind, {}), values.get(REFERENCE, {}))
  if diff is None or not diff.get("decided"):
    return "not told apart"
  return "ahead" if diff["mean"] > 0 else "behind"


def moved(sweep: Sweep, cells: list[dict]) -> tuple[list[str], list[str]]:
  """(calls against RoPE that changed, splits whose first kind changed), as phrases."""
  old = before(sweep, cells)
  calls, leaders = [], []
  for task, mine in _cells_by_task(sweep, cells).items():
    for split in sweep.held_out(task):
      for c in mine:
        was, now = _call(old, task, split, c["group"]), _call(sweep, task, split, c["group"])
        if was != now and c["group"] != REFERENCE:
          calls.append(f"`{c['group']}` on `{task}` `{split}` {was} -> {now}")
      first_was, first_now = (ranked(s.values(task, split))[:1] for s in (old, sweep))
      if first_was != first_now:
        leaders.append(f"`{task}` `{split}` `{first_was[0]}` -> `{first_now[0]}`")
  return calls, leaders


def _short(sweep: Sweep, cells: list[dict]) -> list[str]:
  """The rerun cells that lack some of the seeds withdrawn from them."""
  out = []
  for c in cells:
    rerun = sweep.groups(c["task"]).get((c["arm"], c["group"]), {})
    if c["task"] in sweep.table and set(c["seeds"]) - set(rerun):
      out.append(f"`{c['group']}` ({len(set(rerun) & set(c['seeds']))} of {len(c['seeds'])} "
                 f"seeds) on `{c['task']}`")
  return out


def _task_table(sweep: Sweep, task: str, mine: list[dict]) -> str:
  old = before(sweep, mine)
  rows = [["position", "split", "seeds", "before", "after", "after - before",
           "vs RoPE before", "vs RoPE after"], ["---"] * 8]
  for c in mine:
    for split in sweep.held_out(task):
      was = old.values(task, split, c["arm"]).get(c["group"], {})
      now = sweep.values(task, split, c["arm"]).get(c["group"], {})
      seeds = sorted(set(was) & set(now))
      if not seeds:
        continue
      was, now = {s: was[s] for s in seeds}, {s: now[s] for s in seeds}
      rows.append([f"`{c['group']}`", f"`{split}`", str(len(seeds)),
                   mean(was), mean(now),
                   fmt_interval(minus(now, was), signed=True),
                   _call(old, task, split, c["group"]), _call(sweep, task, split, c["group"])])
  return markdown_table(rows) if len(rows) > 2 else ""


def section(sweep: Sweep, cells: list[dict]) -> str:
  """The page's section on what the fixes changed (empty without superseded cells)."""
  by_task = _cells_by_task(sweep, cells)
  if not by_task:
    return ""
  reasons = {}
  for c in cells:
    reasons.setdefault((c["why"], c["commit"][:7]), {}).setdefault(c["group"], []).append(
        f"`{c['task']}`")
  parts = ["### What the fixes changed", "",
           "Summaries withdrawn when their scheme was fixed, kept as data in "
           "[`superseded.json`](superseded.json) (`experiments/extrapolation/superseded.py`), "
           "each against its rerun over the seeds both have (the calls against RoPE and the "
           "first kinds before the fix on those seeds too); **bold**: the paired interval "
           "excludes zero. Withdrawn:", "",
           *[f"- {join([f'`{k}` ({join(tasks)})' for k, tasks in sorted(kinds.items())])}: "
             f"{why} (read at {commit})" for (why, commit), kinds in reasons.items()], ""]
  for task, mine in by_task.items():
    table = _task_table(sweep, task, mine)
    if table:
      parts += [f"`{task}`, {METRIC_NAMES[sweep.metric(task)]}:", "", table, ""]
  parts.append(verdict(sweep, cells))
  return "\n".join(parts)


def verdict(sweep: Sweep, cells: list[dict]) -> str:
  """RESULTS.md's line on what the fixes changed."""
  by_task = _cells_by_task(sweep, cells)
  withdrawn = [c for mine in by_task.values() for c in mine]
  rerun = sum(1 for c in withdrawn if sweep.groups(c["task"]).get((c["arm"], c["group"])))
  if not rerun:
    return (f"**What the fixes of schemes changed in `{sweep.name}`**: none of its "
            f"{len(withdrawn)} withdrawn cells rerun yet ({join(_short(sweep, cells))}).")
  calls, leaders = moved(sweep, cells)
  short = _short(sweep, cells)
  text = (f"**What the fixes of schemes changed in `{sweep.name}`** ({rerun} of the "
          f"{len(withdrawn)} withdrawn cells rerun so far, compared on the same seeds): "
          + ("against RoPE, " + join(calls) + "; " if calls else
             "no call against RoPE moved; ")
          + ("first on a held-out split, " + join(leaders) + "." if leaders else
             "no held-out split changed its first kind."))
  if short:
    text += f" Provisional: {join(short)} have not all landed."
  return text
