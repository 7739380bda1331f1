r"""The decisive experiment: does bifocal attention extrapolate? Runs, summaries, report.

  python -m experiments.extrapolation --preset cpu --calibrate --jobs 2  # step budgets first
  python -m experiments.extrapolation --preset cpu --jobs 2 --commit  # the sweep (resumable)
  python -m experiments.extrapolation --preset cpu --dry_run        # what is left to run
  python -m experiments.extrapolation --preset cpu --summarize_only --results_md RESULTS.md
  python -m experiments.extrapolation --preset accelerator --limit 1  # one population (a GPU)
  python -m experiments.extrapolation --preset cpu --shard 0/4 --commit  # machine 0 of 4

(from the repository root; `python -m experiments.extrapolation.sweep` is the
same). The presets (`PRESETS`) are in `presets.py`; what a run is
(`TaskSpec`, `Run`, `PopulationRun`, `Preset`, the kinds) in `runs.py`; what a
finished run's summary holds in `run_summary.py`; this file runs them and
writes their summaries.

A run is one training (`train.py`) and one evaluation (`eval.py`), each a
subprocess in the run's workdir `OUT/<task>/<arm>/<group>/seed<N>`. Once both
finished, the run leaves a small JSON summary in the committed results
directory, `results/<preset>/<task>/<arm>/<group>/seed<N>.json`
(`run_summary.summary_of`: task, kind, arm, seed, steps, the config overrides, and per
split its accuracy with a 95% interval over examples; for a randomized kind
whether it drew per layer, `draws_per_layer`). A run whose summary
exists is done, whatever machine ran it: a sweep started elsewhere skips it,
and `--summarize_only` rebuilds every table and plot from the summaries alone
(`report.py`). A crash or a kill loses at most the run in flight
(its trainer resumes from its last checkpoint); a failed run leaves
`failed.txt` in its workdir and the sweep goes on. A summary's `seconds`
is the time of every command the sweeps ran for the run (`run_summary.logged_seconds`:
each resumption and the evaluation included).

Arms (how a run starts):
  scratch      from initialisation, for the task's calibrated step budget;
  surgery      the paper's protocol: the scratch `rope` run of the same seed,
               converted by Surgical Integration (`config.init_from`) into
               bifocal attention, then trained further with Spectral Evolution;
  continue     its control: the same checkpoint trained the same further steps
               as `rope` (same fresh optimizer and data);
  sensitivity  bifocal under other settings (spectral learning rate, frozen
               then released spectra, rotary base; `rope` at the other bases),
               and a multiple of a task's budget (`rope` alongside).
A preset's `seed_extensions` add seeds to some scratch cells (the tables and
pairings take whatever seeds a cell has).

Populations (the `accelerator` preset): each (task, kind) is one training of
every seed x learning rate at once (`config.population`, one compiled program;
`PopulationRun`) in `OUT/<task>/population/<kind>`, evaluated member by member
(`eval.py --member all`). Its members are ordinary runs with ordinary
summaries: those at the preset's first learning rate are the `scratch` arm,
the others the `sensitivity` arm labelled `lr<rate>`; each summary's
`seconds` is its share of the population's time. `--limit N` stops after N
runs (populations): one ~10-minute accelerator command is `--limit 1`.
`--stop_by 2.5h` (or `HH:MM`) starts no run expected to end after then
(`Sweep.expected_seconds`; a run trained part-way: what it has left), but the
next in the order that fits, for a machine lent for a while. `--until HH:MM`
stops the runs in flight then, each saving its checkpoint, for the next sweep
to resume: for a machine that keeps its disk between loans.

Budgets (`--calibrate`): for each task, `rope` (seed 0) trains up to the
preset's `max_steps`, evaluated on `valid` every `interval` steps; the task's
budget is the first evaluated step whose valid token accuracy reaches
`LEARNED`. A task that never reaches it is reported as not learned at this
budget and none of its other runs are made. Budgets go to `budgets.json`
beside the summaries. A preset with `calibrated=False` takes each task's
`max_steps` as its budget instead (sized to the machine, not calibrated).

Shards (`--shard i/N`, 0 <= i < N): N machines, or the N workers of a TPU VM
pod (`--shard $TPU_WORKER_ID/N`), each run one shard of the same preset into
one results tree (a shared `--results`, or `--commit` into clones of one
repository). A run's shard is a stable hash of its name (`shard_of`), the
same on every machine and for every edit of the preset: no run is in two
shards, every run is in one, and a surgery or continue run is in its source
`rope` run's (trained there first). Calibration runs are sharded the same
way; a shard takes up the tasks another calibrated once their budgets land
in its results directory.

The published Dyck files are read from the data directory (`--data_dir`,
else `BIFOCAL_DATA_DIR`; `python -m bifocal_jax.tasks.external fetch`
downloads them); a sweep without them stops before its first run, saying so.

SIGTERM/SIGINT to the sweep are passed on to the runs in flight (the trainer
saves and exits), then the sweep stops. Its PID is in `OUT/sweep.pid`; start it
with `setsid` so that `kill -STOP -PID` / `kill -CONT -PID` pause and resume
it with its subprocesses. Subprocesses run at `nice` 10.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import dataclasses
import datetime
import fcntl
import glob
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence

from absl import app
from absl import flags

from bifocal_jax import machine
from bifocal_jax.training.atomic_files import write_atomically
from experiments.extrapolation import progress_report
from experiments.extrapolation import report as report_lib
from experiments.extrapolation import report_pages
from experiments.extrapolation.leaderboard_report import STEP_COSTS_FILE, step_costs
from experiments.extrapolation.presets import PRESETS
from experiments.extrapolation.run_summary import (  # pylint: disable=g-multiple-import
    BUDGETS_FILE, TOOK, calibration_record, cells, load_budgets, logged_seconds, read_json,
    summary_of, summary_path, trained, trained_fraction)
from experiments.extrapolation.runs import (  # pylint: disable=g-multiple-import
    REPO, RESULTS_DIR, PopulationRun, Preset, Run, TaskSpec, checkpoint_results_path,
    published_data, published_file)

FAILED_FILE = "failed.txt"
TAIL_LINES = 40


# ----------------------------------------------------------------------------
# Executing runs.
# ----------------------------------------------------------------------------


class _Stop:
  """SIGTERM/SIGINT: remember, and pass the signal on to the subprocesses in flight."""

  def __init__(self):
    self.signal = None
    self.children: set[subprocess.Popen] = set()
    self._lock = threading.RLock()  # each stop reaches each child once

  def __enter__(self):
    self._previous = {s: signal.signal(s, self._handle) for s in (signal.SIGTERM, signal.SIGINT)}
    return self

  def _handle(self, signum, frame):
    del frame
    self.stop(signum)

  def stop(self, signum: int, *, once: bool = False):
    """Starts no further command; passes `signum` on to those in flight
    (`once`: unless stopped already, since a trainer's second signal skips its
    save; a user's second Ctrl-C is passed on, to stop them at once)."""
    with self._lock:
      if once and self.signal is not None:
        return
      self.signal = signum
      for child in list(self.children):
        if child.poll() is None:
          child.send_signal(signum)

  def add(self, child: subprocess.Popen):
    """Tracks `child`; one started after the stop gets the signal at once."""
    with self._lock:
      self.children.add(child)
      if self.signal is not None:
        child.send_signal(self.signal)

  def __exit__(self, *exc):
    for s, handler in self._previous.items():
      signal.signal(s, handler)


class _CoreSlots:
  """The shares of `machine.core_slots`, each held by one job at a time."""

  def __init__(self, slots: Sequence[frozenset[int] | None]):
    self._free = collections.deque(slots)
    self._lock = threading.Lock()

  @contextlib.contextmanager
  def take(self):
    with self._lock:
      cores = self._free.popleft()
    try:
      yield cores
    finally:
      with self._lock:
        self._free.append(cores)


def _execute(command: list[str], log_path: str, stop: _Stop,
             cores: frozenset[int] | None = None) -> tuple[int, str]:
  """Runs `command` from the repo root at lower priority (on `cores` only,
  if given), output appended to `log_path`, then a `TOOK` line with its
  duration; (status, log tail)."""

  def in_child():
    os.nice(10)
    if cores:
      os.sched_setaffinity(0, cores)

  with open(log_path, "a") as log:
    pinned = f" (cores {','.join(map(str, sorted(cores)))})" if cores else ""
    log.write(f"\n$ {' '.join(command)}  # {time.strftime('%Y-%m-%d %H:%M:%S')}{pinned}\n")
    log.flush()
    start = time.monotonic()
    child = subprocess.Popen(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                             preexec_fn=in_child)
    stop.add(child)
    try:
      status = child.wait()
    finally:
      stop.children.discard(child)
      log.write(f"{TOOK}{time.monotonic() - start:.1f} s (exit status {child.returncode})\n")
  with open(log_path) as f:
    tail = f.readlines()[-TAIL_LINES:]
  return status, "".join(tail)


def _stages(run: Run, out: str, budget: int, *, evaluate: bool) -> list[tuple[str, Run, list]]:
  """What is left to do for `run`: its source's training, its training, its evaluation."""
  stages = []
  source = run.source()
  if source is not None and not trained(source.workdir(out)):
    stages.append(("train", source, source.train_command(out, budget)))
  if not trained(run.workdir(out)):
    stages.append(("train", run, run.train_command(out, budget)))
  if evaluate:
    pending = [
        step for step in run.checkpoint_steps(budget)
        # not yet evaluated (or cut off)
        if (read_json(checkpoint_results_path(run.workdir(out), step)) or {}).get("step") != step
    ]
    if pending:  # one process for all of them: set up and compiled once
      stages.append(("eval", run, run.checkpoint_eval_command(out, pending)))
    stages.append(("eval", run, run.eval_command(out)))
  return stages


# One trainer per workdir at a time: with --jobs, a surgery and a continue run
# of one seed may both need their (shared) source trained.
_WORKDIR_LOCKS = collections.defaultdict(threading.Lock)


def execute(run: Run, out: str, budget: int, stop: _Stop, log: Callable[[str], None], *,
            evaluate: bool = True, cores: frozenset[int] | None = None) -> str:
  """Trains (the source first, if any) and evaluates one run: "done", "failed"
  (with `failed.txt` in its workdir) or "stopped" (a signal). `cores`: its
  commands run on these CPUs only (`machine.core_slots`)."""
  failed_path = os.path.join(run.workdir(out), FAILED_FILE)
  for stage, who, command in _stages(run, out, budget, evaluate=evaluate):
    os.makedirs(who.workdir(out), exist_ok=True)
    with _WORKDIR_LOCKS[who.workdir(out)]:
      if stage == "train" and trained(who.workdir(out)):
        continue  # trained meanwhile by another job
      status, tail = _execute(command, os.path.join(who.workdir(out), f"{stage}.log"), stop,
                              cores)
    if stop.signal is not None:
      return "stopped"
    if status != 0:
      why = f"exit status {status}"
    elif stage == "train" and not trained(who.workdir(out)):
      why = "exited 0 without its final checkpoint (preempted?)"
    else:
      continue
    os.makedirs(run.workdir(out), exist_ok=True)
    with open(failed_path, "w") as f:
      f.write(f"stage: {stage} of {who.name}\n{why}\ncommand: {' '.join(command)}\n"
              f"time: {time.strftime('%Y-%m-%d %H:%M:%S')}\n\n{tail}")
    log(f"FAILED {run.name} ({stage} of {who.name}: {why}): see {failed_path}")
    return "failed"
  if os.path.exists(failed_path):
    os.remove(failed_path)
  return "done"


def git_commit_paths(paths: Sequence[str], message: str, *, log: Callable[[str], None] = print,
                     attempts: int = 8) -> bool:
  """Commits exactly `paths` (`git add`, then `git commit --only`), whatever
  else is staged or changed in their repository; waits and retries while
  another git command holds the index lock. False (and a logged line) when
  it cannot: the files are written either way."""
  paths = [os.path.abspath(p) for p in paths]
  repo = os.path.dirname(paths[0])
  error = ""
  with _GIT_LOCK:
    for attempt in range(attempts):
      add = subprocess.run(["git", "add", "--", *paths], cwd=repo, capture_output=True, text=True)
      commit = add if add.returncode else subprocess.run(
          ["git", "commit", "-q", "--only", "-m", message, "--", *paths], cwd=repo,
          capture_output=True, text=True)
      if commit.returncode == 0:
        return True
      error = (commit.stderr or commit.stdout).strip()
      if "index.lock" not in error:
        break
      time.sleep(0.5 * 2**attempt)
  log(f"not committed ({message}): {error.splitlines()[-1] if error else 'git failed'}")
  return False


_GIT_LOCK = threading.Lock()


def parse_deadline(value: str, now: float | None = None, *, flag: str = "stop_by") -> float:
  """`--stop_by`, `--until`: a duration from now (`90m`, `2.5h`), a time of day
  `HH:MM` (its next occurrence) or `YYYY-MM-DDTHH:MM`, both in local time; the
  POSIX time."""
  now = time.time() if now is None else now
  text = value.strip()
  try:
    if text[-1:] in ("m", "h"):
      amount = float(text[:-1])
      if not amount > 0:
        raise ValueError
      return now + amount * (60 if text[-1] == "m" else 3600)
    if "T" in text or "-" in text:
      return datetime.datetime.fromisoformat(text).timestamp()
    clock = datetime.datetime.strptime(text, "%H:%M").time()
    today = datetime.datetime.fromtimestamp(now).date()
    at = datetime.datetime.combine(today, clock).timestamp()
    return at if at > now else at + 86400
  except ValueError:
    raise ValueError(f"{flag}={value!r}: expected a duration (90m, 2.5h), HH:MM or "
                     f"YYYY-MM-DDTHH:MM") from None


def parse_shard(value: str) -> tuple[int, int]:
  """`--shard i/N` as `(i, N)`, with 0 <= i < N."""
  try:
    index, count = (int(part) for part in value.split("/"))
  except ValueError:
    raise ValueError(f"shard={value!r}: expected i/N (e.g. 0/4)") from None
  if not 0 <= index < count:
    raise ValueError(f"shard={value!r}: needs 0 <= i < N")
  return index, count


def shard_of(run: Run | PopulationRun, count: int) -> int:
  """The shard (of `count`) that runs `run`: a stable hash of the name of what
  trains it (its population, else itself), or for a surgery or continue run
  of its source's, so that its source trains in the same shard. The same
  everywhere and unchanged by edits to a preset's run list."""
  unit = run.unit if isinstance(run, Run) else run
  key = (unit.source() or unit).name
  return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") % count


class Sweep:
  """The runs of a preset in `out`, their summaries in `results_dir`.

  `on_written(paths, message)` is called after every summary (and budgets
  file) is written; `--commit` makes it `git_commit_paths`, so that each
  finished run is committed as it lands. `shard=(i, N)`: only the runs
  (and calibration runs) of shard i of N (`shard_of`), so that N machines
  sharing `results_dir` (or committing into one repository) split the sweep.
  `pin_cores`: with several jobs, each job's commands run on its own share of
  the CPUs (`machine.core_slots`). `resolve`: the preset as the results extend
  it now (`Preset.resolved`), asked before each run is picked, so that a run
  a preset chooses from its results (`roster_rules`) starts in the sweep
  that landed the results it was chosen from."""

  def __init__(self, preset: Preset, out: str, results_dir: str, *,
               log: Callable[[str], None] = print,
               on_written: Callable[[Sequence[str], str], object] | None = None,
               shard: tuple[int, int] | None = None, pin_cores: bool = False,
               resolve: Callable[[], Preset] | None = None,
               step_costs_file: str = STEP_COSTS_FILE):
    self.preset, self.out, self.results_dir, self.log = preset, out, results_dir, log
    self.on_written = on_written or (lambda paths, message: None)
    self.shard, self.pin_cores, self.resolve = shard, pin_cores, resolve
    self.step_costs_file = step_costs_file

  def _slots(self, jobs: int) -> _CoreSlots:
    return _CoreSlots(machine.core_slots(jobs) if self.pin_cores else [None] * jobs)

  def mine(self, run: Run) -> bool:
    """Whether `run` is in this sweep's shard (every run is, unsharded)."""
    return self.shard is None or shard_of(run, self.shard[1]) == self.shard[0]

  def budget(self, task: TaskSpec) -> int | None:
    """The task's calibrated budget; None if uncalibrated or not learned (a
    preset that is not calibrated: the task's `max_steps`)."""
    if not self.preset.calibrated:
      return task.max_steps
    return (load_budgets(self.results_dir).get(task.name) or {}).get("budget")

  def done(self, run: Run) -> bool:
    return os.path.exists(summary_path(self.results_dir, run))

  def pending(self) -> list[Run]:
    """Runs without a summary whose task has a budget (calibrated and learned),
    the group with the fewest steps left first, so that a sweep stopped early
    has whole cells: a task's from-scratch and protocol runs are one group
    (the protocol starts from the scratch checkpoints), the sensitivity arm
    another; within a group, the preset's order (seed-major)."""
    budgets = {task.name: self.budget(task) for task in self.preset.tasks}
    runs = [r for r in self.preset.runs()
            if not self.done(r) and budgets[r.task.name] and self.mine(r)]
    if self.preset.in_order:  # the tasks' kinds, the protocol's arms, then later kinds
      return sorted(runs, key=lambda r: (r.kind in r.task.later_kinds + r.task.chosen_kinds
                                         and r.arm == "scratch", r.source() is not None))
    group = lambda r: (r.task.name, r.arm if r.arm == "sensitivity" else "")
    steps_left = collections.Counter()
    for r in runs:
      steps_left[group(r)] += r.steps(budgets[r.task.name])
    return sorted(runs, key=lambda r: steps_left[group(r)])  # stable: the preset's order within

  def calibrate(self, *, jobs: int = 1) -> dict:
    """Trains the calibration runs not yet recorded, and again those of tasks
    not learned within fewer steps than the preset now allows; returns the budgets."""
    budgets = load_budgets(self.results_dir)

    def needed(run):
      record = budgets.get(run.task.name)
      return record is None or (record["budget"] is None
                                and record["max_steps"] < run.task.max_steps)
    todo = [r for r in self.preset.calibration_runs() if needed(r) and self.mine(r)]

    slots = self._slots(jobs)

    def one(run, stop):
      overrides = (("steps", run.task.max_steps), ("eval_every", run.task.interval),
                   ("checkpoint_every", run.task.interval))
      run = dataclasses.replace(run, setting=overrides)
      with slots.take() as cores:
        status = execute(run, self.out, run.task.max_steps, stop, self.log, evaluate=False,
                         cores=cores)
      record = calibration_record(run.task, run.workdir(self.out), self.preset.learned,
                                  self.preset.converged)
      if status == "done" and record is not None:
        with _BUDGETS_LOCK:
          budgets = load_budgets(self.results_dir)
          budgets[run.task.name] = record
          os.makedirs(self.results_dir, exist_ok=True)
          write_atomically(os.path.join(self.results_dir, BUDGETS_FILE),
                            json.dumps(budgets, indent=1, sort_keys=True))
        self.log(f"calibrated {run.task.name}: budget {record['budget']}")
        self.on_written([os.path.join(self.results_dir, BUDGETS_FILE)],
                        f"calibration: {run.task.name} budget {record['budget']} "
                        f"(up to {run.task.max_steps} steps)")
      return status

    with self._exclusive(jobs):
      self._map(one, todo, jobs)
    return load_budgets(self.results_dir)

  def run(self, *, jobs: int = 1, limit: int | None = None, stop_by: float | None = None,
          until: float | None = None) -> dict[str, str]:
    """Runs what is pending, `jobs` at a time (at most `limit` runs, a
    population counting as one); returns {run name: status}. Each job takes
    the first pending run not yet tried, asked afresh as it starts one, so a
    task another process calibrated meanwhile joins in its place in the
    order; a run tried once is not tried again. `stop_by` (POSIX time): a run
    whose `expected_seconds` would end after it is passed over for the next
    in the order that fits (the runs in flight finish). `until` (POSIX time):
    then the runs in flight are stopped as by SIGTERM (each trainer saves its
    checkpoint; status "stopped") and none starts; the next sweep resumes them."""
    with self._exclusive(jobs):
      return self._run_pending(jobs, limit, stop_by, until)

  def expected_seconds(self, unit: Run | PopulationRun) -> float | None:
    """How long `unit` will take (`progress_report.expected_seconds`): the
    median `seconds` of its task's, arm's and group's finished runs; for a
    group not run yet, its kind's step time over RoPE's (`step_costs_file`)
    times the task's pace over every kind run from scratch, else the longest
    run of its task and arm; None without any (or for a population)."""
    if isinstance(unit, PopulationRun):
      return None
    summaries = [s for path in glob.glob(os.path.join(self.results_dir, unit.task.name, "*",
                                                       "*", "seed*.json"))
                 if isinstance((s := read_json(path) or {}).get("seconds"), (int, float))
                 and all(k in s for k in ("task", "kind", "arm", "group", "seed"))]
    whole = progress_report.run_seconds(cells(summaries), unit,
                                        step_costs(self.step_costs_file)[1])
    # A run stopped part-way (`until`, a signal) resumes from its checkpoint; its
    # evaluation is taken to scale alike (an underestimate for one fully trained).
    return None if whole is None else whole * (1.0 - trained_fraction(unit.workdir(self.out)))

  def _fits(self, unit: Run | PopulationRun, stop_by: float, passed_over: set[str]) -> bool:
    """Whether `unit` is expected to end by `stop_by` (one of unknown length:
    whether `stop_by` is still ahead); logs each unit passed over once."""
    expected = self.expected_seconds(unit)
    if time.time() + (expected or 0.0) <= stop_by:
      return True
    if unit.name not in passed_over:
      passed_over.add(unit.name)
      when = time.strftime("%Y-%m-%d %H:%M", time.localtime(stop_by))
      guess = "" if expected is None else f" (expected to take {expected:.0f} s)"
      self.log(f"stop_by {when}: not starting {unit.name}{guess}")
    return False

  def _run_pending(self, jobs: int, limit: int | None, stop_by: float | None = None,
                   until: float | None = None) -> dict[str, str]:
    out: dict[str, str] = {}
    tried: list = []
    lock = threading.Lock()
    halted = threading.Event()  # a run was stopped by a signal: start no other
    passed_over: set[str] = set()  # runs not started for `stop_by` (logged once)

    def pick():
      with lock:
        if halted.is_set() or (limit is not None and len(tried) >= limit):
          return None
        if self.resolve is not None:  # runs the results have chosen since the last pick
          self.preset = self.resolve()
        todo = [r for r in self.pending() if r.unit not in tried]
        if not todo:
          return None
        unit = todo[0].unit
        if stop_by is not None:  # the first in the order that fits
          unit = next((u for u in dict.fromkeys(r.unit for r in todo)
                       if self._fits(u, stop_by, passed_over)), None)
          if unit is None:
            return None
        tried.append(unit)
        left = len(dict.fromkeys(r.unit for r in todo)) - 1
        return unit, [r for r in todo if r.unit == unit], len(tried), len(tried) + left

    slots = self._slots(jobs)

    def worker(stop):
      while not stop.signal and (picked := pick()) is not None:
        with slots.take() as cores:
          statuses = self._run_unit(*picked, stop, cores=cores)
        with lock:
          out.update(statuses)
        if "stopped" in statuses.values():
          halted.set()

    def stop_at_until(stop):
      if stop.signal is None:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(until))
        self.log(f"until {when}: stopping the runs in flight (each saves its checkpoint)")
        stop.stop(signal.SIGTERM, once=True)

    with _Stop() as stop, concurrent.futures.ThreadPoolExecutor(jobs) as pool:
      timer = None
      if until is not None:
        timer = threading.Timer(max(until - time.time(), 0.0), stop_at_until, (stop,))
        timer.daemon = True
        timer.start()
      try:
        for future in [pool.submit(worker, stop) for _ in range(jobs)]:
          future.result()
      finally:
        if timer is not None:
          timer.cancel()
    return out

  def _run_unit(self, unit, runs: list[Run], index: int, total: int, stop: _Stop, *,
                cores: frozenset[int] | None = None) -> dict[str, str]:
    """Trains and evaluates `unit` (a run or a population) on `cores`, then
    writes (and hands to `on_written`) the summary of each of its `runs`."""
    budget = self.budget(unit.task)
    start = time.time()
    self.log(f"[{index}/{total}] {unit.name}  {time.strftime('%H:%M:%S')}")
    status = execute(unit, self.out, budget, stop, self.log, cores=cores)
    statuses = {r.name: status for r in runs}
    share = len(unit.members()) if isinstance(unit, PopulationRun) else 1
    # Segments of earlier sweeps count too (logs older than `TOOK` lack them).
    seconds = max(logged_seconds(unit.workdir(self.out)), time.time() - start) / share
    for run in runs if status == "done" else ():
      summary = summary_of(run, self.out, budget, seconds)
      if summary is None:
        statuses[run.name] = "failed"
        self._failed(run, "its results lack a split or the final step (a population's "
                     "member that went non-finite is not evaluated: see eval.log)")
      else:
        path = summary_path(self.results_dir, run)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_atomically(path, json.dumps(summary, indent=1))
        self.on_written([path], f"sweep ({os.path.basename(self.results_dir)}): {run.name}")
    self.log(f"{unit.name}: {status} in {time.time() - start:.0f}s")
    return statuses

  def _failed(self, run: Run, why: str) -> None:
    os.makedirs(run.workdir(self.out), exist_ok=True)
    with open(os.path.join(run.workdir(self.out), FAILED_FILE), "w") as f:
      f.write(f"{why}\ntime: {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
    self.log(f"FAILED {run.name}: {why}")

  @contextlib.contextmanager
  def _exclusive(self, jobs: int):
    """Holds `out`'s sweep lock (one sweep per `out`) after checking `jobs`."""
    if jobs < 1:
      raise ValueError(f"jobs={jobs}: must be >= 1")
    os.makedirs(self.out, exist_ok=True)
    lock = open(os.path.join(self.out, "sweep.lock"), "w")
    try:
      fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      lock.close()
      raise ValueError(f"out={self.out!r}: another sweep is running there "
                       f"(pid in {os.path.join(self.out, 'sweep.pid')})") from None
    with open(os.path.join(self.out, "sweep.pid"), "w") as f:
      f.write(f"{os.getpid()}\n")
    try:
      yield
    finally:
      lock.close()

  def _map(self, fn, runs: Sequence[Run], jobs: int) -> list[str | None]:
    """`fn(run, stop)` over `runs`, `jobs` at a time, under `_exclusive`."""
    with _Stop() as stop, concurrent.futures.ThreadPoolExecutor(jobs) as pool:
      return list(pool.map(lambda r: None if stop.signal else fn(r, stop), runs))


_BUDGETS_LOCK = threading.Lock()


# ----------------------------------------------------------------------------
# Command line.
# ----------------------------------------------------------------------------

_PRESET = flags.DEFINE_enum("preset", None, list(PRESETS), "Which sweep.")
_OUT = flags.DEFINE_string("out", "benchmarks/out/extrapolation", "Workdirs of the runs.")
_RESULTS = flags.DEFINE_string(
    "results", None, "Directory of the run summaries (default results/PRESET).")
_JOBS = flags.DEFINE_integer(
    "jobs", 1, "Runs at a time. The cpu preset's small models use 2 cores poorly: on 2 "
    "cores, Dyck runs took 114-125 s two at a time against 71-91 s one at a time (~1.4x the "
    "throughput).")
_PIN_CORES = flags.DEFINE_bool(
    "pin_cores", True, "With --jobs > 1, each job's commands run on its own share of the CPUs "
    "(`machine.core_slots`: on 2 cores two pinned runs made ~15% more steps/s than unpinned); "
    "--nopin_cores: every run may use every CPU.")
_LIMIT = flags.DEFINE_integer(
    "limit", None, "Run at most this many runs (a population counts as one), then report.")
_STOP_BY = flags.DEFINE_string(
    "stop_by", None, "Start no run expected to end after this (the median time of the finished "
    "runs of its task, arm and kind; a kind not run yet: its step time over RoPE's times the "
    "task's pace, else the longest run of the task and arm), but the next "
    "in the order that fits; the runs in flight finish (the sweep's runs; not --calibrate's). A duration (90m, "
    "2.5h), HH:MM (next occurrence) or YYYY-MM-DDTHH:MM, local time: for a machine lent for a "
    "while, where a run cut off is lost.")
_UNTIL = flags.DEFINE_string(
    "until", None, "Then stop the runs in flight as SIGTERM does (each trainer saves its "
    "checkpoint) and start none; the next sweep resumes them from there, and --stop_by counts "
    "only the training they have left. Same forms as --stop_by: for a machine lent for a while "
    "that keeps its disk between loans, where --stop_by alone would leave cores idle at the end.")
_TASKS = flags.DEFINE_list(
    "tasks", None, "Only these tasks of the preset (their names, comma-separated): their "
    "calibration and runs (the report is the whole preset's).")
_CALIBRATE = flags.DEFINE_bool("calibrate", False, "Calibrate the step budgets, then stop.")
_DRY_RUN = flags.DEFINE_bool("dry_run", False, "List the runs left to do; run nothing.")
_SUMMARIZE_ONLY = flags.DEFINE_bool("summarize_only", False, "Only write the report.")
_COMMIT = flags.DEFINE_bool(
    "commit", False, "git-commit each summary (and the budgets) as it is written, and only "
    "those files, so that a sweep spread over machines loses nothing that finished.")
_SHARD = flags.DEFINE_string(
    "shard", None, "i/N: run only shard i (0-based) of N of the runs and calibrations "
    "(`shard_of`: stable, a surgery/continue run with its source), e.g. one per machine or per "
    "worker of a TPU VM pod, all into one results directory.")
_DATA_DIR = flags.DEFINE_string(
    "data_dir", None, "Data directory of the published Dyck files (default: $BIFOCAL_DATA_DIR, "
    "else $XDG_CACHE_HOME/bifocal_jax/data); passed on to the evaluations.")
_RESULTS_MD = flags.DEFINE_string(
    "results_md", None, "Markdown file whose generated block receives the report.")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments {argv[1:]}")
  if _PRESET.value is None:
    raise app.UsageError(f"--preset is required (one of {list(PRESETS)})")
  results_dir = os.path.abspath(_RESULTS.value or os.path.join(RESULTS_DIR, _PRESET.value))
  def resolve() -> Preset:  # with what its results chose so far
    whole = PRESETS[_PRESET.value].resolved(results_dir)
    return whole.only(_TASKS.value) if _TASKS.value is not None else whole

  preset = resolve()
  log = lambda m: print(m, flush=True)  # pylint: disable=unnecessary-lambda-assignment
  on_written = None
  if _COMMIT.value:
    on_written = lambda paths, message: git_commit_paths(paths, message, log=log)  # pylint: disable=unnecessary-lambda-assignment
  if _DATA_DIR.value:  # for the evaluations too (their subprocesses inherit it)
    os.environ[published_data.DATA_DIR_ENV] = os.path.abspath(_DATA_DIR.value)
  shard = parse_shard(_SHARD.value) if _SHARD.value else None
  stop_by = parse_deadline(_STOP_BY.value) if _STOP_BY.value else None
  until = parse_deadline(_UNTIL.value, flag="until") if _UNTIL.value else None
  sweep = Sweep(preset, os.path.abspath(_OUT.value), results_dir, log=log, on_written=on_written,
                shard=shard, pin_cores=_PIN_CORES.value, resolve=resolve)
  if _DRY_RUN.value:
    budgets = load_budgets(results_dir)
    uncalibrated = [t.name for t in preset.tasks if t.name not in budgets]
    for run in sweep.pending():
      print(run.name)
    print(f"{len(sweep.pending())} runs to do; not calibrated: {uncalibrated or 'none'}")
    return 0
  if _CALIBRATE.value:
    budgets = sweep.calibrate(jobs=_JOBS.value)
    print(json.dumps({k: v["budget"] for k, v in budgets.items()}, indent=1))
    return 0
  if not _SUMMARIZE_ONLY.value:
    for task in preset.tasks:  # before any run: the line that says how to get them
      for file_name, _ in task.published + task.checkpoint_published:
        published_file(sweep.out, file_name, None)
    statuses = sweep.run(jobs=_JOBS.value, limit=_LIMIT.value, stop_by=stop_by, until=until)
    counts = {s: list(statuses.values()).count(s) for s in sorted(set(map(str, statuses.values())))}
    print(f"sweep: {counts}", flush=True)
  link_base = os.path.dirname(os.path.abspath(_RESULTS_MD.value)) if _RESULTS_MD.value else None
  markdown = report_lib.report(PRESETS[_PRESET.value].resolved(results_dir), results_dir,
                               link_base=link_base)
  if _RESULTS_MD.value:
    report_pages.replace_block(_RESULTS_MD.value, markdown, _PRESET.value)
  print(markdown)
  return 0


def run() -> None:
  """The command line: `main` under absl, a ValueError as one line and exit status 2."""
  try:
    sys.exit(app.run(main))
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)


if __name__ == "__main__":
  run()
