r"""What a sweep run is: the position kinds as the sweeps name them
(`kind_overrides`), a task of a preset (`TaskSpec`), one run (`Run`)
or population of runs (`PopulationRun`) with the `train.py` and `eval.py`
commands that make it, and a preset (`Preset`: tasks x kinds x seeds and its
arms). The presets are in `presets.py`; running them, their summaries and the
command line in `sweep.py`, whose docstring says what the arms, populations,
budgets and shards are."""

from __future__ import annotations

import dataclasses
import functools
import itertools
import os
import sys
from collections.abc import Callable, Sequence

import numpy as np

from bifocal_jax.nn import positions
from bifocal_jax.training.atomic_files import write_atomically
from bifocal_jax.tasks.external import published as published_data

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The committed data (`results/`): each preset's run summaries, budgets and plots in
# `RESULTS_DIR/<preset>/`, the performance benchmarks' figures in `BENCHMARK_RESULTS`.
RESULTS_DIR = os.path.join(REPO, "results")
BENCHMARK_RESULTS = os.path.join(RESULTS_DIR, "benchmarks")

LEARNED = 0.9  # valid token accuracy at which a task counts as learned in distribution


# The kinds of the bifocal verdict (the cpu and converged sweeps), named as the
# library names schemes (`positions.scheme_name`: bifocal with its split).
VERDICT_KINDS = ("nope", "rope", "randomized_rope", "alibi", "spectral", "bifocal_heads",
                 "bifocal_pairs")
SPECTRAL_KINDS = ("spectral", "bifocal_heads", "bifocal_pairs")
# Kinds added for a later question, run only as its pre-registration says
# (question_rules.py; not part of the roster the converged sweep compares):
# PaTH-FoX, for whether one scheme extrapolates both deeper and longer.
QUESTION_KINDS = ("path_fox",)
# Every other scheme of the registry (`bifocal_jax/nn/positions/`): the roster
# of the field's schemes.
ROSTER_KINDS = tuple(k for k in positions.scheme_names()
                     if k not in VERDICT_KINDS and k not in QUESTION_KINDS)


def kind_overrides(kind: str) -> dict:
  """The config overrides of a sweep kind (`positions.scheme_overrides`: a
  mixed `rope+cope` too; the name is a directory of the runs and a row of the
  tables, `+` and all). Raises a ValueError naming the kind when it is none."""
  return positions.scheme_overrides(kind)


def kind_name(position) -> str:
  """The sweep's name of a run's `config.position` (`positions.scheme_name`)."""
  return positions.scheme_name(position)


def is_spectral(kind: str) -> bool:
  """Whether a sweep kind has trainable spectra (its evaluation analyses them)."""
  if kind in SPECTRAL_KINDS:
    return True
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
  # Kinds the preset's `extend` chose from its results so far (never set by
  # hand), run with the later kinds, after them.
  chosen_kinds: tuple[str, ...] = ()
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
    if self.population is not None:  # `bifocal_jax.training.population.member_dir`
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
    o.update(_keeping(self.task, o, self.checkpoint_steps(budget)))
    return o

  def train_command(self, out: str, budget: int) -> list[str]:
    return [sys.executable, os.path.join(REPO, "train.py"), f"--config={self.task.config}",
            f"--workdir={self.workdir(out)}"] + [
                f"--config.{k}={v}" for k, v in self.overrides(out, budget).items()]

  def eval_command(self, out: str) -> list[str]:
    return eval_command(self.task, self.kind, self.workdir(out), out)

  def checkpoint_steps(self, budget: int) -> tuple[int, ...]:
    """Earlier checkpoints evaluated into `at_steps` (scratch-like runs only:
    a surgery or continue run is evaluated at its end, a calibration run not at all)."""
    if self.source() is not None or self.arm == "calibration":
      return ()
    return self.task.checkpoint_steps(self.steps(budget))

  def checkpoint_eval_command(self, out: str, steps: Sequence[int]) -> list[str]:
    return eval_command(self.task, self.kind, self.workdir(out), out, steps=steps)


# A run stopped (a signal, a preemption) saves at the step it stopped, off
# the checkpoint interval; Orbax counts that save among the newest it keeps,
# so each stop would push out an older checkpoint: room for this many stops.
STOP_SAVES = 4


def _keeping(task: TaskSpec, overrides: dict, steps: Sequence[int]) -> dict:
  """`keep_checkpoints` large enough that the checkpoints at `steps`, which
  are evaluated after training, outlive the newer ones (Orbax keeps the
  newest `keep_checkpoints`), even after `STOP_SAVES` stops and resumes; a
  ValueError where no checkpoint is saved at one."""
  if not steps:
    return {}
  every = overrides.get("checkpoint_every") or _config_value(task.config, "checkpoint_every")
  keep = overrides.get("keep_checkpoints") or _config_value(task.config, "keep_checkpoints")
  missed = [s for s in steps if s % every]
  if missed:
    raise ValueError(f"task {task.name!r}: no checkpoint at steps {missed} to evaluate "
                     f"(checkpoint_every={every}); make it divide them")
  # the saves at min(steps), ..., the last multiple of `every`, and the final step
  needed = (overrides["steps"] - min(steps)) // every + 2 + STOP_SAVES
  return {"keep_checkpoints": max(keep, needed)}


def load_config(config: str, overrides: dict | None = None):
  """The config `config` (`TaskSpec.config`: `configs/NAME.py[:variant]`)
  with a run's `{"dotted.key": value}` overrides set, as `--config.KEY=VALUE`
  sets them (a ValueError for a key the config lacks)."""
  from bifocal_jax import configs  # pylint: disable=g-import-not-at-top
  path, _, variant = config.partition(":")
  out = configs.load_file(os.path.join(REPO, path), variant or None)
  for key, value in (overrides or {}).items():
    *parents, leaf = key.split(".")
    node = out
    for name in parents:
      node = node.get(name) if hasattr(node, "get") else None
    if node is None or not hasattr(node, "get") or leaf not in node:
      raise ValueError(f"override {key!r}: not a key of {config}")
    node[leaf] = value
  return out


@functools.lru_cache
def _config_value(config: str, key: str):
  """`key` of the config `config` (`TaskSpec.config`: `configs/NAME.py[:variant]`)."""
  return load_config(config)[key]


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
    """In the trainer's order (`bifocal_jax.training.population.members`: seed-major)."""
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
  # ((task, task), ...): two tasks run with the same model and kinds, whose
  # rankings the report sets side by side (`rank_comparison_report`).
  cross_task: tuple[tuple[str, str], ...] = ()
  learning_rates: tuple[float, ...] = ()  # set: populations (PopulationRun) of seeds x these
  data_workers: int = 0                  # populations: batch-making processes
  # What each run (a population: each) asks of the Ray cluster, in Ray's names.
  run_resources: tuple[tuple[str, float], ...] = (("CPU", 1),)
  # (preset, results directory) -> the preset with what its results so far
  # choose added (`roster_rules.extend`); `resolved` applies it.
  extend: Callable[[Preset, str], Preset] | None = None

  def resolved(self, results_dir: str) -> Preset:
    """The preset as its results in `results_dir` extend it (itself if none)."""
    return self.extend(self, results_dir) if self.extend else self

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
    every task's `later_kinds` (then its `chosen_kinds`) after all tasks'
    kinds and protocol arms.
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
        out += [Run(task, kind, seed) for kind in task.later_kinds + task.chosen_kinds]
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
    write_atomically(path, "".join(lines[i] for i in keep))
  return path

