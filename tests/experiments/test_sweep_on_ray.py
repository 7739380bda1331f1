"""The sweep on a real (embedded, local) Ray cluster: runs in parallel, a
worker killed mid-training retried to the same summary, a run that fails on
its own recorded once while the others land, and `until` stopping the runs in
flight with one signal each. The driver killed and started again: the smoke
sweep (test_extrapolation_sweep_command.py)."""

import json
import os
import signal
import subprocess
import threading
import time

import pytest

import helpers
from waiting_run import WaitingRun

from experiments.extrapolation import engine
from experiments.extrapolation import run_summary
from experiments.extrapolation import sweep as ex

pytestmark = pytest.mark.slow

TESTS = os.path.dirname(os.path.abspath(__file__))
SMOKE = ex.PRESETS["smoke"].tasks[0]
# Two scratch runs, and one that fails on its own (a bad override).
PRESET = ex.Preset(tasks=(SMOKE,), kinds=("rope",), seeds=(0, 1), calibrated=False,
                   sensitivity_task="dyck",
                   sensitivity=(("rope", "bad", (("batch_size", -3),)),))
KILLED = ex.Run(SMOKE, "rope", 0)


@pytest.fixture(scope="module")
def cluster(compilation_cache_env, published_dir):
  """A local Ray cluster of 2 CPUs whose tasks see the test helpers and the
  session's compilation cache."""
  env = helpers.subprocess_env(**compilation_cache_env)
  previous = dict(os.environ)
  os.environ.update(env)
  os.environ["PYTHONPATH"] = os.pathsep.join([TESTS, env.get("PYTHONPATH", "")])
  task_env = {k: env[k] for k in (*compilation_cache_env, "JAX_PLATFORMS", "XLA_FLAGS",
                                  "JAX_DISABLE_MOST_OPTIMIZATIONS", "BIFOCAL_DATA_DIR")
              if k in env}
  task_env["BIFOCAL_DATA_DIR"] = os.path.dirname(str(published_dir))
  c = engine.Cluster(num_cpus=2, env=task_env)
  yield c
  c.close()
  os.environ.clear()
  os.environ.update(previous)


def _kill_the_worker_once_it_checkpoints(out, run, killed):
  """SIGKILL to the Ray worker training `run` once its first checkpoint is saved."""
  first = os.path.join(run.workdir(out), "checkpoints", "5")
  deadline = time.time() + 300
  while not os.path.isdir(first) and time.time() < deadline:
    time.sleep(0.05)
  trainer = subprocess.run(["pgrep", "-f", "--", f"--workdir={run.workdir(out)}"],
                           capture_output=True, text=True).stdout.split()
  worker = int(subprocess.run(["ps", "-o", "ppid=", "-p", trainer[0]], capture_output=True,
                              text=True).stdout)
  os.kill(worker, signal.SIGKILL)
  killed.append(worker)


@pytest.fixture(scope="module")
def faulty(cluster, tmp_path_factory):
  """PRESET's sweep with seed 0's worker killed mid-training."""
  base = tmp_path_factory.mktemp("faulty")
  out, results = str(base / "out"), str(base / "results")
  logged, killed = [], []
  killer = threading.Thread(target=_kill_the_worker_once_it_checkpoints,
                            args=(out, KILLED, killed), daemon=True)
  killer.start()
  sweep = ex.Sweep(PRESET, out, results, log=logged.append, bar=False)
  statuses = sweep.run(cluster)
  killer.join(5)
  return out, results, statuses, logged, killed


def test_a_worker_killed_mid_training_is_retried_to_the_same_summary(faulty):
  out, results, statuses, _, killed = faulty
  assert killed, "the worker was not killed"
  assert statuses[KILLED.name] == statuses["dyck/scratch/rope/seed1"] == "done"
  summaries = [json.load(open(run_summary.summary_path(results, ex.Run(SMOKE, "rope", seed))))
               for seed in (0, 1)]
  assert set(summaries[0]) == set(summaries[1])
  assert set(summaries[0]["splits"]) == set(summaries[1]["splits"]) == set(SMOKE.split_names)
  assert summaries[0]["steps"] == summaries[1]["steps"] == SMOKE.max_steps
  with open(os.path.join(KILLED.workdir(out), "train.log")) as f:
    log = f.read()
  # Two segments: the killed one, then the retry, resumed from the checkpoint.
  assert log.count("\n$ ") == 2, log[-3000:]
  assert "resum" in log.lower().split("\n$ ")[-1], log[-3000:]


def test_a_run_that_fails_on_its_own_is_recorded_once_and_the_others_land(faulty):
  out, results, statuses, logged, _ = faulty
  bad = [f"dyck/sensitivity/rope_bad/seed{seed}" for seed in (0, 1)]
  assert statuses == {KILLED.name: "done", "dyck/scratch/rope/seed1": "done",
                      **{name: "failed" for name in bad}}
  for name in bad:
    assert not os.path.exists(os.path.join(results, name + ".json"))
    failures = [line for line in logged if name in line and "failed" in line]
    assert len(failures) == 1 and "batch_size" in failures[0], logged
    with open(os.path.join(out, name, "train.log")) as f:
      assert f.read().count("\n$ ") == 1  # not retried
    with open(os.path.join(out, name, ex.FAILED_FILE)) as f:
      assert "batch_size" in f.readline()


def test_until_asks_each_run_in_flight_to_stop_once_and_starts_none(cluster, tmp_path):
  runs = [WaitingRun(SMOKE, "rope", seed) for seed in range(3)]
  logged = []
  sweep = ex.Sweep(PRESET, str(tmp_path / "out"), str(tmp_path / "results"), log=logged.append,
                   bar=False)
  sweep.pending = lambda: runs
  start = time.time()
  statuses = sweep.run(cluster, until=start + 8)
  assert statuses == {runs[0].name: "stopped", runs[1].name: "stopped"}  # the third not started
  assert 8 <= time.time() - start < 100
  for run in runs[:2]:
    with open(os.path.join(run.workdir(sweep.out), "train.log")) as f:
      log = f.read()
    assert "ready" in log and "signals 1" in log, log  # one signal: the trainer saves
  assert not os.path.exists(runs[2].workdir(sweep.out))
  assert sum("stopping the runs in flight" in m for m in logged) == 1, logged
  assert not any(os.path.exists(os.path.join(r.workdir(sweep.out), ex.FAILED_FILE)) for r in runs)
