"""The sweep's command line (`python -m experiments.extrapolation`, on an
embedded Ray cluster): the `smoke` preset end to end (calibration, the sweep
with its driver killed once and started again, then the report rebuilt from
the summaries alone), a population sweep, bad flags, missing published files
and `--dry_run`."""

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

import helpers

from experiments.extrapolation import run_summary
from experiments.extrapolation import sweep as ex

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

def test_a_sweep_without_the_published_files_stops_first_saying_how_to_get_them(tmp_path):
  env = dict(os.environ, BIFOCAL_DATA_DIR=str(tmp_path / "empty"))
  proc = _cli("--preset=smoke", f"--out={tmp_path / 'out'}", f"--results={tmp_path / 'r'}",
              env=env, timeout=120)
  assert proc.returncode == 2 and not os.path.exists(tmp_path / "out" / "dyck")
  (line,) = proc.stderr.splitlines()
  assert "published Dyck file 'k8_m10.test' is not in" in line
  assert "python -m bifocal_jax.tasks.external fetch" in line


def _cli(*args, env=None, timeout=900):
  return subprocess.run([sys.executable, "-m", "experiments.extrapolation", *args], cwd=REPO,
                        capture_output=True, text=True, timeout=timeout, env=env)


def _summaries(results):
  return sorted(glob.glob(os.path.join(results, "dyck", "*", "*", "seed*.json")))


@pytest.fixture(scope="module")
def smoke(tmp_path_factory, compilation_cache_env, published_dir):
  """The smoke preset through the command line: calibration, then the sweep,
  its driver SIGKILLed once the first summary has landed and started again
  (its runs' subprocesses share the session's compilation cache). Returns
  the folders and the first summary's path, bytes and mtime at the kill, and
  how many times its run was trained (its train.log's commands)."""
  base = tmp_path_factory.mktemp("extrapolation")
  out, results = str(base / "out"), str(base / "results")
  env = helpers.subprocess_env(**compilation_cache_env)
  common = ["--preset=smoke", f"--out={out}", f"--results={results}", "--num_cpus=2"]
  proc = _cli(*common, "--calibrate", env=env)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  driver = subprocess.Popen([sys.executable, "-m", "experiments.extrapolation", *common],
                            cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
  deadline = time.time() + 600
  while not _summaries(results) and driver.poll() is None and time.time() < deadline:
    time.sleep(0.1)
  driver.send_signal(signal.SIGKILL)
  driver.wait()
  (first,) = _summaries(results)
  landed = (first, open(first, "rb").read(), os.stat(first).st_mtime_ns)
  proc = _cli(*common, f"--results_md={base / 'RESULTS.md'}", env=env)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  name = os.path.relpath(first, results)[:-len(".json")]
  with open(os.path.join(out, name, "train.log")) as f:
    trainings = f.read().count("\n$ ")
  return base, out, results, (*landed, trainings)


@pytest.mark.slow
def test_smoke_sweep_end_to_end_and_the_report_from_summaries_alone(smoke):
  base, out, results, _ = smoke
  preset = ex.PRESETS["smoke"]
  assert ex.load_budgets(results)["dyck"]["budget"] == 10
  for run in preset.runs():
    with open(run_summary.summary_path(results, run)) as f:
      summary = json.load(f)
    assert set(run.task.split_names) == set(summary["splits"]), run.name
    assert summary["splits"]["k8_m10.test"]["examples"] == 4
    if run.source() is None:  # the curve: step 5 on the checkpoint subsets, then the end
      assert list(summary["at_steps"]) == ["5", "10"], run.name
      assert summary["at_steps"]["5"]["k8_m10.test"]["examples"] == 2
      assert summary["at_steps"]["5"]["valid"]["examples"] == 16
    else:
      assert "at_steps" not in summary, run.name
  text = (base / "RESULTS.md").read_text()
  assert "Closing-bracket accuracy" in text and "Learned spectra" in text
  assert "bifocal_heads (surgery) - rope (continue)" in text
  # Another machine: no workdirs, only the committed summaries.
  shutil.rmtree(out)
  proc = _cli("--preset=smoke", f"--out={out}", f"--results={results}", "--summarize_only")
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert not os.path.exists(os.path.join(out, "dyck"))
  assert "bifocal_heads (surgery) - rope (continue)" in proc.stdout
  proc = _cli("--preset=smoke", f"--out={out}", f"--results={results}", "--dry_run")
  assert "0 runs to do" in proc.stdout


@pytest.mark.slow
def test_a_killed_driver_started_again_reruns_nothing_that_landed(smoke):
  _, _, results, (first, data, mtime, trainings) = smoke
  assert open(first, "rb").read() == data and os.stat(first).st_mtime_ns == mtime  # not rewritten
  assert trainings == 1  # trained once: the second sweep did not start it again
  assert len(_summaries(results)) == len(ex.PRESETS["smoke"].runs())  # the rest landed after


@pytest.mark.slow
def test_population_sweep_one_command_at_a_time(tmp_path, compilation_cache_env):
  """`--limit 1`: one population trained and evaluated, a summary per member."""
  out, results = str(tmp_path / "out"), str(tmp_path / "results")
  env = helpers.subprocess_env(**compilation_cache_env)
  proc = _cli("--preset=population_smoke", f"--out={out}", f"--results={results}", "--limit=1",
              env=env)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  preset = ex.PRESETS["population_smoke"]
  done, left = preset.populations()
  for run in done.members():
    with open(run_summary.summary_path(results, run)) as f:
      summary = json.load(f)
    assert set(summary["splits"]) == set(run.task.split_names)
    assert summary["overrides"]["learning_rate"] == dict(run.setting)["learning_rate"]
    assert summary["overrides"]["seed"] == run.seed and summary["steps"] == 12
  assert not any(os.path.exists(run_summary.summary_path(results, r)) for r in left.members())
  assert "rope_lr0.01 (sensitivity) - rope (scratch)" in proc.stdout
  proc = _cli("--preset=population_smoke", f"--out={out}", f"--results={results}", "--dry_run")
  assert "4 runs to do" in proc.stdout


def test_dry_run_and_bad_flags(tmp_path):
  proc = _cli("--preset=population_smoke", f"--out={tmp_path / 'out'}",
              f"--results={tmp_path / 'r'}", "--dry_run", timeout=120)
  assert proc.returncode == 0, proc.stderr
  assert len(proc.stdout.splitlines()[:-1]) == 8 and "8 runs to do" in proc.stdout
  for flag, message in (("--stop_by=soon", "stop_by='soon': expected a duration"),
                        ("--until=25:00", "until='25:00': expected a duration"),
                        ("--run_resources=CPU", "run_resources='CPU': expected NAME=AMOUNT")):
    bad = _cli("--preset=population_smoke", flag, "--dry_run", timeout=120)
    assert bad.returncode == 2 and message in bad.stderr, bad.stderr
  broken = tmp_path / "broken"
  broken.mkdir()
  (broken / "budgets.json").write_text("{")
  bad = _cli("--preset=smoke", f"--results={broken}", f"--out={tmp_path / 'o'}", "--dry_run",
             timeout=120)
  assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
      f"error: {broken / 'budgets.json'}: not readable as JSON (Expecting property name enclosed "
      "in double quotes: line 1 column 2 (char 1)); fix it or restore it (git checkout) before the "
      "sweep or its report reads it"], bad.stderr
