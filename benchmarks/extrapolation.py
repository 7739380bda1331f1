r"""The decisive experiment: does bifocal attention extrapolate? Runs, summaries, report.

  python benchmarks/extrapolation.py --preset cpu --calibrate --jobs 2  # step budgets first
  python benchmarks/extrapolation.py --preset cpu --jobs 2 --commit  # the sweep (resumable)
  python benchmarks/extrapolation.py --preset cpu --dry_run        # what is left to run
  python benchmarks/extrapolation.py --preset cpu --summarize_only --results_md RESULTS.md
  python benchmarks/extrapolation.py --preset accelerator --limit 1  # one population (a GPU)
  python benchmarks/extrapolation.py --preset cpu --shard 0/4 --commit  # machine 0 of 4

A run is one training (`train.py`) and one evaluation (`eval.py`), each a
subprocess in the run's workdir `OUT/<task>/<arm>/<group>/seed<N>`. Once both
finished, the run leaves a small JSON summary in the committed results
directory, `benchmarks/results/runs/<preset>/<task>/<arm>/<group>/seed<N>.json`
(`summary_of`: task, kind, arm, seed, steps, the config overrides, and per
split its accuracy with a 95% interval over examples). A run whose summary
exists is done, whatever machine ran it: a sweep started elsewhere skips it,
and `--summarize_only` rebuilds every table and plot from the summaries alone
(`extrapolation_report.py`). A crash or a kill loses at most the run in flight
(its trainer resumes from its last checkpoint); a failed run leaves
`failed.txt` in its workdir and the sweep goes on. A summary's `seconds`
is the time of every command the sweeps ran for the run (`logged_seconds`:
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
import hashlib
import itertools
import json
import os
import platform
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence

import numpy as np
from absl import app
from absl import flags

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)  # bifocal_jax, from a checkout
from bifocal_jax import host  # pylint: disable=g-import-not-at-top,wrong-import-position
from bifocal_jax import positions  # pylint: disable=g-import-not-at-top,wrong-import-position
from bifocal_jax.tasks.external import published as published_data  # pylint: disable=g-import-not-at-top,wrong-import-position

RESULTS_DIR = os.path.join(REPO, "benchmarks", "results", "runs")
FAILED_FILE = "failed.txt"
BUDGETS_FILE = "budgets.json"
LEARNED = 0.9  # valid token accuracy at which a task counts as learned in distribution
TAIL_LINES = 40
TOOK = "# took "  # the line `_execute` appends to a log when its command ends

# Position kinds as the sweep names them: config overrides of each.
KINDS = {
    "nope": {"position.kind": "nope"},
    "rope": {"position.kind": "rope"},
    "randomized_rope": {"position.kind": "randomized_rope"},
    "alibi": {"position.kind": "alibi"},
    "spectral": {"position.kind": "spectral"},
    "bifocal_heads": {"position.kind": "bifocal", "position.split": "heads"},
    "bifocal_pairs": {"position.kind": "bifocal", "position.split": "pairs"},
}
SPECTRAL_KINDS = ("spectral", "bifocal_heads", "bifocal_pairs")
# The kinds of the bifocal verdict (the cpu and converged sweeps).
VERDICT_KINDS = tuple(KINDS)
# Every other `position.kind` of the registry (`bifocal_jax/positions/`), under
# its own name (`kind_overrides`): the roster of the field's schemes (issue 31).
ROSTER_KINDS = tuple(k for k in positions.POSITION_KINDS
                     if k != "bifocal" and k not in KINDS)


def kind_overrides(kind: str) -> dict:
  """The config overrides of a sweep kind: `KINDS`'s, or, for any other valid
  `position.kind` (a mixed `rope+cope` too), that kind under its own name
  (the name is a directory of the runs and a row of the tables, `+` and all)."""
  if kind in KINDS:
    return KINDS[kind]
  if not positions.is_valid_kind(kind):
    raise ValueError(f"kind {kind!r}: not one of the sweep's {tuple(KINDS)} nor a position.kind")
  return {"position.kind": kind}


def is_spectral(kind: str) -> bool:
  """Whether a sweep kind has trainable spectra (its evaluation analyses them)."""
  if kind in KINDS:
    return kind in SPECTRAL_KINDS
  return any(p.name in ("spectral", "bifocal") for p in positions.parts(kind))


# ----------------------------------------------------------------------------
# What to run.
# ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class OfSteps:
  """A setting's value as a fraction of the run's steps (e.g. freeze for half)."""
  fraction: float

  def __str__(self) -> str:
    return f"{self.fraction:g}_of_steps"

  def resolve(self, steps: int) -> int:
    return int(steps * self.fraction)


@dataclasses.dataclass(frozen=True)
class TaskSpec:
  """One task of a preset: its config, its calibration, and how it is evaluated.

  `overrides`: `((config key, value), ...)` for every run of the task.
  `max_steps`, `interval`: the calibration's longest run and evaluation interval.
  `eval_args`: extra `eval.py` flags (e.g. `--num_examples=2000`).
  `name` identifies the task in budgets, workdirs and summaries; its config
  is `configs/<config_name or name>.py`.
  `che`: `(stride, examples per length)` of the CHE protocol (Chomsky tasks),
  whose results are the split `che`; None for tasks without it (Dyck).
  `published`: `((published file name, max lines or None), ...)`: Dyck
  files to score on; a capped file is an evenly spaced subset of its lines.
  """
  name: str
  splits: tuple[str, ...] = ("valid", "test_length")
  overrides: tuple[tuple[str, object], ...] = ()
  max_steps: int = 3000
  interval: int = 250
  eval_args: tuple[str, ...] = ()
  published: tuple[tuple[str, int | None], ...] = ()
  variant: str = ""
  che: tuple[int, int] | None = None
  # Training time as an axis: a scratch run is also evaluated at these
  # multiples of `just_fit` (the task's budget in the just-fitted `cpu` sweep)
  # that fall before its own budget, on `checkpoint_examples` examples per
  # split and `checkpoint_published` subsets (evenly spaced lines: every
  # length and depth of the file, fewer strings), into its summary's `at_steps`.
  at_multiples: tuple[float, ...] = ()
  # Or the earlier checkpoints at these steps (a geometric schedule), for a
  # task without a just-fit sweep. `just_fit` None: the calibration reads it
  # off its curve (the first step at the preset's `learned`), which keeps an
  # early plateau from passing for convergence.
  at_steps: tuple[int, ...] = ()
  just_fit: int | None = None
  checkpoint_examples: int | None = None
  checkpoint_published: tuple[tuple[str, int | None], ...] = ()
  # The config file's name when it is not `name` (a second model size of a
  # task is another TaskSpec, named apart: its budgets, workdirs, summaries).
  config_name: str = ""
  kinds: tuple[str, ...] = ()  # the position kinds run on it (default: the preset's)
  # Kinds run after those (and the task's protocol arms), seed-major: a sweep
  # stopped early has whole seeds of the verdict's kinds first.
  later_kinds: tuple[str, ...] = ()
  # The final evaluation also runs the mechanism probes (`eval.py --probe`;
  # bracket tasks only), their headline numbers into the summary's `probe`.
  probe: bool = False

  @property
  def config(self) -> str:
    path = os.path.join("configs", f"{self.config_name or self.name}.py")
    return f"{path}:{self.variant}" if self.variant else path

  @property
  def split_names(self) -> tuple[str, ...]:
    return self.splits + tuple(f for f, _ in self.published) + (("che",) if self.che else ())

  def checkpoint_steps(self, budget: int) -> tuple[int, ...]:
    """The earlier checkpoints a scratch run of `budget` steps is evaluated at."""
    if self.at_steps:
      return tuple(s for s in sorted(set(self.at_steps)) if 0 < s < budget)
    if not self.at_multiples:
      return ()
    if not self.just_fit:
      raise ValueError(f"task {self.name!r}: at_multiples needs just_fit")
    return tuple(sorted({s for s in (int(round(m * self.just_fit)) for m in self.at_multiples)
                         if 0 < s < budget}))


@dataclasses.dataclass(frozen=True)
class Run:
  """One run: `kind` on `task` with `seed`, started as `arm` says.

  `setting`: `((config key, value), ...)` on top of the task's and kind's
  overrides, named by `label` (sensitivity settings); `fraction`: for
  surgery/continue, the further steps as a fraction of the budget;
  `budget_multiple`: otherwise, the steps as a multiple of the budget.
  """
  task: TaskSpec
  kind: str
  seed: int
  arm: str = "scratch"
  setting: tuple[tuple[str, object], ...] = ()
  label: str = ""
  fraction: float = 0.5
  budget_multiple: float = 1.0
  population: PopulationRun | None = None  # trained as member `member` of this population
  member: int | None = None

  @property
  def group(self) -> str:
    return f"{self.kind}_{self.label}" if self.label else self.kind

  @property
  def name(self) -> str:
    return f"{self.task.name}/{self.arm}/{self.group}/seed{self.seed}"

  def workdir(self, out: str) -> str:
    if self.population is not None:  # `bifocal_jax.population.member_dir`
      return os.path.join(self.population.workdir(out), "members", str(self.member))
    return os.path.join(out, self.name)

  @property
  def unit(self) -> Run | PopulationRun:
    """What trains it: itself, or its population."""
    return self.population or self

  def source(self) -> Run | None:
    """The scratch `rope` run a surgery or continue run starts from."""
    if self.arm not in ("surgery", "continue"):
      return None
    return Run(self.task, "rope", self.seed)

  def steps(self, budget: int) -> int:
    multiple = self.fraction if self.source() else self.budget_multiple
    return max(1, int(round(budget * multiple)))

  def overrides(self, out: str, budget: int) -> dict:
    o = dict(self.task.overrides)
    o.update(kind_overrides(self.kind))
    o.update(seed=self.seed, steps=self.steps(budget), progress_bar=False)
    o.update({k: v.resolve(o["steps"]) if isinstance(v, OfSteps) else v
              for k, v in self.setting})
    if self.source() is not None:
      o["init_from"] = self.source().workdir(out)
    return o

  def train_command(self, out: str, budget: int) -> list[str]:
    return [sys.executable, os.path.join(REPO, "train.py"), f"--config={self.task.config}",
            f"--workdir={self.workdir(out)}"] + [
                f"--config.{k}={v}" for k, v in self.overrides(out, budget).items()]

  def eval_command(self, out: str) -> list[str]:
    return eval_command(self.task, self.kind, self.workdir(out), out)

  def checkpoint_steps(self, budget: int) -> tuple[int, ...]:
    """Earlier checkpoints evaluated into `at_steps` (scratch-like runs only:
    a surgery or continue run is evaluated at its end)."""
    return () if self.source() is not None else self.task.checkpoint_steps(self.steps(budget))

  def checkpoint_eval_command(self, out: str, steps: Sequence[int]) -> list[str]:
    return eval_command(self.task, self.kind, self.workdir(out), out, steps=steps)


def checkpoint_results_path(workdir: str, step: int) -> str:
  return os.path.join(workdir, "eval", f"results_step{step}.json")


def eval_command(task: TaskSpec, kind: str, workdir: str, out: str,
                 steps: Sequence[int] = ()) -> list[str]:
  """`eval.py` on the task's splits, published files and CHE protocol; with
  `steps`, those checkpoints on the task's checkpoint subsets, in one process,
  each into its `checkpoint_results_path` (no spectral analysis: that is the
  final one's)."""
  command = [sys.executable, os.path.join(REPO, "eval.py"), f"--workdir={workdir}",
             f"--splits={','.join(task.splits)}", *task.eval_args]
  published = task.published
  if steps:
    command.append(f"--steps={','.join(str(s) for s in steps)}")
    if task.checkpoint_examples:
      command.append(f"--num_examples={task.checkpoint_examples}")
    published = task.checkpoint_published or task.published
  for file_name, max_lines in published:
    command.append(f"--dyck_file={published_file(out, file_name, max_lines)}")
  if task.che:
    stride, per_length = task.che
    command += ["--che", f"--che_stride={stride}", f"--che_per_length={per_length}"]
  if is_spectral(kind) and not steps:
    command.append("--spectrum")
  if task.probe and not steps:
    command.append("--probe")
  return command


@dataclasses.dataclass(frozen=True)
class PopulationRun:
  """`kind` on `task` for every seed x learning rate in one training
  (`config.population`). Its members (`members`) are `Run`s; the first
  learning rate's are the `scratch` arm, the others `sensitivity` (`lr<rate>`)."""
  task: TaskSpec
  kind: str
  seeds: tuple[int, ...]
  learning_rates: tuple[float, ...]
  data_workers: int = 0

  @property
  def name(self) -> str:
    return f"{self.task.name}/population/{self.kind}"

  def workdir(self, out: str) -> str:
    return os.path.join(out, self.name)

  def source(self) -> None:
    return None

  def checkpoint_steps(self, budget: int) -> tuple[int, ...]:
    """Populations are evaluated at their end only (`Run.checkpoint_steps`)."""
    del budget
    return ()

  def members(self) -> list[Run]:
    """In the trainer's order (`bifocal_jax.population.members`: seed-major)."""
    out = []
    for i, (seed, rate) in enumerate(itertools.product(self.seeds, self.learning_rates)):
      default = rate == self.learning_rates[0]
      out.append(Run(self.task, self.kind, seed, arm="scratch" if default else "sensitivity",
                     setting=(("learning_rate", rate),), label="" if default else f"lr{rate:g}",
                     population=self, member=i))
    return out

  def overrides(self, budget: int) -> dict:
    o = dict(self.task.overrides)
    o.update(kind_overrides(self.kind))
    o.update({"steps": budget, "progress_bar": False, "population.seeds": self.seeds,
              "population.learning_rates": self.learning_rates,
              "population.data_workers": self.data_workers})
    return o

  def train_command(self, out: str, budget: int) -> list[str]:
    return [sys.executable, os.path.join(REPO, "train.py"), f"--config={self.task.config}",
            f"--workdir={self.workdir(out)}"] + [
                f"--config.{k}={v}" for k, v in self.overrides(budget).items()]

  def eval_command(self, out: str) -> list[str]:
    return eval_command(self.task, self.kind, self.workdir(out), out) + ["--member=all"]


@dataclasses.dataclass(frozen=True)
class Preset:
  """Tasks (in priority order) x kinds x seeds, plus the protocol and sensitivity arms."""
  tasks: tuple[TaskSpec, ...]
  kinds: tuple[str, ...]
  seeds: tuple[int, ...]
  protocol_tasks: tuple[str, ...] = ()   # tasks with the surgery and continue arms
  sensitivity: tuple[tuple[str, str, tuple[tuple[str, object], ...]], ...] = ()
  sensitivity_task: str = "dyck"         # (kind, label, setting) runs on this task
  # ((task, budget multiple, kinds), ...): those kinds trained for that multiple
  # of the task's budget, arm `sensitivity`, label `<multiple>x_budget`.
  budget_checks: tuple[tuple[str, float, tuple[str, ...]], ...] = ()
  # ((task, seeds, kinds), ...): more seeds of those kinds from scratch.
  seed_extensions: tuple[tuple[str, tuple[int, ...], tuple[str, ...]], ...] = ()
  learned: float = LEARNED               # valid accuracy that calibrates a budget
  converged: float | None = None         # set: budgets by `convergence_budget` with this gain
  # Pending runs in the preset's order (its tasks are listed verdict-critical
  # first) rather than the group with the fewest steps left first.
  in_order: bool = False
  calibrated: bool = True                # False: each task's budget is its max_steps
  # The report ranks the kinds per held-out split (issue 31's leaderboards),
  # counting the seeds that reach a target: ((task, split, accuracy), ...).
  leaderboards: bool = False
  targets: tuple[tuple[str, str, float], ...] = ()
  learning_rates: tuple[float, ...] = ()  # set: populations (PopulationRun) of seeds x these
  data_workers: int = 0                  # populations: batch-making processes

  def only(self, names: Sequence[str]) -> Preset:
    """The preset restricted to the tasks named (and the arms on them)."""
    by_name = {t.name: t for t in self.tasks}
    unknown = [n for n in names if n not in by_name]
    if unknown or not names:
      raise ValueError(f"tasks={list(names)}: the preset's tasks are {list(by_name)}")
    keep = lambda entries: tuple(e for e in entries if e[0] in names)  # pylint: disable=unnecessary-lambda-assignment
    return dataclasses.replace(
        self, tasks=tuple(by_name[n] for n in by_name if n in names),
        protocol_tasks=tuple(n for n in self.protocol_tasks if n in names),
        sensitivity=self.sensitivity if self.sensitivity_task in names else (),
        budget_checks=keep(self.budget_checks), seed_extensions=keep(self.seed_extensions))

  def calibration_runs(self) -> list[Run]:
    """`rope`, seed 0, for each task's `max_steps` (its workdir named by them);
    none when the preset is not calibrated."""
    if not self.calibrated:
      return []
    return [Run(task, "rope", 0, arm="calibration", label=f"{task.max_steps}steps")
            for task in self.tasks]

  def populations(self) -> list[PopulationRun]:
    """Task by task in priority order, kind by kind (populations presets only)."""
    if not self.learning_rates:
      return []
    return [PopulationRun(task, kind, self.seeds, self.learning_rates, self.data_workers)
            for task in self.tasks for kind in self.kinds]

  def runs(self) -> list[Run]:
    """Task by task in priority order, seed-major within each: a sweep stopped
    early has whole seeds of the first tasks (paired comparisons need them);
    every task's `later_kinds` after all tasks' kinds and protocol arms.
    A populations preset: its populations' members, population by population."""
    if self.learning_rates:
      return [run for p in self.populations() for run in p.members()]
    out = []
    for task in self.tasks:
      for seed in self.seeds:
        out += [Run(task, kind, seed) for kind in task.kinds or self.kinds]
      if task.name in self.protocol_tasks:
        out += [Run(task, kind, seed, arm=arm) for seed in self.seeds
                for arm, kind in (("surgery", "bifocal_heads"), ("continue", "rope"))]
    for task in self.tasks:
      for seed in self.seeds:
        out += [Run(task, kind, seed) for kind in task.later_kinds]
    by_name = {t.name: t for t in self.tasks}
    if self.sensitivity:
      task = by_name[self.sensitivity_task]
      out += [Run(task, kind, seed, arm="sensitivity", setting=setting, label=label)
              for seed in self.seeds for kind, label, setting in self.sensitivity]
    for name, multiple, kinds in self.budget_checks:
      out += [Run(by_name[name], kind, seed, arm="sensitivity", label=f"{multiple:g}x_budget",
                  budget_multiple=multiple) for seed in self.seeds for kind in kinds]
    for name, seeds, kinds in self.seed_extensions:
      out += [Run(by_name[name], kind, seed) for seed in seeds for kind in kinds]
    return out


def _cpu_model(**extra) -> tuple[tuple[str, object], ...]:
  """What the cpu preset relies on, pinned: config defaults may move under a sweep."""
  pinned = {"model.num_layers": 2, "model.d_model": 64, "model.num_heads": 4,
            "model.mlp_dim": -1, "batch_size": 32, "learning_rate": 3e-3, "warmup_steps": 50,
            "spectral.learning_rate": 1e-2, "checkpoint_every": 250, "eval_every": 250,
            "eval_examples": 512, "log_every": 50}
  pinned.update(extra)
  return tuple(pinned.items())


_DYCK_SPLITS = ("valid", "test_length", "test_depth")
# All 15 Chomsky-hierarchy tasks: the calibration decides which a 2-layer
# transformer learns in distribution (the unlearned are reported, not run).
_CHE_TASKS = ("reverse_string", "duplicate_string", "odds_first", "missing_duplicate_string",
              "cycle_navigation", "even_pairs", "bucket_sort", "stack_manipulation",
              "modular_arithmetic", "parity_check", "modular_arithmetic_brackets",
              "solve_equation", "binary_addition", "binary_multiplication", "compute_sqrt")
# (calibration limit, evaluation interval) of the tasks whose valid accuracy
# still rose at the first calibration's 3,000 steps; odds_first, still rising
# steadily at 8,000 (0.86), goes on to 16,000. The others: (3000, 250).
_CHE_MAX_STEPS = {"reverse_string": (8000, 500), "duplicate_string": (8000, 500),
                  "missing_duplicate_string": (8000, 500), "even_pairs": (8000, 500),
                  "stack_manipulation": (8000, 500), "odds_first": (16000, 1000)}
# Every 5th test length (41, 46, .., 496), 32 examples each: 92 lengths.
_CHE_PROTOCOL = (5, 32)
_SENSITIVITY = (
    ("bifocal_heads", "slr1e-3", (("spectral.learning_rate", 1e-3),)),
    ("bifocal_heads", "slr1e-1", (("spectral.learning_rate", 1e-1),)),
    ("bifocal_heads", "frozen_half", (("spectral.freeze_steps", OfSteps(0.5)),)),
    ("bifocal_heads", "base1e3", (("position.base", 1000.0),)),
    ("rope", "base1e3", (("position.base", 1000.0),)),
    ("bifocal_heads", "base1e5", (("position.base", 100000.0),)),
    ("rope", "base1e5", (("position.base", 100000.0),)),
)
# Added after the scratch runs of cycle_navigation: its calibrated budget sits
# at RoPE's sudden exit from a loss plateau (~1,000-1,250 steps), and 1 or 2
# of 5 seeds of each spectral kind had not left it by 2,000 steps (RoPE: 0 of
# 5). Twice the budget asks whether Spectral Evolution delays the transition
# or prevents it, RoPE alongside for the pairing.
_BUDGET_CHECKS = (("cycle_navigation", 2.0, ("rope", "spectral", "bifocal_heads",
                                            "bifocal_pairs")),)
# Added after every scratch run had landed: on stack_manipulation RoPE fitted
# in 2 of 5 seeds, bifocal heads and all-spectral RoPE in 4 of 5 each (Fisher
# p = 0.25), claim 1's only hint. Five more seeds of those three kinds ask
# whether it holds.
_SEED_EXTENSIONS = (("stack_manipulation", (5, 6, 7, 8, 9),
                     ("rope", "bifocal_heads", "spectral")),)


def _accelerator_model(**extra) -> tuple[tuple[str, object], ...]:
  """The Chomsky-hierarchy protocol's model (Deletang et al.: 5 layers, width
  64, 8 heads, batch 128; the configs' `paper` variant), pinned."""
  pinned = {"model.num_layers": 5, "model.d_model": 64, "model.num_heads": 8,
            "model.mlp_dim": -1, "model.dtype": "float32", "batch_size": 128,
            "learning_rate": _ACCELERATOR_RATES[0], "warmup_steps": 500,
            "spectral.learning_rate": 1e-2, "checkpoint_every": 1000, "eval_every": 1000,
            "eval_examples": 512, "log_every": 100}
  pinned.update(extra)
  return tuple(pinned.items())


# One population (16 members: 8 seeds x 2 learning rates) per ~10-minute
# command on one H200. An estimate, not yet measured on one (README,
# "Population training"): a member's step is ~20 GFLOP and ~1 GB of memory
# traffic (under 1 ms of an H200), so a step of 16 is bound by kernel launches
# and the host (~10-40 ms: 8 member batches of ~2.5 ms each, made by 8 worker
# processes); 6,000 steps then take 1-4 minutes, leaving room for start-up,
# compilation (~1 minute) and the evaluation of 16 members (~2 minutes).
_ACCELERATOR_RATES = (1e-3, 3e-4)
_ACCELERATOR_STEPS = 6000

# The converged sweep's Dyck: the `cpu` preset's model trained up to 8x its
# just-fit budget (`cpu/budgets.json`: 500 steps), to convergence by RoPE's
# calibration; evaluated at 1x, 2x and 4x the just-fit budget on quarter-size
# subsets, and at the end as the `cpu` preset evaluates.
_DYCK_JUST_FIT = 500
_DYCK_PUBLISHED = (("k8_m5.test", 400), ("k8_m10.test", 100), ("k8_m20.test", 25))
_CONVERGED_DYCK = TaskSpec(
    "dyck", _DYCK_SPLITS, overrides=_cpu_model(eval_every=1000, keep_checkpoints=20),
    max_steps=8 * _DYCK_JUST_FIT, interval=250, published=_DYCK_PUBLISHED,
    at_multiples=(1, 2, 4, 8), just_fit=_DYCK_JUST_FIT, checkpoint_examples=500, probe=True,
    checkpoint_published=tuple((f, n // 4) for f, n in _DYCK_PUBLISHED),
    # The field's schemes defined for the causal decoder (issue 31's roster).
    later_kinds=tuple(k for k in ROSTER_KINDS if positions.get(k).decoder))
# The second depth task (issue 30): `listops_depth` with the operators MIN
# and MAX (the configs' `minmax` variant: the 2-layer model learns those, not
# all four; `configs/_listops.py`), the cpu preset's model, the cap 8,000
# steps (its calibration first reached valid accuracy 0.9 at 2,500 steps:
# 8x that is past the CPU's reach for 160 runs), earlier checkpoints at
# 1,000, 2,000 and 4,000 steps on 500 examples a split.
_CONVERGED_LISTOPS = TaskSpec(
    "listops_depth", ("valid", "test_length", "test_depth"), variant="minmax",
    # Checkpoints every 500 steps: the 16 of 8,000 steps are all kept (20), 1,000 among them.
    overrides=_cpu_model(eval_every=1000, keep_checkpoints=20, checkpoint_every=500),
    max_steps=8000, interval=500,
    at_steps=(1000, 2000, 4000), checkpoint_examples=500, probe=True,
    later_kinds=_CONVERGED_DYCK.later_kinds)
# The Chomsky-hierarchy protocol's model (5 layers, width 64, 8 heads, batch
# 128, its learning rate 1e-3) on the same Dyck task; `nope`, `rope`, `alibi`
# and the spectral kinds (issue 30). Its just-fit budget is unmeasured: the
# 2-layer model's stands in as the unit of the time axis.
_CONVERGED_DYCK_5LAYER = dataclasses.replace(
    _CONVERGED_DYCK, name="dyck_5layer", config_name="dyck",
    overrides=_cpu_model(**{"model.num_layers": 5, "model.num_heads": 8, "batch_size": 128,
                            "learning_rate": 1e-3, "eval_every": 1000, "keep_checkpoints": 20}),
    kinds=("nope", "rope", "alibi", "spectral", "bifocal_heads", "bifocal_pairs"), later_kinds=())

# The Chomsky-hierarchy tasks the cpu sweep learned fastest (`cpu/budgets.json`:
# just-fit budgets 250, 2,000 and 2,500 steps), trained up to 4x that to
# convergence by RoPE's calibration, with every kind the encoder takes: the
# benchmark's own encodings, their randomized variants and the field's
# schemes with an encoder form (issue 31).
_CHOMSKY_JUST_FIT = {"bucket_sort": 250, "cycle_navigation": 2000, "reverse_string": 2500}
_CONVERGED_CHOMSKY = tuple(
    TaskSpec(name, ("valid",), overrides=_cpu_model(), max_steps=4 * fit,
             interval=max(fit // 4, 125), che=_CHE_PROTOCOL, at_multiples=(1, 2), just_fit=fit,
             checkpoint_examples=500) for name, fit in _CHOMSKY_JUST_FIT.items())
ENCODER_KINDS = VERDICT_KINDS + tuple(k for k in ROSTER_KINDS if positions.get(k).encoder)

PRESETS = {
    # The test: seconds per run.
    "smoke": Preset(
        tasks=(TaskSpec("dyck", _DYCK_SPLITS, variant="tiny", max_steps=20, interval=10,
                        overrides=(("eval_examples", 32), ("checkpoint_every", 5)),
                        eval_args=("--num_examples=32",), published=(("k8_m10.test", 4),),
                        at_multiples=(0.5, 1), just_fit=10, checkpoint_examples=16,
                        checkpoint_published=(("k8_m10.test", 2),)),),
        # No sensitivity arm: the population smoke test runs one end to end.
        kinds=("rope", "bifocal_heads"), seeds=(0,), protocol_tasks=("dyck",), learned=0.0),
    # This 2-core CPU: Dyck, our depth-controlled arithmetic and the
    # Chomsky-hierarchy tasks the calibration finds learned; 7 kinds x 5 seeds.
    "cpu": Preset(
        tasks=(
            TaskSpec("dyck", _DYCK_SPLITS, overrides=_cpu_model(), max_steps=2000,
                     published=(("k8_m5.test", 400), ("k8_m10.test", 100), ("k8_m20.test", 25))),
            TaskSpec("modular_arithmetic_brackets_depth", ("valid", "test_depth"),
                     overrides=_cpu_model(), max_steps=3000, interval=250, che=_CHE_PROTOCOL),
            *(TaskSpec(name, ("valid",), overrides=_cpu_model(),
                       max_steps=_CHE_MAX_STEPS.get(name, (3000, 250))[0],
                       interval=_CHE_MAX_STEPS.get(name, (3000, 250))[1],
                       che=_CHE_PROTOCOL) for name in _CHE_TASKS),
        ),
        kinds=VERDICT_KINDS, seeds=(0, 1, 2, 3, 4),
        protocol_tasks=("dyck", "modular_arithmetic_brackets_depth"), sensitivity=_SENSITIVITY,
        budget_checks=_BUDGET_CHECKS, seed_extensions=_SEED_EXTENSIONS),
    # Trained models: the cpu preset's kinds at a convergence budget
    # (`convergence_budget`: RoPE's valid accuracy gains < 0.002 over the last
    # quarter, or 8x the just-fit budget), each run's curve under `at_steps`.
    # Groups in the order of issue 30's compute plan (RESULTS.md): Dyck, then
    # listops_depth, then the 5-layer model on Dyck (the Chomsky-hierarchy
    # protocol's; once calibrated), then the paper's protocol, then the
    # roster (issue 31's later kinds); each task's scratch runs seed-major.
    "converged": Preset(
        tasks=(_CONVERGED_DYCK, _CONVERGED_LISTOPS, _CONVERGED_DYCK_5LAYER),
        kinds=VERDICT_KINDS, seeds=(0, 1, 2, 3, 4), protocol_tasks=("dyck", "listops_depth"),
        converged=0.002,
        in_order=True, leaderboards=True,
        # issue 31: does any scheme reach these (closing-bracket accuracy)?
        targets=(("dyck", "test_depth", 0.99), ("dyck", "k8_m20.test", 0.90))),
    # The roster on the learned Chomsky-hierarchy tasks at convergence.
    "converged_chomsky": Preset(
        tasks=_CONVERGED_CHOMSKY, kinds=ENCODER_KINDS, seeds=(0, 1, 2, 3, 4), converged=0.002,
        in_order=True, leaderboards=True),
    # One H200: the cpu preset's tasks at the protocol's model size, each
    # (task, kind) one population of 8 seeds x 2 learning rates; fixed budgets.
    "accelerator": Preset(
        tasks=(
            TaskSpec("dyck", _DYCK_SPLITS, variant="paper", overrides=_accelerator_model(),
                     max_steps=_ACCELERATOR_STEPS,
                     published=(("k8_m5.test", 400), ("k8_m10.test", 100), ("k8_m20.test", 25))),
            TaskSpec("modular_arithmetic_brackets_depth", ("valid", "test_depth"),
                     variant="paper", overrides=_accelerator_model(),
                     max_steps=_ACCELERATOR_STEPS, che=_CHE_PROTOCOL),
            *(TaskSpec(name, ("valid",), variant="paper", overrides=_accelerator_model(),
                       max_steps=_ACCELERATOR_STEPS, che=_CHE_PROTOCOL) for name in _CHE_TASKS),
        ),
        kinds=("rope", "bifocal_heads", "bifocal_pairs", "spectral", "nope", "alibi",
               "randomized_rope"),
        seeds=tuple(range(8)), calibrated=False, learning_rates=_ACCELERATOR_RATES,
        data_workers=8),
    # The population test: seconds per population.
    "population_smoke": Preset(
        tasks=(TaskSpec("odds_first", ("valid",), variant="tiny", max_steps=12,
                        overrides=(("eval_examples", 16), ("checkpoint_every", 6),
                                   ("eval_every", 6), ("log_every", 6)),
                        eval_args=("--num_examples=16",), che=(6, 4)),),
        kinds=("rope", "bifocal_heads"), seeds=(0, 1), calibrated=False,
        learning_rates=(3e-3, 1e-2)),
}


def published_file(out: str, file_name: str, max_lines: int | None) -> str:
  """The published file, or (with `max_lines`) an evenly spaced subset written under OUT.

  The subset keeps the file's name, so its results split is named as the file.
  The files are found in the data directory (`--data_dir`, `BIFOCAL_DATA_DIR`).
  """
  try:
    source = published_data.path(file_name)
  except FileNotFoundError as e:
    raise ValueError(str(e)) from None
  if max_lines is None:
    return source
  if max_lines < 1:
    raise ValueError(f"max_lines={max_lines} for {file_name!r}: must be >= 1 or None")
  path = os.path.join(out, "published", f"subset{max_lines}", file_name)
  if not os.path.exists(path):
    with open(source) as f:
      lines = [line for line in f if line.strip()]
    keep = np.unique(np.linspace(0, len(lines) - 1, min(max_lines, len(lines))).astype(int))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    _write_atomically(path, "".join(lines[i] for i in keep))
  return path


# ----------------------------------------------------------------------------
# Run state and summaries.
# ----------------------------------------------------------------------------


def _read_json(path: str):
  try:
    with open(path) as f:
      return json.load(f)
  except (OSError, json.JSONDecodeError):
    return None


def _write_atomically(path: str, text: str) -> None:
  tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"  # runs may share it (--jobs)
  with open(tmp, "w") as f:
    f.write(text)
  os.replace(tmp, path)


def trained(workdir: str) -> bool:
  """Whether the final checkpoint exists (a preempted trainer also exits 0)."""
  config = _read_json(os.path.join(workdir, "config.json"))
  steps = None if config is None else config.get("steps")
  return steps is not None and os.path.isdir(os.path.join(workdir, "checkpoints", str(steps)))


def read_metrics(workdir: str) -> list[dict]:
  records = []
  try:
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
      for line in f:
        try:
          records.append(json.loads(line))
        except json.JSONDecodeError:
          continue  # a line cut by a kill
  except OSError:
    pass
  return records


def summary_path(results_dir: str, run: Run) -> str:
  return os.path.join(results_dir, run.name + ".json")


def _split_summary(r: dict) -> dict:
  ci = r.get("ci95", {})
  out = dict(accuracy=r["token_accuracy"], ci95=ci.get("token_accuracy"),
             sequence_accuracy=r["sequence_accuracy"], examples=r["examples"],
             che_score=r.get("che_score"), che_ci95=ci.get("che_score"),
             by_length=r["by_length"], by_depth=r["by_depth"])
  if "close_accuracy" in r:
    out.update(close_accuracy=r["close_accuracy"], close_ci95=ci.get("close_accuracy"))
  return out


def _checkpoint_split_summary(r: dict) -> dict:
  """A split at one checkpoint: `_split_summary` without the per-length curve."""
  return {k: v for k, v in _split_summary(r).items() if k != "by_length"}


def summary_of(run: Run, out: str, budget: int, seconds: float) -> dict | None:
  """The committed record of a finished run; None unless its evaluation is
  complete (the final step, every split the task asks for)."""
  workdir = run.workdir(out)
  config = _read_json(os.path.join(workdir, "config.json")) or {}
  results = _read_json(os.path.join(workdir, "eval", "results.json"))
  if (results is None or results.get("step") != config.get("steps")
      or not all(name in results.get("splits", {}) for name in run.task.split_names)):
    return None
  at_steps = {}
  for step in run.checkpoint_steps(budget):
    earlier = _read_json(checkpoint_results_path(workdir, step)) or {}
    if (earlier.get("step") != step
        or not all(name in earlier.get("splits", {}) for name in run.task.split_names)):
      return None
    at_steps[str(step)] = {name: _checkpoint_split_summary(earlier["splits"][name])
                           for name in run.task.split_names}
  if at_steps:  # the curve ends at the final evaluation
    at_steps[str(config["steps"])] = {
        name: _checkpoint_split_summary(results["splits"][name]) for name in run.task.split_names}
  losses = [r["loss"] for r in read_metrics(workdir) if "loss" in r]
  spectrum = results.get("spectrum") or {}
  summary = dict(
      task=run.task.name, kind=run.kind, arm=run.arm, group=run.group, seed=run.seed,
      steps=config["steps"], budget=budget, config=run.task.config,
      overrides={k: v for k, v in run.overrides(out, budget).items()
                 if k not in ("init_from", "progress_bar")},
      source=run.source().name if run.source() else None,
      final_train_loss=losses[-1] if losses else None,
      splits={name: _split_summary(results["splits"][name]) for name in run.task.split_names},
      **({"at_steps": at_steps} if at_steps else {}),
      seconds=round(seconds, 1), eval_seconds=round(logged_seconds(workdir, ("eval",)), 1),
      date=datetime.datetime.now(datetime.timezone.utc).strftime(
          "%Y-%m-%d %H:%M UTC"), machine=f"{platform.node()} ({os.cpu_count()} cores)",
      commit=_git_commit())
  if spectrum.get("heads"):
    summary["spectrum"] = dict(
        drift=spectrum["drift"], max_drift=spectrum["max_drift"],
        harmonic_score=float(np.mean([h["fit"]["score"] for h in spectrum["heads"]])),
        fraction_explained=float(np.mean([h["fit"]["fraction_explained"]
                                          for h in spectrum["heads"]])),
        geometric_score=spectrum["geometric_fit"]["score"],
        final=[h["frequencies"] for h in spectrum["heads"]])
  if run.task.probe:
    if "probe" not in results:
      return None
    summary["probe"] = probe_summary(results["probe"])
  return summary


def probe_summary(report: dict) -> dict:
  """The headline numbers of `eval.py --probe` (`bifocal_jax.probe`): per
  split, the depth (and ListOps operator) probe's accuracy per layer and at
  the unseen depths, and the attention on the matching and top brackets per eye."""
  out = dict(layers=report["layers"], fitted_max_depth=report["fitted_max_depth"])
  for name in ("depth", "operator"):
    if report.get(name):
      out[name] = {split: dict(accuracy=[layer["accuracy"] for layer in layers],
                               unseen_accuracy=[layer.get("unseen_accuracy") for layer in layers])
                   for split, layers in report[name].items()}
  attention = report["attention"]
  out["by_eye"] = attention["by_eye"]
  out["uniform_mass"] = attention["uniform_mass"]
  out["match_mass"] = attention["match_mass"]
  return out


def _git_commit() -> str | None:
  try:
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, text=True,
                          capture_output=True, timeout=10).stdout.strip() or None
  except (OSError, subprocess.SubprocessError):
    return None


def load_budgets(results_dir: str) -> dict:
  return _read_json(os.path.join(results_dir, BUDGETS_FILE)) or {}


def calibration_record(task: TaskSpec, workdir: str, learned: float = LEARNED,
                       converged: float | None = None) -> dict | None:
  """`{max_steps, interval, curve, budget}` of a finished calibration run.

  Just fitted (`converged` None): `budget` is the first evaluated step whose
  valid token accuracy reaches `learned` (None: never, within `max_steps`).
  Converged (`converged`, a gain): `convergence_budget` below; the record
  also names the criterion and the task's just-fit budget.
  """
  if not trained(workdir):
    return None
  curve = [[r["step"], r["valid_token_accuracy"]] for r in read_metrics(workdir)
           if "valid_token_accuracy" in r]
  reached = [step for step, accuracy in curve if accuracy >= learned]
  if converged is not None:
    just_fit = task.just_fit or (reached[0] if reached else None)
    return dict(max_steps=task.max_steps, interval=task.interval, curve=curve,
                budget=convergence_budget(curve, task.max_steps, converged,
                                          min_steps=2 * (just_fit or 0)),
                just_fit=just_fit, criterion=f"valid accuracy gains < {converged:g} over "
                f"the last quarter of the steps, or {task.max_steps} steps")
  return dict(max_steps=task.max_steps, interval=task.interval, curve=curve,
              budget=reached[0] if reached else None)


def convergence_budget(curve: Sequence[Sequence[float]], max_steps: int, gain: float, *,
                       min_steps: int = 0) -> int:
  """The first evaluated step `s >= min_steps` at which valid accuracy has
  gained less than `gain` since the last evaluation at or before `0.75 s`
  (the last quarter of the steps), or `max_steps` if none has. `min_steps`
  (twice the just-fit budget) keeps an early plateau from passing for
  convergence."""
  for step, accuracy in curve:
    if step < min_steps:
      continue
    before = [a for s, a in curve if 0 < s <= 0.75 * step]
    if before and accuracy - before[-1] < gain:
      return int(step)
  return int(max_steps)


# ----------------------------------------------------------------------------
# Executing runs.
# ----------------------------------------------------------------------------


class _Stop:
  """SIGTERM/SIGINT: remember, and pass the signal on to the subprocesses in flight."""

  def __init__(self):
    self.signal = None
    self.children: set[subprocess.Popen] = set()

  def __enter__(self):
    self._previous = {s: signal.signal(s, self._handle) for s in (signal.SIGTERM, signal.SIGINT)}
    return self

  def _handle(self, signum, frame):
    del frame
    self.signal = signum
    for child in list(self.children):
      if child.poll() is None:
        child.send_signal(signum)

  def __exit__(self, *exc):
    for s, handler in self._previous.items():
      signal.signal(s, handler)


class _CoreSlots:
  """The shares of `host.core_slots`, each held by one job at a time."""

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
    stop.children.add(child)
    try:
      status = child.wait()
    finally:
      stop.children.discard(child)
      log.write(f"{TOOK}{time.monotonic() - start:.1f} s (exit status {child.returncode})\n")
  with open(log_path) as f:
    tail = f.readlines()[-TAIL_LINES:]
  return status, "".join(tail)


def logged_seconds(workdir: str, stages: Sequence[str] = ("train", "eval")) -> float:
  """The time of every command the sweeps ran in `workdir` (`TOOK` lines of
  its train and eval logs): a run stopped and resumed counts every segment."""
  total = 0.0
  for stage in stages:
    with contextlib.suppress(FileNotFoundError), open(os.path.join(workdir, f"{stage}.log")) as f:
      total += sum(float(line[len(TOOK):].split()[0]) for line in f if line.startswith(TOOK))
  return total


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
        if (_read_json(checkpoint_results_path(run.workdir(out), step)) or {}).get("step") != step
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
  commands run on these CPUs only (`host.core_slots`)."""
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
  the CPUs (`host.core_slots`)."""

  def __init__(self, preset: Preset, out: str, results_dir: str, *,
               log: Callable[[str], None] = print,
               on_written: Callable[[Sequence[str], str], object] | None = None,
               shard: tuple[int, int] | None = None, pin_cores: bool = False):
    self.preset, self.out, self.results_dir, self.log = preset, out, results_dir, log
    self.on_written = on_written or (lambda paths, message: None)
    self.shard, self.pin_cores = shard, pin_cores

  def _slots(self, jobs: int) -> _CoreSlots:
    return _CoreSlots(host.core_slots(jobs) if self.pin_cores else [None] * jobs)

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
      return sorted(runs, key=lambda r: (r.kind in r.task.later_kinds and r.arm == "scratch",
                                         r.source() is not None))
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
          _write_atomically(os.path.join(self.results_dir, BUDGETS_FILE),
                            json.dumps(budgets, indent=1, sort_keys=True))
        self.log(f"calibrated {run.task.name}: budget {record['budget']}")
        self.on_written([os.path.join(self.results_dir, BUDGETS_FILE)],
                        f"calibration: {run.task.name} budget {record['budget']} "
                        f"(up to {run.task.max_steps} steps)")
      return status

    with self._exclusive(jobs):
      self._map(one, todo, jobs)
    return load_budgets(self.results_dir)

  def run(self, *, jobs: int = 1, limit: int | None = None) -> dict[str, str]:
    """Runs what is pending, `jobs` at a time (at most `limit` runs, a
    population counting as one); returns {run name: status}. Each job takes
    the first pending run not yet tried, asked afresh as it starts one, so a
    task another process calibrated meanwhile joins in its place in the
    order; a run tried once is not tried again."""
    with self._exclusive(jobs):
      return self._run_pending(jobs, limit)

  def _run_pending(self, jobs: int, limit: int | None) -> dict[str, str]:
    out: dict[str, str] = {}
    tried: list = []
    lock = threading.Lock()
    halted = threading.Event()  # a run was stopped by a signal: start no other

    def pick():
      with lock:
        if halted.is_set() or (limit is not None and len(tried) >= limit):
          return None
        todo = [r for r in self.pending() if r.unit not in tried]
        if not todo:
          return None
        unit = todo[0].unit
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

    with _Stop() as stop, concurrent.futures.ThreadPoolExecutor(jobs) as pool:
      for future in [pool.submit(worker, stop) for _ in range(jobs)]:
        future.result()
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
        _write_atomically(path, json.dumps(summary, indent=1))
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
    "results", None, "Directory of the run summaries (default benchmarks/results/runs/PRESET).")
_JOBS = flags.DEFINE_integer(
    "jobs", 1, "Runs at a time. The cpu preset's small models use 2 cores poorly: on 2 "
    "cores, Dyck runs took 114-125 s two at a time against 71-91 s one at a time (~1.4x the "
    "throughput).")
_PIN_CORES = flags.DEFINE_bool(
    "pin_cores", True, "With --jobs > 1, each job's commands run on its own share of the CPUs "
    "(`host.core_slots`: on 2 cores two pinned runs made ~15% more steps/s than unpinned); "
    "--nopin_cores: every run may use every CPU.")
_LIMIT = flags.DEFINE_integer(
    "limit", None, "Run at most this many runs (a population counts as one), then report.")
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
  import extrapolation_report  # pylint: disable=g-import-not-at-top
  preset = PRESETS[_PRESET.value]
  if _TASKS.value is not None:
    preset = preset.only(_TASKS.value)
  results_dir = os.path.abspath(_RESULTS.value or os.path.join(RESULTS_DIR, _PRESET.value))
  log = lambda m: print(m, flush=True)  # pylint: disable=unnecessary-lambda-assignment
  on_written = None
  if _COMMIT.value:
    on_written = lambda paths, message: git_commit_paths(paths, message, log=log)  # pylint: disable=unnecessary-lambda-assignment
  if _DATA_DIR.value:  # for the evaluations too (their subprocesses inherit it)
    os.environ[published_data.DATA_DIR_ENV] = os.path.abspath(_DATA_DIR.value)
  shard = parse_shard(_SHARD.value) if _SHARD.value else None
  sweep = Sweep(preset, os.path.abspath(_OUT.value), results_dir, log=log, on_written=on_written,
                shard=shard, pin_cores=_PIN_CORES.value)
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
    statuses = sweep.run(jobs=_JOBS.value, limit=_LIMIT.value)
    counts = {s: list(statuses.values()).count(s) for s in sorted(set(map(str, statuses.values())))}
    print(f"sweep: {counts}", flush=True)
  link_base = os.path.dirname(os.path.abspath(_RESULTS_MD.value)) if _RESULTS_MD.value else None
  markdown = extrapolation_report.report(PRESETS[_PRESET.value], results_dir,
                                        link_base=link_base)
  if _RESULTS_MD.value:
    extrapolation_report.replace_block(_RESULTS_MD.value, markdown, _PRESET.value)
  print(markdown)
  return 0


if __name__ == "__main__":
  sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
  try:
    sys.exit(app.run(main))
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
