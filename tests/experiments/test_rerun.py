"""One landed run re-run as its preset runs it now (experiments/extrapolation/rerun.py)."""

import json
import subprocess
import sys

import pytest

import helpers

from experiments.extrapolation import rerun


def test_find_run_names_a_preset_run_or_says_what_names_look_like():
  run = rerun.find_run("converged", "listops_depth/scratch/rope/seed0")
  assert (run.task.name, run.arm, run.kind, run.seed) == ("listops_depth", "scratch", "rope", 0)
  assert ("data.length_groups", 4) in run.task.overrides  # what a rerun of it would change
  with pytest.raises(ValueError, match=r"--run='dyck/rope/0': no such run in preset 'converged' "
                     r"\(names are TASK/ARM/KIND/seedN; its tasks: dyck, dyck_5layer"):
    rerun.find_run("converged", "dyck/rope/0")


def test_comparison_sets_each_split_beside_the_landed_one():
  landed = {"seconds": 1898.0, "splits": {
      "valid": {"accuracy": 0.978, "ci95": [0.975, 0.981]},
      "k8_m10.test": {"accuracy": 0.9, "close_accuracy": 0.8, "close_ci95": [0.7, 0.9]}}}
  again = {"seconds": 709.0, "splits": {
      "valid": {"accuracy": 0.976, "ci95": [0.973, 0.979]},
      "k8_m10.test": {"accuracy": 0.95, "close_accuracy": 0.85, "close_ci95": [0.75, 0.95]},
      "new_split": {"accuracy": 0.5, "ci95": None}}}
  table = rerun.comparison(landed, again).splitlines()
  assert table[2] == "| valid | accuracy | 0.978 [0.975, 0.981] | 0.976 [0.973, 0.979] | -0.0020 |"
  assert table[3] == ("| k8_m10.test | close_accuracy | 0.800 [0.700, 0.900] | "
                      "0.850 [0.750, 0.950] | +0.0500 |")
  assert table[4] == "| seconds |  | 1898 | 709 |  |" and len(table) == 5  # no landed new_split


def test_an_unknown_run_is_one_line_and_nothing_is_written(tmp_path):
  result = subprocess.run([sys.executable, "-m", "experiments.extrapolation.rerun",
                           "--preset=converged", "--run=dyck/scratch/rope/seed9",
                           f"--out={tmp_path / 'out'}"],
                          cwd=helpers.ROOT, text=True, capture_output=True, timeout=120,
                          env=helpers.subprocess_env())
  assert result.returncode == 1
  assert result.stderr.startswith("error: --run='dyck/scratch/rope/seed9': no such run in preset "
                                  "'converged'") and result.stderr.count("\n") == 1
  assert not (tmp_path / "out").exists()


def _summary(probe=None, **splits):
  return dict(task="dyck", arm="scratch", kind="rope", seed=2, date="2026-12-06", commit="abc",
              seconds=300.0, splits=splits, **({"probe": probe} if probe else {}))


def test_a_reruns_probe_is_attached_with_where_it_came_from():
  landed = _summary(valid={"accuracy": 0.99, "ci95": [0.98, 1.0]},
                    test_depth={"accuracy": 0.9, "close_accuracy": 0.8},
                    k8_m5={"accuracy": 0.7})  # landed before the closing-bracket metric
  again = _summary({"depth": [0.5]}, valid={"accuracy": 0.98, "ci95": [0.97, 0.99]},
                   test_depth={"accuracy": 0.91, "close_accuracy": 0.85}, new_split={"accuracy": 1},
                   k8_m5={"accuracy": 0.72, "close_accuracy": 0.6})
  attached = rerun.with_rerun_probe(landed, again)
  assert attached["probe"] == {"depth": [0.5]} and "probe" not in landed  # a copy
  assert attached["splits"] is landed["splits"]  # the landed accuracy stays the verdict's
  assert attached["probe_rerun"] == {"date": "2026-12-06", "commit": "abc", "seconds": 300.0,
                                     "splits": {
      "valid": {"metric": "accuracy", "landed": 0.99, "rerun": 0.98},
      "test_depth": {"metric": "close_accuracy", "landed": 0.8, "rerun": 0.85}}}


def test_a_probe_is_not_attached_over_one_or_from_another_run():
  probed = _summary({"depth": [0.5]}, valid={"accuracy": 0.9})
  unprobed = _summary(valid={"accuracy": 0.9})
  with pytest.raises(ValueError, match="dyck/scratch/rope/seed2: the landed summary has probes"):
    rerun.with_rerun_probe(probed, probed)
  with pytest.raises(ValueError, match="the rerun has no probes"):
    rerun.with_rerun_probe(unprobed, unprobed)
  with pytest.raises(ValueError, match=r"the rerun is of another run \(dyck/scratch/rope/seed3\)"):
    rerun.with_rerun_probe(unprobed, dict(probed, seed=3))
  with pytest.raises(ValueError, match=r"another run \(dyck/surgery/rope/seed2\)"):
    rerun.with_rerun_probe(unprobed, dict(probed, arm="surgery"))


def test_attach_probe_reads_a_summarized_rerun_and_rewrites_only_the_landed_summary(tmp_path):
  results, out = tmp_path / "results", tmp_path / "out"
  name = "dyck/scratch/rope/seed2"
  landed = _summary(valid={"accuracy": 0.99, "ci95": [0.98, 1.0]})
  again = _summary({"depth": [0.5]}, valid={"accuracy": 0.98, "ci95": [0.97, 0.99]})
  for root, summary in ((results, landed), (out, again)):
    (root / "dyck/scratch/rope").mkdir(parents=True)
    (root / f"{name}.json").write_text(json.dumps(summary))
  command = [sys.executable, "-m", "experiments.extrapolation.rerun", "--preset=converged",
             f"--run={name}", f"--out={out}", f"--results={results}", "--attach_probe"]
  result = subprocess.run(command, cwd=helpers.ROOT, text=True, capture_output=True,
                          timeout=120, env=helpers.subprocess_env())
  assert result.returncode == 0, result.stderr
  assert f"attached its probes to {results / name}.json" in result.stdout
  written = json.loads((results / f"{name}.json").read_text())
  assert written["probe"] == {"depth": [0.5]} and written["probe_rerun"]["splits"]["valid"] == {
      "metric": "accuracy", "landed": 0.99, "rerun": 0.98}
  assert json.loads((out / f"{name}.json").read_text()) == again  # the rerun's as it was
  # Again: the landed summary now has probes; one line, nothing rewritten.
  result = subprocess.run(command, cwd=helpers.ROOT, text=True, capture_output=True,
                          timeout=120, env=helpers.subprocess_env())
  assert result.returncode == 1 and result.stderr == (
      f"error: --run='{name}': the landed summary has probes of its own\n")
  assert json.loads((results / f"{name}.json").read_text()) == written
