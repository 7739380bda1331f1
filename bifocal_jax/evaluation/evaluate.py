"""Evaluation of trained runs: held-out splits and the published Dyck data.

`Evaluator` is the one definition of evaluation: the training loop's periodic
evaluation, `evaluate(workdir)` (and `eval.py`, flag parsing around it) and
the benchmarks all score through it. It scores `metrics.accuracy_counts` per
example (`steps.make_eval_step`), tallied on the host by sequence length and
nesting depth (`Tally`); anything producing logits, a model or a reference
predictor, goes through the same tally (`score_batches`). `evaluate(workdir)`
restores a run's checkpoint (`load_run`; a population's members:
`load_members`) and scores it on the task's held-out splits and/or on
published Dyck files.

Long strings (the published `k8_m20.test` reaches 5,133 tokens) are streamed
in memory-bounded batches (`budget_batches`); the text tables and the CHE
curve of a results file are `eval_report`'s.

Results JSON, `DIR/eval/results.json` (or `--out`). Each evaluation updates
the file: splits evaluated now replace those of the same name, and results of
another checkpoint step are dropped.

  workdir, step, task, position_kind
  member          a population's member only: its index (the results are
                  `DIR/members/<i>/eval/results.json`)
  che_score       Deletang et al.'s score: the mean over lengths of per-length
                  token accuracy, from the CHE protocol's entry `che`
                  (`CheProtocol`) if evaluated, else from `test_length`;
                  never pooled with other splits; null if neither
  che_ci95        its 95% bootstrap interval
  splits: {name: split results}   task splits by name; published files by
                                  their file name (e.g. `k8_m20.test`); the
                                  CHE protocol as `che` (with its `split`,
                                  `stride`, `per_length`)
  spectrum        with --spectrum: `spectrum.spectrum_report` plus `plots`
                  ({name: PNG path})
  probe           with --probe: `probe.probe_report` (linear probes of the
                  nesting depth per layer, attention on the matching bracket
                  per head; its plot in `plots`)

  split results:
    source                  "task", or the published file's path
    examples, tokens        strings and scored (masked) tokens
    token_accuracy          argmax accuracy over scored tokens
    sequence_accuracy       fraction of strings with every scored token right
    loss                    mean token cross-entropy
    che_score               mean over the split's lengths of token accuracy
    by_length, by_depth     {"L" or "d": token accuracy} (string keys)
    by_length_tokens, by_depth_tokens    {key: scored tokens} (for pooling)
    close_accuracy          Dyck only: Yao et al.'s metric, the fraction of
                            scored positions where p(correct close) /
                            p(any close) > 0.8
    close_sequence_accuracy Dyck only: strings with every position so
    ci95                    {accuracy name: [low, high]}: 95% bootstrap
                            interval over the examples of each accuracy
                            above (`stats.bootstrap_ci`)
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import jax
import ml_collections
import numpy as np

from bifocal_jax.evaluation import spectrum as spectrum_lib
from bifocal_jax.training import atomic_files
from bifocal_jax.training import checkpoint as checkpoint_lib
from bifocal_jax.training import config as config_lib
from bifocal_jax.evaluation import budget_batches
from bifocal_jax.evaluation import report as eval_report
from bifocal_jax.nn import model as model_lib
from bifocal_jax.training import population as population_lib
from bifocal_jax.evaluation import probe as probe_lib
from bifocal_jax.training import sharding as sharding_lib
from bifocal_jax.training import state as state_lib
from bifocal_jax.evaluation import stats
from bifocal_jax.training import steps
from bifocal_jax.training import workdir as workdir_lib
from bifocal_jax.tasks import base
from bifocal_jax.tasks import external
from bifocal_jax.tasks import pipeline

RESULTS_FILE = "results.json"

# ----------------------------------------------------------------------------
# Scoring.
# ----------------------------------------------------------------------------


def _grouped(keys: np.ndarray, correct: np.ndarray, tokens: np.ndarray):
  """{str(key): accuracy}, {str(key): tokens} over keys with scored tokens."""
  acc, count = {}, {}
  for key in np.unique(keys):
    sel = keys == key
    total = float(tokens[sel].sum())
    if total > 0:
      acc[str(int(key))] = float(correct[sel].sum()) / total
      count[str(int(key))] = int(total)
  return acc, count


class Tally:
  """Per-example counts accumulated on the host; `summary()` gives the split results."""

  def __init__(self):
    self.columns: dict[str, list[np.ndarray]] = {}
    self.loss_sum = 0.0

  def add(self, counts: dict, batch: dict | None = None) -> None:
    """`counts`: `metrics.accuracy_counts` output (`[B]` arrays; optional scalar
    `loss_sum`) for the rows of `batch`. Each row's `length`, `depth` and
    `row_valid` come from `counts` when it has them (the eval step passes
    them through, so a global batch of several processes needs no local
    batch), else from `batch`. Rows holding no example are dropped."""
    rows = dict(counts)
    for name in ("length", "depth"):
      rows.setdefault(name, batch[name])
    if "row_valid" not in rows:
      rows["row_valid"] = np.asarray(batch["valid"]).any(-1)
    keep = np.asarray(rows.pop("row_valid")).astype(bool)
    for name, value in rows.items():
      value = np.asarray(value)
      if name == "loss_sum":
        self.loss_sum += float(value)
      else:
        self.columns.setdefault(name, []).append(value[keep].astype(np.int64))

  def summary(self) -> dict:
    if not self.columns:
      raise ValueError("no examples were evaluated")
    c = {k: np.concatenate(v) for k, v in self.columns.items()}
    correct, tokens = c["token_correct"], c["token_total"]
    total = max(float(tokens.sum()), 1.0)
    by_length, by_length_tokens = _grouped(c["length"], correct, tokens)
    by_depth, by_depth_tokens = _grouped(c["depth"], correct, tokens)
    out = dict(examples=int(correct.size), tokens=int(tokens.sum()),
               token_accuracy=float(correct.sum()) / total,
               sequence_accuracy=float(np.mean(correct == tokens)), loss=self.loss_sum / total,
               che_score=float(np.mean(list(by_length.values()))) if by_length else None,
               by_length=by_length, by_length_tokens=by_length_tokens, by_depth=by_depth,
               by_depth_tokens=by_depth_tokens)
    if "close_correct" in c:
      out["close_accuracy"] = float(c["close_correct"].sum()) / total
      out["close_sequence_accuracy"] = float(np.mean(c["close_correct"] == tokens))
    out["ci95"] = confidence_intervals(c)
    return out


def confidence_intervals(columns: dict[str, np.ndarray]) -> dict[str, list[float]]:
  """95% bootstrap intervals (over examples) of every accuracy of a split's
  per-example `columns` (`Tally`'s): `{metric: [low, high]}`."""
  correct, tokens = columns["token_correct"], columns["token_total"]
  ones = np.ones_like(tokens)
  statistics = dict(token_accuracy=stats.ratio_of_sums(correct, tokens),
                    sequence_accuracy=stats.ratio_of_sums(correct == tokens, ones),
                    che_score=stats.mean_over_groups(correct, tokens, columns["length"]))
  if "close_correct" in columns:
    close = columns["close_correct"]
    statistics["close_accuracy"] = stats.ratio_of_sums(close, tokens)
    statistics["close_sequence_accuracy"] = stats.ratio_of_sums(close == tokens, ones)
  return {
      name: list(stats.bootstrap_ci(statistic, correct.size))
      for name, statistic in statistics.items()
  }


def score_batches(batches: Iterable[dict], counts_fn: Callable[[dict], dict]) -> dict:
  """Split results of `counts_fn(batch)` (per-example accuracy counts) over `batches`."""
  tally = Tally()
  for batch in batches:
    tally.add(jax.device_get(counts_fn(batch)), batch)
  return tally.summary()


# ----------------------------------------------------------------------------
# The evaluator: one for the training loop, eval.py and the benchmarks.
# ----------------------------------------------------------------------------


def close_ids(task) -> tuple[int, ...] | None:
  """Token ids of the closing brackets (Yao et al.'s metric); None if the task has none."""
  ids = getattr(task, "close_ids", None)
  return None if ids is None else tuple(int(i) for i in ids)


def class_ids(task) -> tuple[int, ...] | None:
  """The token ids accuracy's argmax ranges over: a Chomsky-hierarchy task's
  output classes (as the original scores); None (the whole vocabulary) otherwise."""
  ids = getattr(task, "output_ids", None)
  return None if ids is None else tuple(int(i) for i in ids)


@dataclasses.dataclass(frozen=True)
class CheProtocol:
  """Deletang et al.'s evaluation of a Chomsky-hierarchy task.

  Every `stride`-th length of `split`'s range (41..500 for `test_length`),
  `per_length` examples at each (their own random stream per length); the
  score is the mean over lengths of each length's token accuracy (argmax over
  the task's output classes). The original uses stride 1 and 512 examples per
  length; 32 keeps the score's 95% interval within about +-0.01 at stride 1.
  """
  split: str = "test_length"
  stride: int = 1
  per_length: int = 32

  def lengths(self, task) -> range:
    spec = task.split(self.split)
    return range(spec.min_length, spec.max_length + 1, self.stride)

  def check(self, task) -> None:
    if self.stride < 1 or self.per_length < 1:
      raise ValueError(f"che protocol: stride={self.stride} and per_length={self.per_length} "
                       "must be >= 1")
    if not getattr(task, "supports_length", False):
      raise ValueError(f"che protocol: task {task.name!r} draws no examples at a given length")


class Evaluator:
  """Scores parameters of one `Setup` on its task's splits and on published files.

  Holds the jit-compiled eval step (`steps.make_eval_step`), so compilations
  are shared by every split it scores. Task splits work with any number of
  processes: each generates its slice of every global batch, and the counts
  come back replicated.
  """

  def __init__(self, setup: state_lib.Setup, *,
               memory_budget: int = budget_batches.DEFAULT_MEMORY_BUDGET,
               max_batch_size: int | None = None):
    self.setup = setup
    self.memory_budget = memory_budget
    self.max_batch_size = max_batch_size or setup.config.eval_batch_size
    self.eval_step = sharding_lib.compile_ahead(
        steps.make_eval_step(setup, close_ids=close_ids(setup.task),
                             class_ids=class_ids(setup.task)), "eval_step")
    self.rng = jax.random.key(setup.config.seed + 1)

  def for_setup(self, setup: state_lib.Setup) -> Evaluator:
    """This evaluator (sharing its compiled step) for another `Setup` of the
    same model: a population's member (its config, its seed's random key)."""
    other = copy.copy(self)
    other.setup = setup
    other.rng = jax.random.key(setup.config.seed + 1)
    return other

  def with_batching(self, *, memory_budget: int | None = None,
                    max_batch_size: int | None = None) -> Evaluator:
    """This evaluator (sharing its compiled step) with other batch sizing."""
    other = copy.copy(self)
    other.memory_budget = memory_budget or self.memory_budget
    other.max_batch_size = max_batch_size or self.max_batch_size
    return other

  @property
  def batch_multiple(self) -> int:
    """Devices the batch axis is split over (global batch sizes are multiples)."""
    return sharding_lib.data_parallel_size(self.setup.mesh)

  def counts(self, params, batch: dict) -> dict:
    """Per-example counts of the model on this process's `batch` (its rows of
    a global batch): `make_eval_step`'s output for the whole global batch."""
    global_batch = steps.to_global_batch(batch, self.setup.mesh, steps.EVAL_FIELDS)
    return self.eval_step(params, global_batch, self.rng)

  def compile_job(self, params, split: str, *, num_examples: int | None = None) -> tuple:
    """`(jitted eval step, args)` of `split`'s batches (one shape per split):
    a `steps.compile_in_parallel` job; `use_compiled` takes its result."""
    batch = next(iter(self.split_batches(split, num_examples=num_examples)))
    global_batch = steps.to_global_batch(batch, self.setup.mesh, steps.EVAL_FIELDS)
    return self.eval_step, (params, global_batch, self.rng)

  def use_compiled(self, executables: dict) -> None:
    """Runs batches of the shapes of `executables` (`{batch shape: executable}`,
    from `compile_job`s) on those executables."""
    self.eval_step = steps.Precompiled(self.eval_step, executables,
                                       key_fn=lambda params, batch, rng: batch["inputs"].shape)

  def batch_size(self, width: int) -> int:
    """Global rows per batch of `width` tokens (`batch_size_for_length`)."""
    num_heads = model_lib.resolved_dims(self.setup.config.model)[1]
    return budget_batches.batch_size_for_length(width, num_heads=num_heads,
                                                budget=self.memory_budget,
                                                max_batch_size=self.max_batch_size,
                                                multiple=self.batch_multiple)

  def split_batches(self, split: str, *,
                    num_examples: int | None = None) -> Iterator[dict[str, np.ndarray]]:
    """This process's batches of the first `num_examples` of `split`, each
    padded to the split's longest length: one compilation per split (task
    splits span a few octaves at most; the published files are bucketed finely)."""
    task = self.setup.task
    longest = task.max_sequence_length(split)
    global_batch = self.batch_size(longest)
    if global_batch % jax.process_count():
      global_batch += jax.process_count() - global_batch % jax.process_count()
    return pipeline.eval_batches(task, split, batch_size=global_batch // jax.process_count(),
                                 num_examples=num_examples, buckets=(longest,),
                                 process_index=jax.process_index(),
                                 process_count=jax.process_count())

  def split(self, params, split: str, *, num_examples: int | None = None) -> dict:
    """Split results (schema: the module docstring) on one of the task's splits."""
    batches = self.split_batches(split, num_examples=num_examples)
    with jax.set_mesh(self.setup.mesh):
      results = score_batches(batches, lambda batch: self.counts(params, batch))
    return dict(source="task", **results)

  def che_protocol(self, params, protocol: CheProtocol = CheProtocol()) -> dict:
    """Split results of `protocol` (one process): `by_length` is the curve of
    per-length accuracies, `che_score` their mean, with its interval in `ci95`."""
    task = self.setup.task
    protocol.check(task)
    widths = budget_batches.length_buckets()

    def batches():
      for n in protocol.lengths(task):
        longest = int(task.sequence_lengths(protocol.split, np.zeros(1, np.int64), n)[0])
        width = widths[np.searchsorted(widths, longest)]
        rows = self.batch_size(width)
        for start in range(0, protocol.per_length, rows):
          indices = np.arange(start, min(start + rows, protocol.per_length))
          batch = task.batch(protocol.split, indices, width, length=n, unbounded=True)
          yield base.pad_rows(batch,
                              budget_batches.fitted_rows(len(indices), rows, self.batch_multiple))

    with jax.set_mesh(self.setup.mesh):
      results = score_batches(batches(), lambda batch: self.counts(params, batch))
    return dict(source="che_protocol", split=protocol.split, stride=protocol.stride,
                per_length=protocol.per_length, **results)

  def file_batches(self, path: str, *,
                   num_examples: int | None = None) -> Iterator[dict[str, np.ndarray]]:
    """Batches of the first `num_examples` lines of Dyck file `path` (one
    process), sorted by length and sized to the memory budget."""
    task = self.setup.task
    if task.name != "dyck":
      raise ValueError(f"dyck_file={path!r}: needs a Dyck run, but this run trained "
                       f"task {task.name!r}")
    if not os.path.isfile(path):
      raise ValueError(f"dyck_file={path!r}: no such file")
    return budget_batches.dyck_file_batches(path, k=task.k, batch_size_fn=self.batch_size,
                                            multiple=self.batch_multiple, num_examples=num_examples)

  def batches(self, source: str, *,
              num_examples: int | None = None) -> Iterator[dict[str, np.ndarray]]:
    """Batches of the first `num_examples` of `source`: a task split by name,
    or a Dyck file (a path, or a published file's bare name, `k8_m20.test`)."""
    if source in self.setup.task.split_names:
      return self.split_batches(source, num_examples=num_examples)
    try:
      path = external.published.resolve(source)
    except (FileNotFoundError, ValueError) as e:
      raise ValueError(f"{source!r}: neither a split of task {self.setup.task.name} "
                       f"{self.setup.task.split_names} nor a Dyck file ({e})") from None
    return self.file_batches(path, num_examples=num_examples)

  def dyck_file(self, params, path: str) -> dict:
    """Split results on a published Dyck file (one process)."""
    batches = self.file_batches(path)
    with jax.set_mesh(self.setup.mesh):
      results = score_batches(batches, lambda batch: self.counts(params, batch))
    return dict(source=os.path.abspath(path), **results)


# ----------------------------------------------------------------------------
# Runs.
# ----------------------------------------------------------------------------


@dataclasses.dataclass
class Run:
  """A restored run: its config, an `Evaluator` of its setup, and its parameters.

  A population's member (`member` its index) has its own single-run config
  and writes its results under `members/<i>/` (`directory`).
  """
  workdir: str
  config: ml_collections.ConfigDict
  evaluator: Evaluator
  params: Any
  step: int
  member: int | None = None

  @property
  def setup(self) -> state_lib.Setup:
    return self.evaluator.setup

  @property
  def directory(self) -> str:
    """Where its results go: the workdir, or the member's directory in it."""
    if self.member is None:
      return self.workdir
    return population_lib.member_dir(self.workdir, self.member)


def load_run(workdir: str, *, step: int | None = None, member: int | None = None,
             memory_budget: int = budget_batches.DEFAULT_MEMORY_BUDGET,
             max_batch_size: int | None = None) -> Run:
  """Restores the latest checkpoint of `workdir` (or the one at `step`);
  of a population, member `member` (`load_members`).

  The mesh is rebuilt for this machine's devices (all on the data axis), so a
  run trained on another topology evaluates here.
  """
  workdir, config, mesh = _run_config(workdir)
  if config_lib.is_population(config):
    if member is None:
      raise ValueError(f"workdir={workdir!r} holds a population of "
                       f"{len(population_lib.members(config))} members: name one "
                       "(eval.py --member i, or --member all)")
    runs, frozen = load_members(workdir, step=step, members=(member,), memory_budget=memory_budget,
                                max_batch_size=max_batch_size)
    if frozen:
      raise ValueError(f"member={member}: {frozen[member]}")
    return runs[0]
  if member is not None:
    raise ValueError(f"member={member}: workdir={workdir!r} holds a single run, not a population")
  with jax.set_mesh(mesh):
    s, _ = state_lib.setup(config, mesh)
  step, state = _restore(workdir, step, s.abstract_state, mesh)
  evaluator = Evaluator(s, memory_budget=memory_budget, max_batch_size=max_batch_size)
  return Run(workdir, config, evaluator, state["params"], int(step))


def load_members(workdir: str, *, step: int | None = None, members: Sequence[int] | None = None,
                 memory_budget: int = budget_batches.DEFAULT_MEMORY_BUDGET,
                 max_batch_size: int | None = None) -> tuple[list[Run], dict[int, str]]:
  """`(runs, frozen)`: a population's members (default: all) as `Run`s sharing
  one compiled evaluation step, restored from one checkpoint; members that
  went non-finite are not returned but listed in `frozen` ({index: why})."""
  workdir, config, mesh = _run_config(workdir)
  if not config_lib.is_population(config):
    raise ValueError(f"workdir={workdir!r} holds a single run, not a population")
  all_members = population_lib.members(config)
  members = range(len(all_members)) if members is None else members
  for i in members:
    if not 0 <= i < len(all_members):
      raise ValueError(f"member={i}: the population has members 0..{len(all_members) - 1}")
  with jax.set_mesh(mesh):
    pop = population_lib.setup(config, mesh)
  step, state = _restore(workdir, step, pop.setup.abstract_state, mesh)
  bad = population_lib.nonfinite_members(state)
  frozen = {
      i: f"{all_members[i]} went non-finite ({bad[i][1]}) at step {bad[i][0]} and was "
         "frozen there: not evaluated" for i in members if i in bad
  }
  evaluator = None
  runs = []
  for i in members:
    if i in frozen:
      continue
    member_setup = pop.member_setup(i)
    evaluator = (Evaluator(member_setup, memory_budget=memory_budget, max_batch_size=max_batch_size)
                 if evaluator is None else evaluator.for_setup(member_setup))
    runs.append(
        Run(workdir, member_setup.config, evaluator, population_lib.member_tree(state["params"], i),
            int(step), member=i))
  return runs, frozen


def _run_config(workdir: str):
  """`(absolute workdir, its config on this machine's mesh, the mesh)`."""
  workdir = os.path.abspath(workdir)
  config = workdir_lib.load_config(workdir)
  config.mesh = ml_collections.ConfigDict(dict(data=-1, fsdp=1, model=1))
  return workdir, config, sharding_lib.make_mesh(config.mesh)


def _restore(workdir: str, step: int | None, abstract_state, mesh):
  """`(step, state)` of the latest checkpoint of `workdir`, or of `step`."""
  with checkpoint_lib.Checkpointer.read_only(workdir) as ckpt:
    steps_saved = ckpt.steps()
    if not steps_saved:
      raise ValueError(f"workdir={workdir!r}: no checkpoint in {ckpt.directory}")
    if step is not None and step not in steps_saved:
      raise ValueError(f"step={step}: no checkpoint at that step in {workdir} "
                       f"(steps {steps_saved})")
    with jax.set_mesh(mesh):
      if step is None:
        step, state, _ = ckpt.restore_latest(abstract_state)
      else:
        state, _ = ckpt.restore(step, abstract_state)
  return step, state


CHE_RESULTS = "che"  # the name of the CHE protocol's entry in `splits`


def che_score(splits: dict[str, dict]) -> tuple[float | None, list[float] | None]:
  """The run's CHE score and its 95% interval: the protocol's (`CheProtocol`)
  when it was evaluated, else `test_length`'s mean over its lengths; never
  pooled with other splits (`test_depth` is reported on its own)."""
  for name in (CHE_RESULTS, "test_length"):
    r = splits.get(name)
    if r is not None and r.get("che_score") is not None:
      return r["che_score"], r.get("ci95", {}).get("che_score")
  return None, None


def results_path(workdir: str, step: int | None = None) -> str:
  """`DIR/eval/results.json`; with `step` (`evaluate_steps`), that
  checkpoint's own file, `DIR/eval/results_step<step>.json`."""
  name = RESULTS_FILE if step is None else f"results_step{step}.json"
  return os.path.join(os.path.abspath(workdir), "eval", name)


def at_step(run: Run, step: int) -> Run:
  """`run` (a single run, not a population's member) restored at checkpoint
  `step`, sharing its compiled evaluation step."""
  if run.member is not None:
    raise ValueError(f"step={step}: a population's member is restored with load_members")
  _, state = _restore(run.workdir, step, run.setup.abstract_state, run.setup.mesh)
  return dataclasses.replace(run, params=state["params"], step=int(step))


def evaluate_steps(workdir: str, steps: Sequence[int], **options) -> dict[int, dict]:
  """`evaluate` at each checkpoint of `steps`, in one process: the run is set
  up and its evaluation step compiled once (a checkpoint's evaluation in its
  own process paid both every time). Each step's results go to
  `results_path(workdir, step)`; returns {step: results}.

  `options`: `evaluate`'s, but not `step`, `member` or `out`.
  """
  for name in ("step", "member", "out"):
    if name in options:
      raise ValueError(f"{name}=: evaluate_steps evaluates a single run's checkpoints "
                       "each into its own results file")
  steps = sorted(set(steps))
  if not steps:
    raise ValueError("steps=[]: name at least one checkpoint step")
  workdir = os.path.abspath(workdir)
  with checkpoint_lib.Checkpointer.read_only(workdir) as ckpt:
    missing = [s for s in steps if s not in ckpt.steps()]
    if missing:
      raise ValueError(f"steps={missing}: no checkpoint at those steps in {workdir} "
                       f"(steps {ckpt.steps()})")
  budget = options.get("memory_budget", budget_batches.DEFAULT_MEMORY_BUDGET)
  run = load_run(workdir, step=steps[0], memory_budget=budget,
                 max_batch_size=options.get("max_batch_size"))
  results = {}
  for step in steps:
    run = run if run.step == step else at_step(run, step)
    results[step] = evaluate(run, out=results_path(run.directory, step), **options)
  return results


def evaluate(workdir: str | Run, *, step: int | None = None, member: int | None = None,
             splits: Sequence[str] | None = None, num_examples: int | None = None,
             dyck_files: Sequence[str] = (), che: bool | None = None,
             che_protocol: CheProtocol = CheProtocol(), spectrum: bool = False, probe: bool = False,
             probe_examples: int = probe_lib.DEFAULT_EXAMPLES, out: str | None = None,
             memory_budget: int = budget_batches.DEFAULT_MEMORY_BUDGET,
             max_batch_size: int | None = None, data_dir: str | None = None,
             log: Callable[[str], None] = print) -> dict:
  """Evaluates a run and writes (merges into) its results JSON; returns the results.

  `workdir`: a run directory (its checkpoint at `step`, default the latest, is
  restored; of a population, member `member`, whose results go to
  `members/<i>/eval/`) or an already restored `Run`.
  `splits`: task splits to score (default: every held-out one, i.e. all but
  `train`; none by default when `dyck_files` are given). `num_examples`: cap
  per task split. `che`: evaluate `che_protocol` (by default, for tasks that
  draw examples at a given length when neither `splits` nor `dyck_files` is
  given; it takes the place of sampling its split). `spectrum`: add the
  spectral analysis and its plots. `probe`: add the probes of nesting depth
  (`probe.probe_report`, `probe_examples` examples of each split) and their
  plot. `dyck_files`: paths, or the bare names of
  published files (`k8_m10.test`), found in `data_dir` (default: the data
  directory, `external.published.data_dir()`).
  """
  try:
    dyck_files = [external.published.resolve(f, data_dir) for f in dyck_files]
  except FileNotFoundError as e:
    raise ValueError(str(e)) from None
  if isinstance(workdir, Run):
    run = workdir
    if step is not None and step != run.step:
      raise ValueError(f"step={step}: the given run was restored at step {run.step}")
  else:
    run = load_run(workdir, step=step, member=member)
  task = run.setup.task
  if che is None:
    che = splits is None and not dyck_files and getattr(task, "supports_length", False)
  che = che_protocol if che else None
  if splits is None:
    splits = () if dyck_files else tuple(
        n for n in task.split_names if n != "train" and not (che and n == che.split))
  for name in splits:
    task.split(name)  # a clear error for an unknown split, before any work
  if che:
    che.check(task)
  if probe:
    probe_lib.check_task(task)
  out = out or results_path(run.directory)
  results = dict(workdir=run.workdir, step=run.step, task=task.name,
                 position_kind=run.config.position.kind, che_score=None, che_ci95=None, splits={})
  if run.member is not None:
    results["member"] = run.member
  if os.path.exists(out):
    with open(out) as f:
      previous = json.load(f)
    if (previous.get("step") == run.step and previous.get("workdir") == run.workdir and
        previous.get("member") == run.member):
      results["splits"].update(previous.get("splits", {}))
      for name in ("spectrum", "probe"):
        if name in previous:
          results[name] = previous[name]

  evaluator = run.evaluator.with_batching(memory_budget=memory_budget,
                                          max_batch_size=max_batch_size)
  for name in splits:
    n = None if num_examples is None else min(num_examples, task.split(name).size)
    results["splits"][name] = evaluator.split(run.params, name, num_examples=n)
    log(f"evaluated {name}: {results['splits'][name]['examples']} examples")
  for path in dyck_files:
    results["splits"][os.path.basename(path)] = evaluator.dyck_file(run.params, path)
    log(f"evaluated {path}")
  if che:
    results["splits"][CHE_RESULTS] = curve = evaluator.che_protocol(run.params, che)
    curve["plot"] = eval_report.plot_che_curve(curve,
                                               os.path.join(os.path.dirname(out), "che_curve.png"))
    log(f"evaluated the CHE protocol: {len(che.lengths(task))} lengths of {che.split} x "
        f"{che.per_length} examples")
  results["che_score"], results["che_ci95"] = che_score(results["splits"])

  if spectrum:
    recorded_steps, frequencies = spectrum_lib.load_trajectory(run.workdir, step=run.step,
                                                               member=run.member)
    report = spectrum_lib.spectrum_report(recorded_steps, frequencies)
    if report["heads"]:
      report["plots"] = spectrum_lib.spectrum_plots(recorded_steps, frequencies,
                                                    os.path.dirname(out))
    results["spectrum"] = report
    log(spectrum_lib.format_spectrum_report(report))
  if probe:
    results["probe"] = probe_lib.probe_report(run, num_examples=probe_examples,
                                              out_dir=os.path.dirname(out))
    log(probe_lib.format_report(results["probe"]))

  os.makedirs(os.path.dirname(out), exist_ok=True)
  atomic_files.write_json_atomically(out, results, indent=1, sort_keys=False, allow_nan=False)
  log(eval_report.format_results(results))
  log(f"wrote {out}")
  return results
