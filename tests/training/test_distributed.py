"""Several processes (issues #4 and #8), as on a multi-host TPU slice but as
local CPU processes: 2 processes with 2 devices each reproduce 1 process with
4 devices; a preemption notice saves the same step on every process; killing
one process stops the other with a clear error in bounded time; and re-running
with another process count resumes at the right example.

One run goes through all of it (each process launch costs its imports and
compilations), and each test checks one guarantee on its record.
"""

import os
import time

import numpy as np
import pytest

import helpers

pytestmark = pytest.mark.slow

HEARTBEAT_TIMEOUT = 10  # seconds without a peer's heartbeat before a process gives up
RUN_TIMEOUT = 300


def losses(records):
  return {r["step"]: r["loss"] for r in records}


@pytest.fixture(scope="module")
def one_process(tmp_path_factory, compilation_cache_env):
  """The test config on 1 process with 4 devices: the reference."""
  workdir = tmp_path_factory.mktemp("one_process")
  result = helpers.run_train(workdir, devices=4, **compilation_cache_env)
  assert result.returncode == 0, result.stdout + result.stderr
  return helpers.read_metrics(workdir)


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory, compilation_cache_env):
  """The test config on 2 processes with 2 devices each, through:
    1. a SIGTERM to process 1 after step 7 (a preemption notice);
    2. a re-run where process 1 is killed (-9) after step 13;
    3. a re-run as 1 process with 4 devices, to the end.
  Returns what each stage left behind.
  """
  base = tmp_path_factory.mktemp("two_processes")
  workdir = base / "run"
  record = {}

  def run_two(stage, signal_of_process_1):
    processes = helpers.start_processes(
        workdir, base / stage, num_processes=2, devices_per_process=2,
        heartbeat_timeout=HEARTBEAT_TIMEOUT,
        signal_after={1: signal_of_process_1}, **compilation_cache_env)
    return processes

  processes = run_two("preempted", "7:TERM")
  record["preempted"] = dict(
      status=helpers.wait_all(processes, RUN_TIMEOUT),
      logs=[(base / f"preempted.{i}").read_text() for i in range(2)],
      checkpoints=helpers.checkpoint_steps(workdir),
      tensorboard=os.listdir(workdir / "tensorboard"))

  processes = run_two("killed", "13:KILL")
  status_1 = helpers.wait_all(processes[1:], RUN_TIMEOUT)[0]
  killed_at = time.monotonic()
  status_0 = helpers.wait_all(processes[:1], RUN_TIMEOUT)[0]
  record["killed"] = dict(
      status=[status_0, status_1], seconds_to_exit=time.monotonic() - killed_at,
      logs=[(base / f"killed.{i}").read_text() for i in range(2)],
      checkpoints=helpers.checkpoint_steps(workdir),
      metrics=helpers.read_metrics(workdir))

  result = helpers.run_train(workdir, devices=4, timeout=RUN_TIMEOUT, **compilation_cache_env)
  record["resumed"] = dict(status=result.returncode, stdout=result.stdout,
                           metrics=helpers.read_metrics(workdir))
  return record


def test_two_processes_reproduce_one_process_with_four_devices(two_processes, one_process):
  records = two_processes["killed"]["metrics"]  # steps 1-12 (process 1 died after step 13)
  assert [r["step"] for r in records] == list(range(1, len(records) + 1))  # each once: only
  assert len(records) >= 12                                                # process 0 writes
  reference = losses(one_process)
  for step, loss in losses(records).items():
    assert loss == pytest.approx(reference[step], rel=1e-4), step
  assert len(two_processes["preempted"]["tensorboard"]) == 1


def test_preemption_notice_saves_the_same_step_on_every_process(two_processes):
  stage = two_processes["preempted"]
  assert stage["status"] == [0, 0], stage["logs"]
  # The processes agree on a step at or after the notice (how far after depends
  # on the machine's load); periodic saves before it may be kept beside it.
  step = stage["checkpoints"][-1]
  assert step >= 7
  for log in stage["logs"]:
    assert f"preempted (preemption notice): saved step {step}" in log


def test_killing_a_process_stops_the_other_with_a_clear_error(two_processes):
  stage = two_processes["killed"]
  status_0, status_1 = stage["status"]
  assert status_1 == -9
  assert status_0 not in (0, None), stage["logs"][0][-3000:]
  assert stage["seconds_to_exit"] < HEARTBEAT_TIMEOUT + 60
  # Either our own line (a collective failed) or JAX's (missed heartbeats).
  clear = ("error: runtime failure (a lost peer", "another task died")
  assert any(message in stage["logs"][0] for message in clear), stage["logs"][0][-3000:]


def test_rerun_with_another_process_count_resumes_at_the_right_example(two_processes, one_process):
  stage = two_processes["resumed"]
  assert stage["status"] == 0, stage["stdout"]
  # The last checkpoint before the kill after step 13: the periodic save at 10,
  # or the preemption save where the notice took effect later than that.
  resumed_at = two_processes["killed"]["checkpoints"][-1]
  assert 10 <= resumed_at <= 13
  assert f"from step {resumed_at}\n" in stage["stdout"]
  records = stage["metrics"]
  assert [r["step"] for r in records] == list(range(1, 31))
  reference = losses(one_process)
  np.testing.assert_allclose([losses(records)[s] for s in range(resumed_at + 1, 31)],
                             [reference[s] for s in range(resumed_at + 1, 31)], rtol=1e-4)


def test_two_processes_in_length_groups_reproduce_one_padded_batch(tmp_path, one_process,
                                                                   compilation_cache_env):
  """Length groups across processes: each process trains its rows of every
  group (`pipeline` slices each group), every group at its own bucket; the
  losses are the one-process run's on one padded batch."""
  overrides = {"data.length_groups": 2, "buckets": (16, 24, 40)}
  processes = helpers.start_processes(tmp_path / "run", tmp_path / "log", overrides,
                                      num_processes=2, devices_per_process=2,
                                      heartbeat_timeout=HEARTBEAT_TIMEOUT, **compilation_cache_env)
  status = helpers.wait_all(processes, RUN_TIMEOUT)
  assert status == [0, 0], [(tmp_path / f"log.{i}").read_text()[-3000:] for i in range(2)]
  records = losses(helpers.read_metrics(tmp_path / "run"))
  assert sorted(records) == list(range(1, 31))
  reference = losses(one_process)
  np.testing.assert_allclose([records[s] for s in range(1, 31)],
                             [reference[s] for s in range(1, 31)], rtol=1e-4)
