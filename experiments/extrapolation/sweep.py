r"""The decisive experiment: does bifocal attention extrapolate? Runs, summaries, report.

  python -m experiments.extrapolation --preset cpu --calibrate   # step budgets first
  python -m experiments.extrapolation --preset cpu --commit      # the sweep (resumable)
  python -m experiments.extrapolation --preset cpu --dry_run     # what is left to run
  python -m experiments.extrapolation --preset cpu --summarize_only --results_md RESULTS.md
  python -m experiments.extrapolation --preset cpu --address auto  # on a running Ray cluster
  python -m experiments.extrapolation --preset accelerator --limit 1  # one population (a GPU)

(from the repository root; `python -m experiments.extrapolation.sweep` is the
same). The presets (`PRESETS`) are in `presets.py`; what a run is
(`TaskSpec`, `Run`, `PopulationRun`, `Preset`, the kinds) in `runs.py`; what a
finished run's summary holds in `run_summary.py`; how a run's commands run
in `execute.py`; the Ray tasks in `engine.py`; this file picks the runs,
sends them to the cluster and writes their summaries.

The engine is Ray: by default an embedded local cluster sized to this
machine (`--num_cpus`), with `--address` any running Ray cluster (docs:
"Running the experiment on a cluster"). Each run (a population counts as
one) is one task asking for the preset's `run_resources` (`--run_resources`),
as many in flight as the cluster holds. A run is one training (`train.py`)
and its evaluations (`eval.py`), each a subprocess in the run's workdir
`OUT/<task>/<arm>/<group>/seed<N>` on the worker; the task returns the
run's summary and the driver writes it, atomically, into the committed
results directory, `results/<preset>/<task>/<arm>/<group>/seed<N>.json`
(`run_summary.summary_of`: task, kind, arm, seed, steps, the config
overrides, and per split its accuracy with a 95% interval over examples;
for a randomized kind whether it drew per layer, `draws_per_layer`). A run
whose summary exists is done, whatever machine ran it: a sweep started
again skips it, and `--summarize_only` rebuilds every table and plot from
the summaries alone (`report.py`). A worker that dies is retried by Ray,
and the trainer resumes from its last checkpoint where the retry sees the
workdir (`--out` on shared storage for a multi-node cluster); a run that
fails on its own is recorded once as failed (`failed.txt` in its workdir,
its one-line reason in the log) and the others go on. A driver killed
loses at most the runs in flight, which resume from their checkpoints. A
summary's `seconds` is the time of every command the sweeps ran for the run
(`run_summary.logged_seconds`: each resumption and the evaluation included).

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

The published Dyck files are read from the data directory (`--data_dir`,
else `BIFOCAL_DATA_DIR`; `python -m bifocal_jax.tasks.external fetch`
downloads them; on a cluster, every node needs them there); a sweep without
them stops before its first run, saying so.

SIGTERM/SIGINT to the sweep ask the runs in flight to stop (each trainer
saves its checkpoint and exits), then the sweep stops; a second signal kills
them. The runs share JAX's persistent compilation cache (`--compilation_cache`,
default the machine's, `bifocal_jax.machine`), so a run whose programs
another compiled loads them. Commands run at `nice` 10.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import glob
import json
import os
import sys
import time
from collections.abc import Callable, Sequence

from absl import app
from absl import flags

from bifocal_jax import machine
from bifocal_jax.training.atomic_files import write_atomically
from experiments.extrapolation import engine
from experiments.extrapolation import progress_report
from experiments.extrapolation import question_rules
from experiments.extrapolation import report as report_lib
from experiments.extrapolation import results_pages
from experiments.extrapolation import sweep_progress
from experiments.extrapolation.execute import FAILED_FILE
from experiments.extrapolation.git_commit import git_commit_paths
from experiments.extrapolation.leaderboard_report import STEP_COSTS_FILE, step_costs
from experiments.extrapolation.presets import PRESETS
from experiments.extrapolation.run_summary import (  # pylint: disable=g-multiple-import
    BUDGETS_FILE, cells, load_budgets, read_json, summary_path, trained_fraction)
from experiments.extrapolation.runs import (  # pylint: disable=g-multiple-import
    RESULTS_DIR, PopulationRun, Preset, Run, TaskSpec, published_data, published_file)


# ----------------------------------------------------------------------------
# Deadlines.
# ----------------------------------------------------------------------------


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


class Sweep:
  """The runs of a preset in `out`, their summaries in `results_dir`.

  `on_written(paths, message)` is called after every summary (and budgets
  file) is written; `--commit` makes it `git_commit_paths`, so that each
  finished run is committed as it lands. `resolve`: the preset as the
  results extend it now (`Preset.resolved`), asked before each run is
  picked, so that a run a preset chooses from its results (`roster_rules`)
  starts in the sweep that landed the results it was chosen from.
  `resources`: what each task asks of the cluster (default: the preset's
  `run_resources`)."""

  def __init__(self, preset: Preset, out: str, results_dir: str, *,
               log: Callable[[str], None] = print,
               on_written: Callable[[Sequence[str], str], object] | None = None,
               resolve: Callable[[], Preset] | None = None,
               step_costs_file: str = STEP_COSTS_FILE,
               resources: dict[str, float] | None = None, bar: bool | None = None):
    self.preset, self.out, self.results_dir, self.log = preset, out, results_dir, log
    self.on_written = on_written or (lambda paths, message: None)
    self.resolve, self.step_costs_file = resolve, step_costs_file
    self.resources = dict(resources or preset.run_resources)
    self.bar = bar

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
    runs = [r for r in self.preset.runs() if not self.done(r) and budgets[r.task.name]]
    if self.preset.in_order:  # the tasks' kinds, the protocol's arms, later kinds, a question's
      return sorted(runs, key=lambda r: (question_rules.is_question(r), r.kind in
                                         r.task.later_kinds + r.task.chosen_kinds
                                         and r.arm == "scratch", r.source() is not None))
    group = lambda r: (r.task.name, r.arm if r.arm == "sensitivity" else "")
    steps_left = collections.Counter()
    for r in runs:
      steps_left[group(r)] += r.steps(budgets[r.task.name])
    return sorted(runs, key=lambda r: steps_left[group(r)])  # stable: the preset's order within

  def calibrate(self, cluster) -> dict:
    """Trains the calibration runs not yet recorded, and again those of tasks
    not learned within fewer steps than the preset now allows, all at once on
    `cluster`; writes each budget as it lands and returns the budgets."""
    budgets = load_budgets(self.results_dir)

    def needed(run):
      record = budgets.get(run.task.name)
      return record is None or (record["budget"] is None
                                and record["max_steps"] < run.task.max_steps)

    refs = {}
    for run in (r for r in self.preset.calibration_runs() if needed(r)):
      overrides = (("steps", run.task.max_steps), ("eval_every", run.task.interval),
                   ("checkpoint_every", run.task.interval))
      run = dataclasses.replace(run, setting=overrides)
      refs[cluster.submit(engine.calibrate, run, self.out, run.task, self.preset.learned,
                          self.preset.converged, self.resources.get("CPU", 1),
                          resources=self.resources, name=run.name)] = run
    with engine.StopOnSignal(cluster, refs, self.log):
      while refs:
        for ref in cluster.wait(list(refs), timeout=1.0):
          run, outcome = refs.pop(ref), cluster.outcome(ref)
          if outcome.status == "done" and outcome.record is not None:
            budgets = load_budgets(self.results_dir)
            budgets[run.task.name] = outcome.record
            os.makedirs(self.results_dir, exist_ok=True)
            path = os.path.join(self.results_dir, BUDGETS_FILE)
            write_atomically(path, json.dumps(budgets, indent=1, sort_keys=True))
            budget = outcome.record["budget"]
            self.log(f"calibrated {run.task.name}: budget {budget}")
            self.on_written([path], f"calibration: {run.task.name} budget {budget} "
                            f"(up to {run.task.max_steps} steps)")
          elif outcome.status == "failed":
            self.log(f"FAILED {run.name}: {outcome.why}")
    return load_budgets(self.results_dir)

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

  def run(self, cluster, *, limit: int | None = None, stop_by: float | None = None,
          until: float | None = None) -> dict[str, str]:
    """Runs what is pending on `cluster`, as many at a time as it holds (at
    most `limit` units, a population counting as one); returns {run name:
    status}. The next unit is the first pending one not yet tried, asked
    afresh as a task ends, so a run the results chose meanwhile takes its
    place in the order; a run tried once is not tried again; a surgery or
    continue run waits while its source trains in another task. `stop_by`
    (POSIX time): a unit expected to end after it is passed over for the next
    that fits. `until` (POSIX time): then the tasks in flight are asked to
    stop (each trainer saves its checkpoint; status "stopped") and none starts."""
    statuses: dict[str, str] = {}
    tried: list = []
    passed_over: set[str] = set()
    in_flight: dict = {}  # task -> (unit, its runs)
    progress = sweep_progress.Progress(len({r.unit for r in self.pending()}), self.log,
                                       bar=self.bar)
    progress.slots = cluster.capacity(self.resources)

    def busy(unit) -> bool:  # its source (or it, as a source) trains in a task now
      key = (unit.source() or unit).name
      return any(key == (u.source() or u).name for u, _ in in_flight.values())

    def pick():
      if limit is not None and len(tried) >= limit:
        return None
      if self.resolve is not None:  # runs the results have chosen since the last pick
        self.preset = self.resolve()
      todo = [r for r in self.pending() if r.unit not in tried]
      units = [u for u in dict.fromkeys(r.unit for r in todo) if not busy(u)]
      if stop_by is not None:  # the first in the order that fits
        units = [u for u in units if self._fits(u, stop_by, passed_over)][:1]
      if not units:
        return None
      tried.append(units[0])
      progress.resize(progress.landed + progress.failed + len(in_flight)
                      + len(dict.fromkeys(r.unit for r in todo)))
      return units[0], [r for r in todo if r.unit == units[0]]

    with engine.StopOnSignal(cluster, in_flight, self.log, until=until) as signals:
      try:
        while True:
          while not signals.stopping and len(in_flight) < cluster.capacity(self.resources):
            if (picked := pick()) is None:
              break
            unit, runs = picked
            budget = self.budget(unit.task)
            ref = cluster.submit(engine.train_and_summarize, unit, runs, self.out, budget,
                                 self.resources.get("CPU", 1), resources=self.resources,
                                 name=unit.name)
            in_flight[ref] = picked
            progress.start(unit.name, len(tried))
          if not in_flight:
            break
          for ref in cluster.wait(list(in_flight), timeout=1.0):
            unit, runs = in_flight.pop(ref)
            outcome = cluster.outcome(ref)
            statuses.update(self._landed(unit, runs, outcome, progress))
            if outcome.status == "stopped":  # by a signal from outside too: start no other
              signals.stopping = True
      finally:
        progress.close()
    return statuses

  def _landed(self, unit, runs: list[Run], outcome: engine.Outcome,
              progress: sweep_progress.Progress) -> dict[str, str]:
    """Writes (and hands to `on_written`) each summary `outcome` brings,
    unless one is there already; returns each run's status."""
    statuses = {r.name: outcome.status for r in runs}
    for run in runs:
      summary = outcome.summaries.get(run.name)
      if summary is None:
        continue
      statuses[run.name] = "done"
      path = summary_path(self.results_dir, run)
      if os.path.exists(path):  # landed meanwhile from another driver: never twice
        continue
      os.makedirs(os.path.dirname(path), exist_ok=True)
      write_atomically(path, json.dumps(summary, indent=1))
      self.on_written([path], f"sweep ({os.path.basename(self.results_dir)}): {run.name}")
    if outcome.status == "failed":
      _record_failure(unit.workdir(self.out), outcome.why)
    progress.end(unit.name, outcome.status, outcome.why)
    return statuses


def _record_failure(workdir: str, why: str) -> None:
  """`failed.txt` where the driver can see it (the task wrote one with the
  log's tail on its worker; this keeps the one line on the driver's disk)."""
  path = os.path.join(workdir, FAILED_FILE)
  if not os.path.exists(path):
    os.makedirs(workdir, exist_ok=True)
    with open(path, "w") as f:
      f.write(f"{why}\ntime: {time.strftime('%Y-%m-%d %H:%M:%S')}\n")


# ----------------------------------------------------------------------------
# Command line.
# ----------------------------------------------------------------------------

_PRESET = flags.DEFINE_enum("preset", None, list(PRESETS), "Which sweep.")
_OUT = flags.DEFINE_string(
    "out", "benchmarks/out/extrapolation", "Root of the runs' workdirs, on every node that runs "
    "them (shared storage on a multi-node cluster lets a retried run resume on another node).")
_RESULTS = flags.DEFINE_string(
    "results", None, "Directory of the run summaries (default results/PRESET), on this machine.")
_ADDRESS = flags.DEFINE_string(
    "address", None, "A running Ray cluster to join (`auto`, `HOST:PORT`, `ray://HOST:PORT`); "
    "default: an embedded local cluster on this machine.")
_NUM_CPUS = flags.DEFINE_integer(
    "num_cpus", None, "CPUs of the embedded local cluster (default: this machine's).")
_DASHBOARD = flags.DEFINE_bool("dashboard", False, "Start Ray's dashboard (local cluster).")
_RUN_RESOURCES = flags.DEFINE_string(
    "run_resources", None, "What each run asks of the cluster, NAME=AMOUNT,... in Ray's names "
    "(CPU, GPU, TPU, ...); default the preset's (CPU=1; the accelerator preset CPU=8,GPU=1).")
_COMPILATION_CACHE = flags.DEFINE_string(
    "compilation_cache", None, "JAX's persistent compilation cache for every run (a directory, "
    "shared storage on a cluster; `off` for none); default the machine's "
    "(bifocal_jax.machine: $BIFOCAL_COMPILATION_CACHE, else ~/.cache/bifocal_jax/...).")
_LIMIT = flags.DEFINE_integer(
    "limit", None, "Run at most this many runs (a population counts as one), then report.")
_STOP_BY = flags.DEFINE_string(
    "stop_by", None, "Start no run expected to end after this (the median time of the finished "
    "runs of its task, arm and kind; a kind not run yet: its step time over RoPE's times the "
    "task's pace, else the longest run of the task and arm), but the next in the order that "
    "fits; the runs in flight finish. A duration (90m, 2.5h), HH:MM (next occurrence) or "
    "YYYY-MM-DDTHH:MM, local time: for a machine lent for a while, where a run cut off is lost.")
_UNTIL = flags.DEFINE_string(
    "until", None, "Then ask the runs in flight to stop (each trainer saves its checkpoint) and "
    "start none; the next sweep resumes them from there, and --stop_by counts only the training "
    "they have left. Same forms as --stop_by: for a machine that keeps its disk between loans.")
_TASKS = flags.DEFINE_list(
    "tasks", None, "Only these tasks of the preset (their names, comma-separated): their "
    "calibration and runs (the report is the whole preset's).")
_CALIBRATE = flags.DEFINE_bool("calibrate", False, "Calibrate the step budgets, then stop.")
_DRY_RUN = flags.DEFINE_bool("dry_run", False, "List the runs left to do; run nothing.")
_SUMMARIZE_ONLY = flags.DEFINE_bool("summarize_only", False, "Only write the report.")
_COMMIT = flags.DEFINE_bool(
    "commit", False, "git-commit each summary (and the budgets) as it is written, and only "
    "those files, so that a sweep cut off loses nothing that finished.")
_DATA_DIR = flags.DEFINE_string(
    "data_dir", None, "Data directory of the published Dyck files (default: $BIFOCAL_DATA_DIR, "
    "else $XDG_CACHE_HOME/bifocal_jax/data); passed on to the runs.")
_RESULTS_MD = flags.DEFINE_string(
    "results_md", None, "Markdown file whose generated block receives the report.")


def _task_env() -> dict[str, str]:
  """The environment the runs need from the driver's: the data directory and
  the compilation cache, as set by flag or environment."""
  env = {}
  if _DATA_DIR.value:  # for the evaluations (their subprocesses inherit it)
    os.environ[published_data.DATA_DIR_ENV] = os.path.abspath(_DATA_DIR.value)
  if os.environ.get(published_data.DATA_DIR_ENV):
    env[published_data.DATA_DIR_ENV] = os.environ[published_data.DATA_DIR_ENV]
  cache = _COMPILATION_CACHE.value
  if cache is not None:
    env[machine.CACHE_ENV] = cache if cache.lower() == "off" else os.path.abspath(cache)
  elif os.environ.get(machine.CACHE_ENV):
    env[machine.CACHE_ENV] = os.environ[machine.CACHE_ENV]
  return env


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
  resources = engine.parse_resources(_RUN_RESOURCES.value) if _RUN_RESOURCES.value else None
  stop_by = parse_deadline(_STOP_BY.value) if _STOP_BY.value else None
  until = parse_deadline(_UNTIL.value, flag="until") if _UNTIL.value else None
  env = _task_env()
  sweep = Sweep(preset, os.path.abspath(_OUT.value), results_dir, log=log, on_written=on_written,
                resolve=resolve, resources=resources)
  if _DRY_RUN.value:
    budgets = load_budgets(results_dir)
    uncalibrated = [t.name for t in preset.tasks if t.name not in budgets]
    for run in sweep.pending():
      print(run.name)
    print(f"{len(sweep.pending())} runs to do; not calibrated: {uncalibrated or 'none'}")
    return 0
  if not _SUMMARIZE_ONLY.value:
    if not _CALIBRATE.value:
      for task in preset.tasks:  # before any run: the line that says how to get them
        for file_name, _ in task.published + task.checkpoint_published:
          published_file(sweep.out, file_name, None)
    cluster = engine.Cluster(_ADDRESS.value, num_cpus=_NUM_CPUS.value,
                             dashboard=_DASHBOARD.value, env=env)
    try:
      if _CALIBRATE.value:
        budgets = sweep.calibrate(cluster)
        print(json.dumps({k: v["budget"] for k, v in budgets.items()}, indent=1))
        return 0
      statuses = sweep.run(cluster, limit=_LIMIT.value, stop_by=stop_by, until=until)
    finally:
      cluster.close()
    counts = collections.Counter(statuses.values())
    print(f"sweep: {dict(sorted(counts.items()))}", flush=True)
  if _RESULTS_MD.value:  # the preset's page, then RESULTS.md's summary (results elsewhere: a block)
    markdown = results_pages.publish(_PRESET.value, results_dir,
                                     os.path.abspath(_RESULTS_MD.value))
  else:
    markdown = report_lib.report(PRESETS[_PRESET.value].resolved(results_dir), results_dir)
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
