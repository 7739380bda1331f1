"""The sweep's command line (`python -m experiments.extrapolation`): the `smoke`
preset end to end (calibration, the sweep, then the report rebuilt from the
summaries alone), a failed run, a population sweep, bad flags and missing
published files; shards (`--shard i/N`) and `--dry_run`."""

import dataclasses
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys

import pytest

import helpers
from extrapolation_helpers import POPULATIONS, PRESET, TASK

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


@pytest.fixture(scope="module")
def smoke(tmp_path_factory, compilation_cache_env, published_dir):
  """The smoke preset through the command line: calibration, then the sweep
  (its runs' subprocesses share the session's compilation cache)."""
  base = tmp_path_factory.mktemp("extrapolation")
  out, results = str(base / "out"), str(base / "results")
  env = helpers.subprocess_env(**compilation_cache_env)
  # Two runs at a time (--jobs): each run's start-up (imports) keeps one core busy.
  for extra in (["--calibrate"], [f"--results_md={base / 'RESULTS.md'}", "--jobs=2"]):
    proc = _cli("--preset=smoke", f"--out={out}", f"--results={results}", *extra, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  return base, out, results


@pytest.mark.slow
def test_smoke_sweep_end_to_end_and_the_report_from_summaries_alone(smoke):
  base, out, results = smoke
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
def test_failed_run_is_recorded_and_the_sweep_goes_on(smoke, tmp_path):
  _, _, results = smoke
  bad_task = ex.TaskSpec("dyck", ("valid",), variant="tiny", overrides=(("batch_size", -3),))
  good_task = ex.PRESETS["smoke"].tasks[0]
  preset = ex.Preset(tasks=(bad_task,), kinds=("rope",), seeds=(7,))
  os.makedirs(tmp_path / "results")
  shutil.copy(os.path.join(results, ex.BUDGETS_FILE), tmp_path / "results")
  sweep = ex.Sweep(preset, str(tmp_path / "out"), str(tmp_path / "results"), log=lambda m: None)
  assert sweep.run() == {"dyck/scratch/rope/seed7": "failed"}
  with open(os.path.join(tmp_path / "out", "dyck/scratch/rope/seed7", ex.FAILED_FILE)) as f:
    failed = f.read()
  assert "stage: train" in failed and "exit status 2" in failed and "batch_size" in failed
  assert good_task.name == bad_task.name  # the budget it used was the smoke task's


def test_sweep_refuses_bad_jobs_and_a_second_sweep_on_the_same_out(tmp_path):
  sweep = ex.Sweep(PRESET, str(tmp_path), str(tmp_path / "results"), log=lambda m: None)
  with pytest.raises(ValueError, match="jobs=0"):
    sweep.run(jobs=0)
  with open(os.path.join(tmp_path, "sweep.lock"), "w") as held:
    fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
    with pytest.raises(ValueError, match="another sweep is running"):
      sweep.run()
  assert sweep.run() == {}  # the lock is free again; nothing calibrated, nothing to do


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


# Shards (`--shard i/N`): one sweep over several machines.
SHARDED = ex.Preset(tasks=(TASK, ex.TaskSpec("reverse_string", variant="tiny")),
                    kinds=("rope", "bifocal_heads", "alibi"), seeds=(0, 1, 2, 3),
                    protocol_tasks=("odds_first", "reverse_string"),
                    sensitivity_task="odds_first", sensitivity=PRESET.sensitivity)


def _budgets(results, tasks, budget=10):
  os.makedirs(results, exist_ok=True)
  with open(os.path.join(results, ex.BUDGETS_FILE), "w") as f:
    json.dump({t.name: {"budget": budget} for t in tasks}, f)


@pytest.mark.parametrize("count", [1, 2, 3, 7])
def test_shards_split_every_run_into_exactly_one_with_the_protocol_beside_its_source(
    tmp_path, count):
  results = str(tmp_path / "results")
  _budgets(results, SHARDED.tasks)
  everything = [r.name for r in ex.Sweep(SHARDED, str(tmp_path), results).pending()]
  shards = [[r.name for r in ex.Sweep(SHARDED, str(tmp_path), results, shard=(i, count)).pending()]
            for i in range(count)]
  assert sorted(sum(shards, [])) == sorted(everything) and len(everything) == 44
  by_name = {r.name: r for r in SHARDED.runs()}
  for i, names in enumerate(shards):
    for name in names:
      source = by_name[name].source()
      if source is not None:  # its source is here (in no other shard), and comes first
        assert names.index(source.name) < names.index(name), (name, i)
  if count > 1:
    assert all(shards), "a shard with no runs: the hash does not spread them"


def test_a_runs_shard_is_a_stable_hash_of_its_name_unchanged_by_edits_of_the_preset():
  smaller = dataclasses.replace(SHARDED, kinds=("rope",), seeds=(3,), sensitivity=())
  shard_in = {r.name: ex.shard_of(r, 5) for r in SHARDED.runs()}
  for run in smaller.runs():
    assert ex.shard_of(run, 5) == shard_in[run.name], run.name
  run = SHARDED.runs()[0]
  digest = hashlib.sha256(run.name.encode()).digest()
  assert ex.shard_of(run, 5) == int.from_bytes(digest[:8], "big") % 5
  members = POPULATIONS.runs()
  assert len({ex.shard_of(m, 5) for m in members if m.population == members[0].population}) == 1


def test_calibration_runs_are_sharded_too(tmp_path, monkeypatch):
  calibrated = []
  monkeypatch.setattr(ex, "execute", lambda run, *a, **k: calibrated.append(run.name) or "done")
  for i in range(3):
    ex.Sweep(SHARDED, str(tmp_path / f"out{i}"), str(tmp_path / "results"),
             log=lambda m: None, shard=(i, 3)).calibrate()
  assert sorted(calibrated) == sorted(r.name for r in SHARDED.calibration_runs())


@pytest.mark.parametrize("value, message", [
    ("1/0", "needs 0 <= i < N"), ("3/3", "needs 0 <= i < N"), ("-1/3", "needs 0 <= i < N"),
    ("1", "expected i/N"), ("a/b", "expected i/N"), ("1/2/3", "expected i/N")])
def test_bad_shards_are_one_clear_error(value, message):
  with pytest.raises(ValueError, match=f"shard={value!r}: {message}"):
    ex.parse_shard(value)
  assert ex.parse_shard("2/5") == (2, 5)


def test_dry_run_lists_the_shards_runs(tmp_path):
  names = []
  for shard in ("0/2", "1/2", None):
    proc = _cli("--preset=population_smoke", f"--out={tmp_path / 'out'}",
                f"--results={tmp_path / 'r'}", "--dry_run",
                *([f"--shard={shard}"] if shard else []), timeout=120)
    assert proc.returncode == 0, proc.stderr
    names.append(proc.stdout.splitlines()[:-1])
  assert sorted(names[0] + names[1]) == sorted(names[2]) and len(names[2]) == 8
  assert not set(names[0]) & set(names[1])
  bad = _cli("--preset=population_smoke", "--shard=2/2", "--dry_run", timeout=120)
  assert bad.returncode == 2 and "shard='2/2': needs 0 <= i < N" in bad.stderr
  bad = _cli("--preset=population_smoke", "--stop_by=soon", "--dry_run", timeout=120)
  assert bad.returncode == 2 and "stop_by='soon': expected a duration" in bad.stderr
  bad = _cli("--preset=population_smoke", "--until=25:00", "--dry_run", timeout=120)
  assert bad.returncode == 2 and "until='25:00': expected a duration" in bad.stderr
  broken = tmp_path / "broken"
  broken.mkdir()
  (broken / "budgets.json").write_text("{")
  bad = _cli("--preset=smoke", f"--results={broken}", f"--out={tmp_path / 'o'}", "--dry_run",
             timeout=120)
  assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
      f"error: {broken / 'budgets.json'}: not readable as JSON (Expecting property name enclosed "
      "in double quotes: line 1 column 2 (char 1)); fix it or restore it (git checkout) before the "
      "sweep or its report reads it"], bad.stderr
