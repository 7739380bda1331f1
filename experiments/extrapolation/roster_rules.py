r"""The converged sweep's additions chosen from the roster's results (issue 31),
each by a rule fixed on 2026-12-04, before any roster run had landed, so that
no choice can be fitted to what the results show.

The converged preset takes them by `extend` (`presets.py`);
`python -m experiments.extrapolation.roster_choices` prints them, or what the
roster still lacks.

Both read the `converged` preset's scratch runs (the 2-layer model, every seed
of the preset) and wait until every kind of the tasks they read has every
seed; until then they choose nothing and the preset is unchanged.

- **Mixed-scheme pairings** (issue 31 item 2; `position.kind=a+b`: the first
  half of the heads one scheme, the rest the other). Bifocal attention puts
  geometric RoPE eyes beside spectral ones; the generalisation puts rotary
  eyes beside another scheme's. Candidates: the kinds run from scratch on both
  Dyck and `listops_depth` that are not rotary themselves and mix with `rope`
  and `spectral`. X: the candidate with the highest mean closing-bracket
  accuracy on Dyck's `k8_m20.test` (depth x4, lengths x30-50, the hardest
  published file); Y: the candidate other than X with the highest mean
  accuracy on `listops_depth`'s `test_depth` (the second task's depth
  split). The pairings: `rope+X`, `spectral+X` (spectral eyes beside the
  best), `rope+Y`; on both tasks, the preset's seeds, after the roster.
- **The five best on the 5-layer model** (issue 31 item 1): the five roster
  kinds (`runs.ROSTER_KINDS`) with the highest mean over seeds
  of their mean closing-bracket accuracy over Dyck's held-out splits (every
  split but `valid`); on `dyck_5layer`, the preset's seeds.

Ties go to the name first in alphabetical order.

Once made, the choices are recorded (`MADE`) and stay: a roster kind later
fixed to its source and rerun, or a kind added, changes the rules' answer on
today's roster (the command prints both) but not the registered runs.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from bifocal_jax.nn import positions
from experiments.extrapolation import run_summary
from experiments.extrapolation.runs import ROSTER_KINDS, Preset

DYCK, LISTOPS, DYCK_5LAYER = "dyck", "listops_depth", "dyck_5layer"


def scratch_cells(table: dict, task: str) -> dict[str, dict[int, dict]]:
  """{kind: {seed: summary}} of `task`'s scratch runs."""
  return {group: runs for (arm, group), runs in table.get(task, {}).items() if arm == "scratch"}


def mean_score(runs: dict[int, dict], splits: tuple[str, ...]) -> float:
  """Mean over seeds of the mean over `splits` (closing-bracket accuracy
  where a summary has it, else token accuracy)."""
  def one(summary):
    values = [r.get("close_accuracy", r["accuracy"]) for r in
              (summary["splits"][s] for s in splits)]
    return float(np.mean(values))
  return float(np.mean([one(s) for s in runs.values()]))


def ranked_first(scores: dict[str, float], count: int = 1) -> list[str]:
  return sorted(scores, key=lambda kind: (-scores[kind], kind))[:count]


def missing(preset: Preset, table: dict, tasks: tuple[str, ...]) -> list[str]:
  """The scratch cells of `tasks` (their kinds and later kinds) short of the
  preset's seeds, as `task/kind (n of N seeds)`; a task the preset lacks
  (`--tasks` left it out) counts as short, so no choice is made without it."""
  out = [f"{name} (not in the preset)" for name in tasks
         if name not in {t.name for t in preset.tasks}]
  for task in (t for t in preset.tasks if t.name in tasks):
    runs = scratch_cells(table, task.name)
    for kind in (task.kinds or preset.kinds) + task.later_kinds:
      have = len(set(runs.get(kind, {})) & set(preset.seeds))
      if have < len(preset.seeds):
        out.append(f"{task.name}/{kind} ({have} of {len(preset.seeds)} seeds)")
  return out


def mixed_pairings(table: dict) -> tuple[str, ...]:
  """`rope+X`, `spectral+X`, `rope+Y` by the module's rule, from complete cells."""
  dyck, listops = scratch_cells(table, DYCK), scratch_cells(table, LISTOPS)
  candidates = [k for k in dyck if k in listops and "+" not in k and positions.is_valid_kind(k)
                and positions.get(k).interface != "rotary"
                and all(positions.is_valid_kind(f"{eye}+{k}") for eye in ("rope", "spectral"))]
  if len(candidates) < 2:
    raise ValueError(f"mixed pairings: {len(candidates)} candidate kinds, 2 needed")
  x = ranked_first({k: mean_score(dyck[k], ("k8_m20.test",)) for k in candidates})[0]
  y = ranked_first({k: mean_score(listops[k], ("test_depth",)) for k in candidates if k != x})[0]
  return (f"rope+{x}", f"spectral+{x}", f"rope+{y}")


def five_best(table: dict) -> tuple[str, ...]:
  """The five roster kinds best on Dyck's held-out splits, from complete cells."""
  dyck = scratch_cells(table, DYCK)
  roster = [k for k in dyck if k in ROSTER_KINDS]
  if len(roster) < 5:
    raise ValueError(f"five best: {len(roster)} roster kinds on {DYCK}, 5 needed")
  held_out = tuple(s for s in next(iter(dyck[roster[0]].values()))["splits"] if s != "valid")
  return tuple(ranked_first({k: mean_score(dyck[k], held_out) for k in roster}, 5))


# What the rules chose when the roster first landed complete (its last run on
# 2026-12-05). The choices stay as made when roster kinds are later fixed to
# their sources and rerun, or kinds are added: the chosen runs are the ones
# registered, and the rules' answer on today's roster is reported beside them
# (`roster_choices.py`), not substituted.
MADE = {
    DYCK_5LAYER: ("kerple_power", "fox", "stickbreaking", "kerple_log", "path"),
    DYCK: ("rope+stickbreaking", "spectral+stickbreaking", "rope+path"),
    LISTOPS: ("rope+stickbreaking", "spectral+stickbreaking", "rope+path"),
}


def extend(preset: Preset, results_dir: str) -> Preset:
  """`preset` with the choices (as `chosen_kinds`): those `MADE`, else those
  its results allow: the mixed pairings on Dyck and `listops_depth` once both
  tasks' cells are complete, the five best on `dyck_5layer` once Dyck's are."""
  later = dict(MADE)
  if not MADE:
    table = run_summary.cells(run_summary.load_summaries(results_dir))
    if not missing(preset, table, (DYCK,)):
      later[DYCK_5LAYER] = five_best(table)
      if not missing(preset, table, (DYCK, LISTOPS)):
        later[DYCK] = later[LISTOPS] = mixed_pairings(table)
  tasks = tuple(
      dataclasses.replace(t, chosen_kinds=t.chosen_kinds + tuple(
          k for k in later.get(t.name, ()) if k not in t.later_kinds + t.chosen_kinds))
      for t in preset.tasks)
  return dataclasses.replace(preset, tasks=tasks)
