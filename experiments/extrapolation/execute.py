"""One run's commands, where a sweep's task runs them: its source's training,
its training, its evaluations, each a subprocess logged in its workdir.

A stop (the Ray task cancelled: `KeyboardInterrupt` in the task, or a signal
to a process that calls `execute` itself) reaches the command in flight as
one SIGTERM, on which the trainer saves its checkpoint and exits; the run is
then "stopped" and resumes from that checkpoint next time. A command dies
with the process that started it (`PR_SET_PDEATHSIG` on Linux), so a worker
killed outright leaves no trainer behind to race its retry in the same workdir.

Cores: Ray reserves a task's CPUs by count, not by core, and XLA:CPU sizes
its thread pool to the cores a process may use, so runs side by side would
each spread over every core and contend. A task therefore claims a share of
its node's cores the size of its CPUs (`claimed_cores`: the first share whose
lock file it can hold, released when the task ends or dies) and runs its
commands on those cores only; with no share free (more tasks than shares, or
no `sched_setaffinity`, macOS), unpinned. (Measured: docs/performance.md,
"The sweep's engine".)
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import tempfile
import signal
import subprocess
import sys
import time
from collections.abc import Callable

import filelock

from experiments.extrapolation.run_summary import TOOK, read_json, trained
from experiments.extrapolation.runs import REPO, PopulationRun, Run, checkpoint_results_path

FAILED_FILE = "failed.txt"
TAIL_LINES = 40
_PR_SET_PDEATHSIG = 1


class Stopped(Exception):
  """A command was stopped (its trainer saved); the run resumes next time."""


def _in_child(cores: frozenset[int] | None):
  os.nice(10)
  if cores:
    os.sched_setaffinity(0, cores)
  if sys.platform == "linux":  # dies with its parent: no orphaned trainer
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


@contextlib.contextmanager
def claimed_cores(cpus: float, *, cores=None, lock_dir: str | None = None):
  """Yields a share of this node's cores (`cpus` of them, consecutive) that no
  other task holds, or None. `cores`: the CPUs to share (default this
  process's); `lock_dir`: where the shares' lock files live (default the
  temporary directory, shared by the node's tasks)."""
  if cores is None and not hasattr(os, "sched_getaffinity"):
    yield None
    return
  cores = sorted(os.sched_getaffinity(0) if cores is None else cores)
  size = max(1, int(cpus))
  shares = [frozenset(cores[i:i + size]) for i in range(0, len(cores) - size + 1, size)]
  if len(shares) < 2:  # the whole node: nothing to keep apart
    yield None
    return
  lock_dir = lock_dir or os.path.join(tempfile.gettempdir(), "bifocal_jax_cores")
  os.makedirs(lock_dir, exist_ok=True)
  for share in shares:
    name = "_".join(map(str, sorted(share)))
    lock = open(os.path.join(lock_dir, f"cores_{name}.lock"), "w")
    try:
      fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      lock.close()
      continue
    try:
      yield share
    finally:
      lock.close()
    return
  yield None


def run_command(command: list[str], log_path: str,
                cores: frozenset[int] | None = None) -> tuple[int, str]:
  """Runs `command` from the repository root at lower priority (on `cores`
  only, if given), output
  appended to `log_path`, then a `TOOK` line with its duration; (status, log
  tail). A `KeyboardInterrupt` meanwhile (Ray's cancel) is passed on as one
  SIGTERM; once the command has exited, `Stopped` is raised."""
  with open(log_path, "a") as log:
    pinned = f" (cores {','.join(map(str, sorted(cores)))})" if cores else ""
    log.write(f"\n$ {' '.join(command)}  # {time.strftime('%Y-%m-%d %H:%M:%S')}{pinned}\n")
    log.flush()
    start = time.monotonic()
    # Its own session: a terminal's Ctrl-C reaches the sweep, which stops it once.
    child = subprocess.Popen(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                             preexec_fn=lambda: _in_child(cores), start_new_session=True)
    stopped = False
    try:
      while True:
        try:  # in short waits: Ray's cancel is raised between bytecodes, not in waitpid
          status = child.wait(timeout=0.2)
          break
        except subprocess.TimeoutExpired:
          continue
        except KeyboardInterrupt:
          if not stopped:  # a second signal would make the trainer skip its save
            stopped = True
            child.send_signal(signal.SIGTERM)
    finally:
      if child.poll() is None:  # an error above: no trainer outlives its task
        child.kill()
        child.wait()
      log.write(f"{TOOK}{time.monotonic() - start:.1f} s (exit status {child.returncode})\n")
  if stopped:
    raise Stopped(command[1] if len(command) > 1 else command[0])
  with open(log_path) as f:
    tail = f.readlines()[-TAIL_LINES:]
  return status, "".join(tail)


def stages(run: Run | PopulationRun, out: str, budget: int, *,
           evaluate: bool) -> list[tuple[str, Run | PopulationRun, list[str]]]:
  """What is left to do for `run`: its source's training, its training, its evaluations."""
  todo = []
  source = run.source()
  if source is not None and not trained(source.workdir(out)):
    todo.append(("train", source, source.train_command(out, budget)))
  if not trained(run.workdir(out)):
    todo.append(("train", run, run.train_command(out, budget)))
  if evaluate:
    pending = [
        step for step in run.checkpoint_steps(budget)
        # not yet evaluated (or cut off)
        if (read_json(checkpoint_results_path(run.workdir(out), step)) or {}).get("step") != step
    ]
    if pending:  # one process for all of them: set up and compiled once
      todo.append(("eval", run, run.checkpoint_eval_command(out, pending)))
    todo.append(("eval", run, run.eval_command(out)))
  return todo


def error_line(tail: str) -> str:
  """The line of a command's output that says why it failed: the last one
  that names an error, else the last non-empty one."""
  lines = [line.strip() for line in tail.splitlines() if line.strip()
           and not line.startswith(TOOK)]
  for line in reversed(lines):
    if "Error" in line or line.lower().startswith(("error", "fatal")):
      return line[:300]
  return lines[-1][:300] if lines else ""


def execute(run: Run | PopulationRun, out: str, budget: int, log: Callable[[str], None], *,
            evaluate: bool = True, cores: frozenset[int] | None = None) -> tuple[str, str]:
  """Trains (the source first, if any) and evaluates one run: ("done", ""),
  ("failed", one line saying why; `failed.txt` in its workdir has the log's
  tail) or ("stopped", ""). A workdir is trained by one command at a time
  (a file lock beside it): a surgery and a continue run share their source.
  `cores`: the commands run on these only."""
  failed_path = os.path.join(run.workdir(out), FAILED_FILE)
  try:
    for stage, who, command in stages(run, out, budget, evaluate=evaluate):
      workdir = who.workdir(out)
      os.makedirs(workdir, exist_ok=True)
      with filelock.FileLock(workdir.rstrip("/") + ".lock"):
        if stage == "train" and trained(workdir):
          continue  # trained meanwhile by another task
        status, tail = run_command(command, os.path.join(workdir, f"{stage}.log"), cores)
      if status != 0:
        why = f"exit status {status}"
      elif stage == "train" and not trained(workdir):
        why = "exited 0 without its final checkpoint (preempted?)"
      else:
        continue
      line = f"{stage} of {who.name}: {why}" + (f": {e}" if (e := error_line(tail)) else "")
      os.makedirs(run.workdir(out), exist_ok=True)
      with open(failed_path, "w") as f:
        f.write(f"{line}\ncommand: {' '.join(command)}\n"
                f"time: {time.strftime('%Y-%m-%d %H:%M:%S')}\n\n{tail}")
      log(f"FAILED {run.name} ({line}): see {failed_path}")
      return "failed", line
  except (Stopped, KeyboardInterrupt):
    return "stopped", ""
  if os.path.exists(failed_path):
    os.remove(failed_path)
  return "done", ""
