"""The sweep's runs as Ray tasks: an embedded local cluster by default, any
Ray cluster on request.

`Cluster()` starts a local Ray cluster sized to this machine (or to
`num_cpus`), advertised on 127.0.0.1 and with no dashboard unless asked for;
`Cluster(address="auto")` or `Cluster(address="ray://HOST:PORT")` joins a
running one instead, shipping this repository's code to its workers (Ray's
`working_dir`; the cluster's Python needs the requirements installed).

A unit (a run, or a population: one training of many runs) is one task,
`train_and_summarize`, which runs its commands (`execute.execute`) on the
worker and returns an `Outcome`: the status, and each run's summary, so the
driver writes the results and workers need no shared disk for them. A
worker that dies (killed, preempted node) is retried by Ray (`RETRIES`),
resuming from the run's last checkpoint when the workdir root is on storage
the retry can see; a run that fails on its own (an error, a NaN) returns
"failed" with its one-line reason and is not retried. `cancel` asks a task to
stop: its trainer saves a checkpoint and the task returns "stopped".
"""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence

import ray

from experiments.extrapolation import execute as execute_lib
from experiments.extrapolation.run_summary import calibration_record, logged_seconds, summary_of
from experiments.extrapolation.runs import REPO, PopulationRun, Run, TaskSpec

RETRIES = 3  # a worker's death; the run's own failures are not retried
# Shipped to a cluster's workers: the code and configs, not the data or the runs.
_EXCLUDES = [".git", ".venv", "results", "runs", "benchmarks/out", "docs/_build", "*.egg-info",
             "__pycache__", ".pytest_cache"]


@dataclasses.dataclass(frozen=True)
class Outcome:
  """What a task returns. `summaries`: run name -> summary, for each of the
  unit's runs that has one; `why`: one line, for "failed"; `seconds`: the
  unit's commands' time, this and earlier segments (`logged_seconds`)."""
  status: str
  summaries: Mapping[str, dict] = dataclasses.field(default_factory=dict)
  why: str = ""
  seconds: float = 0.0
  record: dict | None = None  # a calibration run's budget record


def train_and_summarize(unit: Run | PopulationRun, runs: Sequence[Run], out: str,
                        budget: int, cpus: float = 1) -> Outcome:
  """The task: trains and evaluates `unit` on a share of `cpus` of its
  node's cores (`execute.claimed_cores`), then summarises each of `runs`
  (its members still pending). Runs on a worker."""
  with execute_lib.claimed_cores(cpus) as cores:
    status, why = execute_lib.execute(unit, out, budget, print, cores=cores)
  seconds = logged_seconds(unit.workdir(out))
  share = len(unit.members()) if isinstance(unit, PopulationRun) else 1
  if status != "done":
    return Outcome(status, why=why, seconds=seconds)
  summaries = {}
  for run in runs:
    summary = summary_of(run, out, budget, seconds / share)
    if summary is not None:
      summaries[run.name] = summary
  missing = [r.name for r in runs if r.name not in summaries]
  if missing:
    return Outcome("failed", summaries, seconds=seconds,
                   why=f"{', '.join(missing)}: results lack a split or the final step (a "
                   "population's member that went non-finite is not evaluated: see eval.log)")
  return Outcome("done", summaries, seconds=seconds)


def calibrate(run: Run, out: str, task: TaskSpec, learned: float,
              converged: float | None, cpus: float = 1) -> Outcome:
  """The task of a calibration run: trains it (no evaluation, on its share
  of cores) and returns its budget record (None: its curve does not say)."""
  with execute_lib.claimed_cores(cpus) as cores:
    status, why = execute_lib.execute(run, out, task.max_steps, print, evaluate=False,
                                      cores=cores)
  seconds = logged_seconds(run.workdir(out))
  if status != "done":
    return Outcome(status, why=why, seconds=seconds)
  record = calibration_record(task, run.workdir(out), learned, converged)
  return Outcome("done", seconds=seconds, record=record)


def parse_resources(text: str) -> dict[str, float]:
  """`--run_resources CPU=1,GPU=1,TPU=4` as a dict (Ray's resource names)."""
  out = {}
  for item in filter(None, (part.strip() for part in text.split(","))):
    name, sep, amount = item.partition("=")
    try:
      if not sep or not name.strip():
        raise ValueError
      out[name.strip()] = float(amount)
      if out[name.strip()] < 0:
        raise ValueError
    except ValueError:
      raise ValueError(f"run_resources={text!r}: expected NAME=AMOUNT,... (e.g. CPU=1,GPU=1)"
                       ) from None
  return out


def _options(resources: Mapping[str, float]) -> dict:
  custom = {k: v for k, v in resources.items() if k not in ("CPU", "GPU")}
  return dict(num_cpus=resources.get("CPU", 1), num_gpus=resources.get("GPU", 0),
              resources=custom or None, max_retries=RETRIES, retry_exceptions=False)


class Cluster:
  """A connection to a Ray cluster: an embedded local one (`address=None`)
  or a running one (`"auto"`, `"ray://HOST:PORT"`, `"HOST:PORT"`). `env`:
  environment variables for the tasks (the data directory, the compilation
  cache), passed through Ray's runtime environment."""

  def __init__(self, address: str | None = None, *, num_cpus: int | None = None,
               dashboard: bool = False, env: Mapping[str, str] | None = None):
    env = dict(env or {})
    if address is None:  # this checkout is the workers' code: no upload
      env["PYTHONPATH"] = os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")]))
      ray.init(num_cpus=num_cpus, include_dashboard=dashboard, _node_ip_address="127.0.0.1",
               log_to_driver=False, logging_level="ERROR", runtime_env={"env_vars": env})
    else:
      if num_cpus is not None:
        raise ValueError("num_cpus: a running cluster has its own size (drop --num_cpus)")
      ray.init(address=address, log_to_driver=False, logging_level="ERROR",
               include_dashboard=dashboard or None,
               runtime_env={"env_vars": env, "working_dir": REPO, "excludes": _EXCLUDES})
    self._remote = {fn: ray.remote(fn) for fn in (train_and_summarize, calibrate)}

  def capacity(self, resources: Mapping[str, float]) -> int:
    """How many tasks needing `resources` the cluster holds now (at least one:
    an autoscaling cluster grows for it)."""
    total = ray.cluster_resources()
    fits = [total.get(name, 0.0) // amount for name, amount in resources.items() if amount > 0]
    return max(1, int(min(fits, default=1)))

  def submit(self, fn, *args, resources: Mapping[str, float], name: str):
    return self._remote[fn].options(name=name, **_options(resources)).remote(*args)

  @staticmethod
  def wait(refs: Sequence, timeout: float) -> list:
    """Those of `refs` finished within `timeout` seconds."""
    done, _ = ray.wait(list(refs), num_returns=len(refs), timeout=timeout, fetch_local=False)
    return done

  @staticmethod
  def outcome(ref) -> Outcome:
    """A finished task's `Outcome`; one that raised or whose worker died
    past its retries: "failed", with the error's first line."""
    try:
      return ray.get(ref)
    except ray.exceptions.TaskCancelledError:
      return Outcome("stopped")
    except ray.exceptions.RayError as e:
      cause = getattr(e, "cause", None) or e
      lines = [line for line in str(cause).splitlines() if line.strip()]
      return Outcome("failed", why=f"{type(cause).__name__}: {lines[-1] if lines else ''}"[:300])

  @staticmethod
  def cancel(ref, *, force: bool = False) -> None:
    """Asks the task to stop (its trainer saves); `force`: kills its worker."""
    ray.cancel(ref, force=force)

  @staticmethod
  def close() -> None:
    ray.shutdown()


class StopOnSignal:
  """While a sweep waits on its tasks: SIGTERM/SIGINT (or the `until` time)
  ask each task in flight to stop, once (each trainer saves its checkpoint);
  a second signal kills them. `stopping`: start no other."""

  def __init__(self, cluster, in_flight: dict, log: Callable[[str], None], *,
               until: float | None = None):
    self.cluster, self.in_flight, self.log, self.until = cluster, in_flight, log, until
    self.stopping = False
    self._timer = None

  def __enter__(self):
    self._previous = {s: signal.signal(s, self._handle) for s in (signal.SIGTERM, signal.SIGINT)}
    if self.until is not None:
      self._timer = threading.Timer(max(self.until - time.time(), 0.0), self._at_until)
      self._timer.daemon = True
      self._timer.start()
    return self

  def _at_until(self):
    if not self.stopping:
      when = time.strftime("%Y-%m-%d %H:%M", time.localtime(self.until))
      self.log(f"until {when}: stopping the runs in flight (each saves its checkpoint)")
      self.stop()

  def _handle(self, signum, frame):
    del frame
    if self.stopping:
      self.log(f"signal {signum} again: killing the runs in flight")
    self.stop(force=self.stopping)

  def stop(self, *, force: bool = False):
    self.stopping = True
    for ref in list(self.in_flight):
      self.cluster.cancel(ref, force=force)

  def __exit__(self, *exc):
    if self._timer is not None:
      self._timer.cancel()
    for s, handler in self._previous.items():
      signal.signal(s, handler)
