"""The evaluator: one definition of scoring a model on a task's splits.

`Evaluator(setup)` scores `metrics.accuracy_counts` per example
(`steps.make_eval_step`), tallied on the host by sequence length and nesting
depth (`Tally`); anything producing logits, a model or a reference
predictor, goes through the same tally (`score_batches`). The training loop's
periodic evaluation, `evaluate.evaluate(workdir)` and the benchmarks all score
through it. Long strings are streamed in memory-bounded batches
(`budget_batches`). The results' fields: `bifocal_jax/evaluation/evaluate.py`.
"""

from __future__ import annotations

import copy
import dataclasses
import os
from collections.abc import Callable, Iterable, Iterator

import jax
import numpy as np

from bifocal_jax.evaluation import budget_batches
from bifocal_jax.evaluation import stats
from bifocal_jax.nn import model as model_lib
from bifocal_jax.tasks import base
from bifocal_jax.tasks import external
from bifocal_jax.tasks import pipeline
from bifocal_jax.training import sharding as sharding_lib
from bifocal_jax.training import state as state_lib
from bifocal_jax.training import steps


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
