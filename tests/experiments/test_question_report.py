"""The pre-registered question's answer (experiments/extrapolation/question_report.py),
on summaries written for the test: no verdict before the Dyck cells are complete,
a target met only by a mean over seeds, any scheme of the roster counting, and
the paired differences against the references."""

import json
import os

import pytest

from experiments.extrapolation import committed_sweeps
from experiments.extrapolation import presets as presets_lib
from experiments.extrapolation import question_report
from experiments.extrapolation import run_summary

SEEDS = range(5)


def _write(results, kind, seed, depth, far, task="dyck"):
  path = os.path.join(results, task, "scratch", kind, f"seed{seed}.json")
  os.makedirs(os.path.dirname(path), exist_ok=True)
  splits = {"valid": dict(accuracy=1.0, close_accuracy=1.0),
            "test_depth": dict(accuracy=0.5, close_accuracy=depth),
            "k8_m20.test": dict(accuracy=0.5, close_accuracy=far)}
  with open(path, "w") as f:
    json.dump(dict(task=task, kind=kind, arm="scratch", group=kind, seed=seed, splits=splits), f)


def _sweep(results):
  preset = presets_lib.PRESETS["converged"].resolved(results)
  table = run_summary.cells(run_summary.load_summaries(results))
  return committed_sweeps.of("converged", results, preset, table, {})


def _field(results, scores, seeds=SEEDS):
  """`scores` {kind: (test_depth, k8_m20.test)}, each seed 0.002 apart."""
  for kind, (depth, far) in scores.items():
    for seed in seeds:
      _write(results, kind, seed, depth + 0.002 * (seed - 2), far + 0.002 * (seed - 2))


REFERENCES = {"rope": (0.80, 0.40), "path": (0.99, 0.63), "alibi": (0.90, 0.85),
              "stickbreaking": (0.92, 0.84)}


def test_no_answer_before_every_dyck_seed_of_every_candidate(tmp_path):
  results = str(tmp_path)
  _field(results, {**REFERENCES, "path+alibi": (0.995, 0.95), "path_fox": (0.9, 0.8)})
  _field(results, {"path+stickbreaking": (0.9, 0.8)}, seeds=range(4))
  line = question_report.verdict(_sweep(results))
  assert "not answered yet" in line and "14 of" in line
  assert "yes" not in line


def test_a_candidate_meeting_both_targets_in_its_mean(tmp_path):
  results = str(tmp_path)
  _field(results, {**REFERENCES, "path+alibi": (0.995, 0.95), "path_fox": (0.99, 0.70),
                   "path+stickbreaking": (0.93, 0.91)})
  sweep = _sweep(results)
  assert question_report.meeting_targets(sweep) == ["path+alibi"]
  line = question_report.verdict(sweep)
  assert line.startswith("**Deeper and longer with one scheme (pre-registered): yes: `path+alibi`.")
  assert "`k8_m20.test` (target 0.9): `path+alibi` 0.950 [" in line
  text = question_report.section(sweep, (("default",), {"path+alibi": [1.8]}))
  # The candidate against each reference, paired: +0.195 over RoPE on test_depth, decided.
  assert "| `path+alibi` - `rope` | **+0.195 [+0.195, +0.195]** |" in text
  assert "`path+alibi` - `stickbreaking`" in text
  assert "`path+alibi` 1.80x" in text and line in text


def test_any_scheme_counts_and_none_is_said_plainly(tmp_path):
  results = str(tmp_path)
  candidates = {"path+alibi": (0.98, 0.95), "path_fox": (0.99, 0.70),
                "path+stickbreaking": (0.93, 0.91)}
  _field(results, {**REFERENCES, **candidates})
  assert "no scheme does" in question_report.verdict(_sweep(results))
  _field(results, {"fire": (0.995, 0.91)})  # a roster kind meeting both
  assert question_report.verdict(_sweep(results)).split("**")[1].endswith("yes: `fire`.")


@pytest.mark.parametrize("depth", [0.989, 0.99])
def test_the_target_is_a_mean_over_seeds_at_or_above(tmp_path, depth):
  results = str(tmp_path)
  _field(results, {"path+alibi": (depth, 0.95), "path_fox": (0.9, 0.8),
                   "path+stickbreaking": (0.9, 0.8)})
  met = question_report.meeting_targets(_sweep(results))
  assert met == (["path+alibi"] if depth >= 0.99 else [])


def _probe(path, unseen, match):
  """A summary's probe as the evaluator records it: the depth probe per layer,
  the matching-bracket mass per eye (None: weights not read)."""
  return dict(depth={"test_depth": dict(accuracy=[0.1, path], unseen_accuracy=[0.0, unseen])},
              by_eye={"test_depth": dict(match_mass={"a": match, "b": match}, top_mass={})})


def test_where_depth_is_held_beside_the_references(tmp_path):
  results = str(tmp_path)
  _field(results, {**REFERENCES, "path+alibi": (0.995, 0.95), "path_fox": (0.9, 0.8),
                   "path+stickbreaking": (0.9, 0.8)})
  for kind, (depth, unseen) in {"path+alibi": (0.5, 0.2), "rope": (0.3, 0.0)}.items():
    for seed in SEEDS:
      path = os.path.join(results, "dyck", "scratch", kind, f"seed{seed}.json")
      with open(path) as f:
        summary = json.load(f)
      summary["probe"] = _probe(depth, unseen, None if seed == 0 else 0.1 * seed)
      with open(path, "w") as f:
        json.dump(summary, f)
  text = question_report.section(_sweep(results))
  assert "| `path+alibi` | 5 | 0.500 | 0.200 | 0.250 (4 seeds) |" in text  # (0.1 + .. + 0.4) / 4
  assert "| `rope` | 5 | 0.300 | 0.000 | 0.250 (4 seeds) |" in text
  probes = text[text.index("Where depth is held"):]
  assert "`path_fox`" not in probes.split("\n\n")[1]  # not probed: no row
