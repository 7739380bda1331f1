r"""The converged sweep's next question, pre-registered on 2026-12-07 before
any of its runs: can one scheme extrapolate both deeper and longer?

The roster split the field: PaTH (data-dependent positions) is deepest at
training lengths (Dyck `test_depth`), recency biases (ALiBi, stick-breaking,
FoX) longest (`k8_m20.test`); none does both. The candidates combine the two:

- `path_fox`: PaTH with FoX's forget gate (PaTH-FoX, the PaTH paper's best
  variant; `bifocal_jax/nn/positions/path_fox.py`);
- `path+alibi`, `path+stickbreaking`: half the heads PaTH, half the recency
  scheme (`position.kind=a+b`, as the roster's mixed kinds; stick-breaking as
  its authors' model defines it).

Runs: each candidate from scratch, the preset's 5 seeds, on Dyck and
`listops_depth` with the 2-layer model at the converged budgets, evaluated as
every roster kind (all held-out splits, the published files, the curve over
training, the probe). Then the best of the three on Dyck with the 5-layer
model (`dyck_5layer`), 5 seeds: the candidate with the highest mean over
seeds of its mean closing-bracket accuracy over Dyck's held-out splits
(every split but `valid`; ties to the name first alphabetically), chosen
once all 15 Dyck cells are complete. The target, stated in advance: one
scheme with closing-bracket accuracy >= 0.99 on Dyck `test_depth` and
>= 0.90 on `k8_m20.test`, each the mean over seeds (reported with its 95%
interval), on the 2-layer model. The question's runs go after every other
run of the preset (`is_question`).
"""

from __future__ import annotations

import dataclasses

from experiments.extrapolation import roster_rules
from experiments.extrapolation import run_summary
from experiments.extrapolation.runs import Preset, Run

CANDIDATES = ("path_fox", "path+alibi", "path+stickbreaking")
TASKS = (roster_rules.DYCK, roster_rules.LISTOPS)
TARGETS = (("test_depth", 0.99), ("k8_m20.test", 0.90))  # Dyck, closing-bracket accuracy


def is_question(run: Run) -> bool:
  """Whether `run` is one of this question's (they run after the rest)."""
  return run.kind in CANDIDATES


def best_candidate(table: dict, seeds: tuple[int, ...]) -> str | None:
  """The candidate for the 5-layer model by the rule above; None until every
  candidate's Dyck cell has every seed."""
  dyck = roster_rules.scratch_cells(table, roster_rules.DYCK)
  if any(set(seeds) - set(dyck.get(k, {})) for k in CANDIDATES):
    return None
  cells = {k: {s: dyck[k][s] for s in seeds} for k in CANDIDATES}
  held_out = tuple(s for s in next(iter(cells[CANDIDATES[0]].values()))["splits"] if s != "valid")
  scores = {k: roster_rules.mean_score(cells[k], held_out) for k in CANDIDATES}
  return roster_rules.ranked_first(scores)[0]


def extend(preset: Preset, results_dir: str) -> Preset:
  """`preset` with the question's runs (as `chosen_kinds`): the candidates on
  Dyck and `listops_depth`, and once chosen the best on `dyck_5layer`."""
  table = run_summary.cells(run_summary.load_summaries(results_dir))
  best = best_candidate(table, preset.seeds)
  added = {task: CANDIDATES for task in TASKS}
  if best is not None:
    added[roster_rules.DYCK_5LAYER] = (best,)
  tasks = tuple(
      dataclasses.replace(t, chosen_kinds=t.chosen_kinds + tuple(
          k for k in added.get(t.name, ()) if k not in t.later_kinds + t.chosen_kinds))
      for t in preset.tasks)
  return dataclasses.replace(preset, tasks=tasks)
