"""What a scheme's fix changed: the withdrawn summaries kept as data
(experiments/extrapolation/superseded.py, read from a git repository written
for the test) and the report pairing them with their reruns
(experiments/extrapolation/fix_report.py) on summaries written for the test."""

import json
import os
import subprocess

import pytest

from experiments.extrapolation import committed_sweeps
from experiments.extrapolation import fix_report
from experiments.extrapolation import presets as presets_lib
from experiments.extrapolation import run_summary
from experiments.extrapolation import superseded

SEEDS = range(5)
SPLITS = ("test_depth", "k8_m20.test")


def _summary(kind, seed, depth, far, task="dyck"):
  splits = {"valid": dict(accuracy=1.0, close_accuracy=1.0),
            "test_depth": dict(accuracy=0.5, close_accuracy=depth, examples=10,
                               close_ci95=[depth - 0.1, depth + 0.1], by_depth={"4": 0.5}),
            "k8_m20.test": dict(accuracy=0.5, close_accuracy=far)}
  return dict(task=task, kind=kind, arm="scratch", group=kind, seed=seed, splits=splits)


def _write(results, kind, seed, depth, far, task="dyck"):
  path = os.path.join(results, task, "scratch", kind, f"seed{seed}.json")
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w") as f:
    json.dump(_summary(kind, seed, depth, far, task), f)


def _field(results, scores, seeds=SEEDS):
  """`scores` {kind: (test_depth, k8_m20.test)}, each seed 0.002 apart."""
  for kind, (depth, far) in scores.items():
    for seed in seeds:
      _write(results, kind, seed, depth + 0.002 * (seed - 2), far + 0.002 * (seed - 2))


def _sweep(results):
  preset = presets_lib.PRESETS["converged"].resolved(results)
  table = run_summary.cells(run_summary.load_summaries(results))
  return committed_sweeps.of("converged", results, preset, table, {})


def _old_cell(kind, scores, seeds=SEEDS, why="the kernel's test"):
  depth, far = scores
  return dict(task="dyck", arm="scratch", group=kind, commit="a" * 40, directory=f"old/{kind}",
              why=why, seeds={s: superseded.scalars(_summary(kind, s, depth + 0.002 * (s - 2),
                                                             far + 0.002 * (s - 2)))
                              for s in seeds})


def test_the_fix_moves_a_call_against_rope_and_the_first_kind(tmp_path):
  results = str(tmp_path)
  # After the fix stick-breaking is no longer first on k8_m20.test, and is
  # not told apart from RoPE there any more; on test_depth nothing moves.
  _field(results, {"rope": (0.80, 0.40), "alibi": (0.90, 0.85), "stickbreaking": (0.92, 0.40)})
  cells = [_old_cell("stickbreaking", (0.92, 0.86))]
  sweep = _sweep(results)
  calls, leaders = fix_report.moved(sweep, cells)
  assert calls == ["`stickbreaking` on `dyck` `k8_m20.test` ahead -> not told apart"]
  assert leaders == ["`dyck` `k8_m20.test` `stickbreaking` -> `alibi`"]
  section = fix_report.section(sweep, cells)
  row = next(line for line in section.splitlines() if "`k8_m20.test`" in line)
  assert row.split(" | ")[2:6] == ["5", "0.860", "0.400", "**-0.460 [-0.460, -0.460]**"]
  assert row.endswith("| ahead | not told apart |")
  depth_row = next(line for line in section.splitlines() if "`test_depth`" in line)
  assert depth_row.split(" | ")[4:6] == ["0.920", "+0.000 [+0.000, +0.000]"]
  assert "`stickbreaking` (`dyck`): the kernel's test (read at aaaaaaa)" in section
  verdict = fix_report.verdict(sweep, cells)
  assert "changed in `converged`** (1 of the 1 withdrawn cells rerun so far" in verdict
  assert "Provisional" not in verdict


def test_before_and_after_on_the_seeds_rerun_so_far(tmp_path):
  results = str(tmp_path)
  _field(results, {"rope": (0.80, 0.40), "alibi": (0.90, 0.85)})
  _field(results, {"stickbreaking": (0.92, 0.86)}, seeds=range(2))
  # Before the fix seeds 2-4 were far worse: had they counted, the call on
  # k8_m20.test would differ; on the two seeds rerun it is the same.
  cell = _old_cell("stickbreaking", (0.92, 0.86))
  for seed in (2, 3, 4):
    cell["seeds"][seed]["splits"]["k8_m20.test"]["close_accuracy"] = 0.1
  sweep = _sweep(results)
  assert fix_report.moved(sweep, [cell]) == ([], [])
  row = next(line for line in fix_report.section(sweep, [cell]).splitlines()
             if "`k8_m20.test`" in line)
  assert row.split(" | ")[2] == "2"
  verdict = fix_report.verdict(sweep, [cell])
  assert "no call against RoPE moved; no held-out split changed its first kind." in verdict
  assert "Provisional: `stickbreaking` (2 of 5 seeds) on `dyck` have not all landed." in verdict


def test_a_cell_not_rerun_yet_moves_nothing(tmp_path):
  results = str(tmp_path)
  _field(results, {"rope": (0.80, 0.40), "alibi": (0.90, 0.85)})
  cells = [_old_cell("stickbreaking", (0.92, 0.90))]
  sweep = _sweep(results)
  assert fix_report.moved(sweep, cells) == ([], [])
  assert fix_report.verdict(sweep, cells) == (
      "**What the fixes of schemes changed in `converged`**: none of its 1 withdrawn cells "
      "rerun yet (`stickbreaking` (0 of 5 seeds) on `dyck`).")
  assert fix_report.section(_sweep(str(tmp_path / "none")), cells) == ""


def _git(repo, *args):
  return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True,
                        text=True).stdout.strip()


def test_the_withdrawn_summaries_read_from_git_kept_as_their_numbers(tmp_path, monkeypatch):
  repo = tmp_path / "repo"
  old = repo / "old_results" / "dyck" / "scratch" / "stickbreaking"
  old.mkdir(parents=True)
  for seed in (0, 1):
    (old / f"seed{seed}.json").write_text(json.dumps(_summary("stickbreaking", seed, 0.9, 0.8)))
  _git(repo, "init", "-q")
  _git(repo, "-c", "user.email=t@example.com", "-c", "user.name=t", "add", ".")
  _git(repo, "-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-qm", "old")
  head = _git(repo, "rev-parse", "HEAD")
  _git(repo, "rm", "-rq", "old_results")
  _git(repo, "-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-qm", "withdraw")
  monkeypatch.chdir(repo)
  results = tmp_path / "results" / "converged"
  monkeypatch.setattr(superseded.runs_lib, "RESULTS_DIR", str(tmp_path / "results"))
  superseded.main(["--preset=converged", "--commit=HEAD^", "--why=a fix",
                   "old_results/dyck/scratch/stickbreaking"])
  (cell,) = superseded.load(str(results))
  assert (cell["task"], cell["arm"], cell["group"], cell["commit"]) == (
      "dyck", "scratch", "stickbreaking", head)
  assert sorted(cell["seeds"]) == [0, 1]
  assert cell["seeds"][0]["splits"]["test_depth"] == dict(accuracy=0.5, close_accuracy=0.9,
                                                          examples=10)
  written = (results / superseded.FILE).read_bytes()
  # A directory with no summaries at that commit: one line, the file untouched.
  with pytest.raises(SystemExit, match=r"^superseded: old_results/dyck/scratch/fire at HEAD\^:"):
    superseded.main(["--preset=converged", "--commit=HEAD^", "--why=x",
                     "old_results/dyck/scratch/fire"])
  assert (results / superseded.FILE).read_bytes() == written


def test_a_cell_read_again_replaces_its_old_entry_and_keeps_the_others():
  a = dict(task="dyck", arm="scratch", group="a", seeds={0: {}})
  b = dict(task="dyck", arm="scratch", group="b", seeds={0: {}})
  again = dict(task="dyck", arm="scratch", group="a", seeds={"1": {}}, why="again")
  assert superseded.merged([b, a], [again]) == [again, {**b, "seeds": {"0": {}}}]


def test_a_damaged_file_is_one_line_naming_it(tmp_path):
  assert superseded.load(str(tmp_path)) == []
  (tmp_path / superseded.FILE).write_text("{")
  with pytest.raises(ValueError, match=r"superseded\.json: not readable as JSON"):
    superseded.load(str(tmp_path))
  (tmp_path / superseded.FILE).write_text('{"cells": [{"task": "dyck"}]}')
  with pytest.raises(ValueError, match=r"superseded\.json: not a superseded-summaries file"):
    superseded.load(str(tmp_path))
