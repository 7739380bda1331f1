"""One landed run re-run as its preset runs it now (benchmarks/rerun.py)."""

import os
import subprocess
import sys

import pytest

import helpers

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "benchmarks"))
import rerun  # pylint: disable=g-import-not-at-top,wrong-import-position


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
  result = subprocess.run([sys.executable, "benchmarks/rerun.py", "--preset=converged",
                           "--run=dyck/scratch/rope/seed9", f"--out={tmp_path / 'out'}"],
                          cwd=helpers.ROOT, text=True, capture_output=True, timeout=120,
                          env=helpers.subprocess_env())
  assert result.returncode == 1
  assert result.stderr.startswith("error: --run='dyck/scratch/rope/seed9': no such run in preset "
                                  "'converged'") and result.stderr.count("\n") == 1
  assert not (tmp_path / "out").exists()
