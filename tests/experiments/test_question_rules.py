"""The pre-registered question's runs (experiments/extrapolation/question_rules.py):
the candidates on both 2-layer tasks of `converged`, after every other run,
and the 5-layer run of the best by the registered rule once Dyck's cells are complete."""

import json
import os

from experiments.extrapolation import presets as presets_lib
from experiments.extrapolation import question_rules
from experiments.extrapolation import run_summary
from experiments.extrapolation import sweep as ex

CONVERGED = presets_lib.PRESETS["converged"]


def _write(results, task, kind, seed, close):
  path = os.path.join(results, task, "scratch", kind, f"seed{seed}.json")
  os.makedirs(os.path.dirname(path), exist_ok=True)
  splits = {"valid": dict(accuracy=1.0, close_accuracy=1.0)}  # not a held-out split
  splits.update({s: dict(accuracy=0.0, close_accuracy=a) for s, a in close.items()})
  with open(path, "w") as f:
    json.dump(dict(task=task, kind=kind, arm="scratch", group=kind, seed=seed, splits=splits), f)


def _chosen(preset, task):
  return next(t for t in preset.tasks if t.name == task).chosen_kinds


def test_the_candidates_join_both_two_layer_tasks_and_not_yet_the_five_layer_one(tmp_path):
  preset = CONVERGED.resolved(str(tmp_path))
  for task in ("dyck", "listops_depth"):
    assert set(question_rules.CANDIDATES) <= set(_chosen(preset, task)), task
  for task in ("dyck_5layer", "listops_depth_5layer"):
    assert not set(question_rules.CANDIDATES) & set(_chosen(preset, task)), task


def test_the_questions_runs_go_after_every_other_run(tmp_path):
  results = str(tmp_path / "results")
  os.makedirs(results)
  with open(os.path.join(results, ex.BUDGETS_FILE), "w") as f:
    json.dump({t.name: {"budget": 100} for t in CONVERGED.tasks}, f)
  sweep = ex.Sweep(CONVERGED.resolved(results), str(tmp_path / "out"), results, log=print)
  pending = sweep.pending()
  first = next(i for i, r in enumerate(pending) if question_rules.is_question(r))
  assert all(question_rules.is_question(r) for r in pending[first:])
  assert len(pending[first:]) == 3 * 2 * 5  # 3 candidates x 2 tasks x 5 seeds


def test_the_best_candidate_by_the_registered_rule_once_dyck_is_complete(tmp_path):
  results = str(tmp_path)
  # Mean closing-bracket accuracy over the held-out splits: path+alibi 0.8,
  # path_fox 0.8 (a tie: alphabetically first wins), path+stickbreaking 0.7.
  scores = {"path_fox": (0.9, 0.7), "path+alibi": (0.6, 1.0), "path+stickbreaking": (0.7, 0.7)}
  for kind, (depth, far) in scores.items():
    for seed in range(4):
      _write(results, "dyck", kind, seed, {"test_depth": depth, "k8_m20.test": far})
  table = lambda: run_summary.cells(run_summary.load_summaries(results))
  assert question_rules.best_candidate(table(), (0, 1, 2, 3, 4)) is None  # seed 4 missing
  assert "path+alibi" not in _chosen(CONVERGED.resolved(results), "dyck_5layer")
  for kind, (depth, far) in scores.items():
    _write(results, "dyck", kind, 4, {"test_depth": depth, "k8_m20.test": far})
  assert question_rules.best_candidate(table(), (0, 1, 2, 3, 4)) == "path+alibi"
  assert "path+alibi" in _chosen(CONVERGED.resolved(results), "dyck_5layer")
  assert "path_fox" not in _chosen(CONVERGED.resolved(results), "dyck_5layer")
