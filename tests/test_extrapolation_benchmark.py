"""The extrapolation benchmark: sweep bookkeeping, resumability, failures, the summary.

The summary tests build run directories by hand (config, metrics, results) so
they need no training; the end-to-end tests run the `smoke` preset once.
"""

import fcntl
import importlib.util
import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_spec = importlib.util.spec_from_file_location(
    "extrapolation", os.path.join(REPO, "benchmarks", "extrapolation.py"))
ex = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = ex  # dataclasses look their module up
_spec.loader.exec_module(ex)


def fake_run(run, out, *, steps=10, result_step=10, loss=0.5, accuracy=None, splits=None):
  """A run directory as the trainer and eval.py leave it (no checkpoint)."""
  workdir = run.workdir(out)
  os.makedirs(os.path.join(workdir, "eval"), exist_ok=True)
  with open(os.path.join(workdir, "config.json"), "w") as f:
    json.dump({"steps": steps}, f)
  with open(os.path.join(workdir, "metrics.jsonl"), "w") as f:
    f.write(json.dumps({"step": steps // 2, "loss": 9.0}) + "\n")
    f.write(json.dumps({"step": steps, "loss": loss}) + "\n")
  accuracy = accuracy or {}
  split_results = {
      name: dict(source="task", token_accuracy=accuracy.get(name, 0.5),
                 by_length={"4": accuracy.get(name, 0.5)}, by_length_tokens={"4": 10},
                 by_depth={"1": accuracy.get(name, 0.5)}, by_depth_tokens={"1": 10})
      for name in (splits or run.split_names)}
  with open(os.path.join(workdir, "eval", "results.json"), "w") as f:
    json.dump(dict(step=result_step, che_score=accuracy.get("test_length", 0.5),
                   splits=split_results), f)
  return workdir


TASK = ex.TaskSpec("odds_first", "tiny")
PRESET = ex.Preset(tasks=(TASK,), kinds=("rope", "bifocal"), seeds=(0, 1))


def test_run_names_commands_and_order():
  runs = PRESET.runs()
  assert [r.name for r in runs] == ["odds_first/rope/seed0", "odds_first/bifocal/seed0",
                                    "odds_first/rope/seed1", "odds_first/bifocal/seed1"]
  train = runs[1].train_command("/o")
  assert "--config=configs/odds_first.py:tiny" in train
  assert "--config.position.kind=bifocal" in train and "--config.seed=0" in train
  assert "--workdir=/o/odds_first/bifocal/seed0" in train
  assert "--spectrum" in runs[1].eval_command("/o")
  assert "--spectrum" not in runs[0].eval_command("/o")
  lr_run = ex.Run(TASK, "rope", 2, 3e-4)
  assert lr_run.name == "odds_first/rope_lr0.0003/seed2"
  assert "--config.learning_rate=0.0003" in lr_run.train_command("/o")


def test_run_is_done_only_with_final_step_and_every_split(tmp_path):
  out = str(tmp_path)
  rope0, bifocal0, rope1, bifocal1 = PRESET.runs()
  fake_run(rope0, out)
  fake_run(bifocal0, out, result_step=5)           # evaluated a preempted run
  fake_run(rope1, out, splits=("valid",))         # test_length missing
  assert ex.run_results(rope0, out) is not None
  assert ex.run_results(bifocal0, out) is None
  assert ex.run_results(rope1, out) is None
  assert ex.run_results(bifocal1, out) is None     # nothing at all
  assert ex.final_loss(rope0.workdir(out)) == 0.5


def test_summary_table_means_spreads_and_missing_runs(tmp_path):
  out = str(tmp_path)
  rope0, bifocal0, rope1, bifocal1 = PRESET.runs()
  fake_run(rope0, out, loss=0.2, accuracy={"valid": 0.9, "test_length": 0.4})
  fake_run(rope1, out, loss=0.4, accuracy={"valid": 0.7, "test_length": 0.6})
  fake_run(bifocal0, out, loss=0.1, accuracy={"valid": 1.0, "test_length": 0.8})
  markdown = ex.summarize(PRESET, out)
  rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
          for line in markdown.splitlines() if line.startswith("| ") and "---" not in line}
  assert rows["position"] == ["seeds", "final train loss", "valid", "test_length", "CHE"]
  assert rows["rope"] == ["2/2", "0.300 ± 0.100", "0.800 ± 0.100", "0.500 ± 0.100",
                          "0.500 ± 0.100"]
  assert rows["bifocal"] == ["1/2", "0.100", "1.000", "0.800", "0.800"]
  assert "Runs done: 3 of 4" in markdown
  assert "`odds_first/bifocal/seed1`" in markdown
  assert os.path.exists(os.path.join(out, "summary.md"))
  assert os.path.exists(os.path.join(out, "plots", "extrapolation_odds_first.png"))


def test_replace_block_keeps_the_text_around_it(tmp_path):
  path = str(tmp_path / "RESULTS.md")
  ex.replace_block(path, "first")
  with open(path, "a") as f:
    f.write("\nverdict written by hand\n")
  with open(path) as f:
    text = f.read()
  with open(path, "w") as f:
    f.write("# title\n\n" + text)
  ex.replace_block(path, "second")
  with open(path) as f:
    text = f.read()
  assert "first" not in text and "second" in text
  assert text.startswith("# title") and "verdict written by hand" in text
  assert text.count(ex.BEGIN_MARK) == 1 and text.count(ex.END_MARK) == 1


def test_published_subset_keeps_name_and_spans_the_file(tmp_path):
  path = ex.published_file(str(tmp_path), "k8_m20.test", 5)
  assert os.path.basename(path) == "k8_m20.test"
  with open(os.path.join(ex.PUBLISHED_DIR, "k8_m20.test")) as f:
    source = [line for line in f if line.strip()]
  with open(path) as f:
    subset = f.readlines()
  assert len(subset) == 5
  assert subset[0] == source[0] and subset[-1] == source[-1]
  assert all(line in source for line in subset)
  assert ex.published_file(str(tmp_path), "k8_m20.test", None).startswith(ex.PUBLISHED_DIR)
  with pytest.raises(ValueError, match="max_lines=0"):
    ex.published_file(str(tmp_path), "k8_m20.test", 0)


@pytest.fixture(scope="module")
def smoke_out(tmp_path_factory):
  """The smoke preset, run once through the command line."""
  out = str(tmp_path_factory.mktemp("extrapolation"))
  proc = subprocess.run(
      [sys.executable, os.path.join(REPO, "benchmarks", "extrapolation.py"), "--preset=smoke",
       f"--out={out}", f"--results_md={os.path.join(out, 'RESULTS.md')}"],
      cwd=REPO, capture_output=True, text=True, timeout=900)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  return out


@pytest.mark.slow
def test_smoke_sweep_end_to_end(smoke_out):
  preset = ex.PRESETS["smoke"]
  for run in preset.runs():
    results = ex.run_results(run, smoke_out)
    assert results is not None, run.name
    assert set(run.split_names) <= set(results["splits"])
    assert results["splits"]["k8_m10.test"]["examples"] == 4
  with open(os.path.join(smoke_out, "RESULTS.md")) as f:
    summary = f.read()
  bifocal = ex.run_results(preset.runs()[1], smoke_out)
  row = next(line for line in summary.splitlines() if line.startswith("| bifocal | 1/1"))
  assert f"{bifocal['splits']['test_depth']['token_accuracy']:.3f}" in row
  assert "Learned spectra" in summary and "Closing-bracket accuracy" in summary
  assert os.path.exists(os.path.join(smoke_out, "plots", "extrapolation_dyck.png"))
  with open(os.path.join(smoke_out, "sweep.pid")) as f:
    assert int(f.read()) > 0


@pytest.mark.slow
def test_second_sweep_skips_done_runs(smoke_out):
  runs = ex.PRESETS["smoke"].runs()
  logs = [os.path.join(r.workdir(smoke_out), "train.log") for r in runs]
  before = [os.path.getmtime(p) for p in logs]
  assert ex.sweep(runs, smoke_out, log=lambda m: None) == {r.name: "skipped" for r in runs}
  assert [os.path.getmtime(p) for p in logs] == before


@pytest.mark.slow
def test_failed_run_is_recorded_and_the_sweep_goes_on(smoke_out):
  smoke = ex.PRESETS["smoke"].runs()
  bad_task = ex.TaskSpec("dyck", "tiny", overrides=(("batch_size", -3),), splits=("valid",))
  bad = ex.Run(bad_task, "rope", seed=7)
  statuses = ex.sweep([bad, *smoke], smoke_out, log=lambda m: None)
  assert statuses == {bad.name: "failed", **{r.name: "skipped" for r in smoke}}
  with open(os.path.join(bad.workdir(smoke_out), ex.FAILED_FILE)) as f:
    failed = f.read()
  assert "stage: train" in failed and "exit status 2" in failed
  assert "batch_size" in failed  # the trainer's own error line, from the log tail
  markdown = ex.summarize(ex.Preset(tasks=(bad_task,), kinds=("rope",), seeds=(7,)), smoke_out)
  assert "Failed (see their `failed.txt`): `dyck/rope/seed7`" in markdown


def test_sweep_refuses_bad_jobs_and_a_second_sweep_on_the_same_out(tmp_path):
  out = str(tmp_path)
  with pytest.raises(ValueError, match="jobs=0"):
    ex.sweep([], out, jobs=0)
  with open(os.path.join(out, "sweep.lock"), "w") as held:
    fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
    with pytest.raises(ValueError, match="another sweep is running"):
      ex.sweep([], out)
  assert ex.sweep([], out) == {}  # the lock is free again
