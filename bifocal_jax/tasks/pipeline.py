"""Input pipelines (grain): sharded, bucketed training batches; evaluation walks.

Training draws the *global* batch of step s and gives process p the slice
`[p*B, (p+1)*B)`: every process gets distinct examples, and P processes
together see exactly the batches one process would. Which examples, in two
independent choices (`train_dataset`'s `examples` and `lengths`):

- `examples="finite"` (default): one shuffled sequence of the split's `size`
  example indices, each epoch a different permutation keyed by `seed` and the
  epoch. `"fresh"`: new examples every step, as the original Chomsky-hierarchy
  trainer samples them: the indices `s*G .. s*G + G - 1` of an endless stream
  (G the global batch), past the split's size.
- `lengths="per_example"` (default): each example at the length the split
  draws for it (mixed-length batches). `"per_batch"`: the original's
  curriculum, one length per global batch, uniform in the split's length range
  and keyed by `seed` and the step (tasks with `supports_length`); each
  example then comes from that length's own stream. With one length per
  batch, the trainer's token-mean loss over `loss_mask` is their loss (the
  mean over the batch and the output positions).

Either way a batch is a pure function of (seed, step, process layout), so
resuming needs only the step. Each batch is padded to the smallest length
bucket that holds the longest example of the global batch
(so all processes agree on the shape, and the train step compiles once per
bucket). Lengths are known without generating the examples
(`Task.sequence_lengths`), so each process only generates its own rows.

With `length_groups=k > 1` a training batch is a tuple of k batches instead:
the global batch's rows sorted by length (stable) and cut into k equal
groups, each padded to the smallest bucket that holds its own longest
example; process p gets its slice of each group. The same rows as the one
padded batch, in less padding (ListOps' batches are two-thirds padding); the
train step (`length_groups.py`) computes the same token-mean loss over them.

Both pipelines are grain datasets over steps (a step's indices are computed
vectorised, not element by element through grain). The iterator of
`train_dataset` is a grain `DatasetIterator`: its state (the next step) is saved and restored with `grain.checkpoint.CheckpointSave` /
`CheckpointRestore`, or `get_state` / `set_state`.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Iterator, Sequence

import grain
import numpy as np

from bifocal_jax.tasks import base


def read_options(prefetch: int) -> grain.ReadOptions:
  """Up to `prefetch` batches generated ahead by (at most) two threads, while
  the train or eval step runs (generation holds the GIL only between numpy
  calls); 0: each batch generated when asked for, in the caller's thread."""
  if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 0:
    raise ValueError(f"prefetch={prefetch!r}: must be a non-negative integer (0: no prefetching)")
  return grain.ReadOptions(num_threads=min(2, prefetch), prefetch_buffer_size=prefetch)


PREFETCH = 8  # the default (`config.prefetch`)
READ_OPTIONS = read_options(PREFETCH)


def length_buckets(max_length: int, min_bucket: int = 16) -> tuple[int, ...]:
  """Powers of two from `min_bucket` below `max_length`, then `max_length` itself."""
  if max_length < 1 or min_bucket < 1:
    raise ValueError(f"length_buckets: max_length={max_length} and min_bucket={min_bucket} "
                     "must be >= 1")
  buckets = []
  bucket = min_bucket
  while bucket < max_length:
    buckets.append(bucket)
    bucket *= 2
  return (*buckets, max_length)


def check_buckets(buckets: Sequence[int], longest: int) -> tuple[int, ...]:
  """`buckets` sorted, or a ValueError unless they are positive and hold `longest`."""
  buckets = tuple(sorted(int(b) for b in buckets))
  if not buckets or buckets[0] < 1 or buckets[-1] < longest:
    raise ValueError(f"buckets={buckets}: need positive lengths, the largest >= {longest} "
                     "(the longest sequence of the split)")
  return buckets


def _check_layout(batch_size: int, process_index: int, process_count: int):
  if batch_size < 1:
    raise ValueError(f"batch_size={batch_size}: must be >= 1")
  if not 0 <= process_index < process_count:
    raise ValueError(
        f"process_index={process_index}: must be in [0, process_count={process_count})")


def split_dataset(task: base.Task, split: str) -> grain.MapDataset:
  """The split as a grain MapDataset: element i is `task.example(split, i)`."""
  return grain.MapDataset.range(task.split(split).size).map(functools.partial(task.example, split))


def _local_batch(task: base.Task, split: str, buckets: tuple[int, ...], batch_size: int,
                 process_index: int, global_indices: np.ndarray, length: int | None = None,
                 unbounded: bool = False) -> dict[str, np.ndarray]:
  """This process's rows of a global batch of indices, padded to its bucket."""
  longest = task.sequence_lengths(split, global_indices, length).max(initial=1)
  width = buckets[np.searchsorted(buckets, longest)]
  local = global_indices[process_index * batch_size:(process_index + 1) * batch_size]
  if not local.size:
    return base.empty_batch(batch_size, width)
  return base.pad_rows(task.batch(split, local, width, length=length, unbounded=unbounded),
                       batch_size)


def split_by_length(lengths: np.ndarray, groups: int) -> list[np.ndarray]:
  """Row indices of `lengths` in `groups` equal parts, shortest rows first
  (a stable sort: rows of one length keep their order)."""
  if len(lengths) % groups:
    raise ValueError(f"length_groups={groups}: must divide the global batch ({len(lengths)} rows)")
  return np.split(np.argsort(lengths, kind="stable"), groups)


def _local_groups(task: base.Task, buckets: tuple[int, ...], batch_size: int, process_index: int,
                  groups: int, global_indices: np.ndarray, length: int | None = None,
                  unbounded: bool = False) -> tuple[dict[str, np.ndarray], ...]:
  """This process's rows of each length group of a global training batch
  (`split_by_length`), each group padded to its own bucket."""
  lengths = task.sequence_lengths("train", global_indices, length)
  rows = batch_size // groups
  out = []
  for part in split_by_length(lengths, groups):
    width = buckets[np.searchsorted(buckets, lengths[part].max())]
    local = global_indices[part[process_index * rows:(process_index + 1) * rows]]
    out.append(task.batch("train", local, width, length=length, unbounded=unbounded))
  return tuple(out)


def train_indices(step: int, *, global_batch_size: int, size: int, seed: int) -> np.ndarray:
  """Example indices of the global batch of `step`: positions of the endless
  sequence that concatenates one permutation of [0, size) per epoch."""
  positions = step * global_batch_size + np.arange(global_batch_size)
  epochs, offsets = np.divmod(positions, size)
  indices = np.empty_like(positions)
  for epoch in np.unique(epochs).tolist():
    here = epochs == epoch
    indices[here] = base.permute(base.stream_key(seed, "shuffle", epoch), offsets[here], size)
  return indices


def fresh_indices(step: int, *, global_batch_size: int) -> np.ndarray:
  """Example indices of the global batch of `step` in an endless stream: each used once."""
  return step * global_batch_size + np.arange(global_batch_size, dtype=np.int64)


def batch_length(step: int, *, seed: int, min_length: int, max_length: int) -> int:
  """The length of every example of step `step` under the original's curriculum:
  uniform in [min_length, max_length], a pure function of (seed, step)."""
  key = base.stream_key(seed, "curriculum")
  return int(base.uniform_integers(key, np.array([step]), min_length, max_length)[0])


EXAMPLES = ("finite", "fresh")
LENGTHS = ("per_example", "per_batch")


def check_sampling(task: base.Task, examples: str, lengths: str):
  """A ValueError naming the key unless the training-data choices are known and fit the task."""
  if examples not in EXAMPLES:
    raise ValueError(f"data.examples={examples!r}: must be one of {EXAMPLES}")
  if lengths not in LENGTHS:
    raise ValueError(f"data.lengths={lengths!r}: must be one of {LENGTHS}")
  if lengths == "per_batch" and not task.supports_length:
    raise ValueError(f"data.lengths='per_batch': task {task.name} draws no examples at a given "
                     "length (use 'per_example')")


def check_length_groups(groups: int, batch_size_per_process: int) -> None:
  """A ValueError naming the key unless `groups` is a positive integer that
  divides this process's rows of the batch."""
  if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
    raise ValueError(f"data.length_groups={groups!r}: must be a positive integer (1: one "
                     "padded batch)")
  if batch_size_per_process % groups:
    raise ValueError(f"data.length_groups={groups}: must divide each process's batch "
                     f"({batch_size_per_process} rows)")


def train_batch_fn(task: base.Task, *, batch_size_per_process: int, seed: int,
                   buckets: Sequence[int], process_index: int = 0, process_count: int = 1,
                   examples: str = "finite", lengths: str = "per_example", length_groups: int = 1):
  """`batch_of_step(step)`: this process's training batch of `step`, a pure
  function of the arguments and the step (what `train_dataset` maps over steps;
  a population stacks several). `examples`, `lengths` and `length_groups`
  (above 1: a tuple of that many batches): see the module docstring.
  """
  _check_layout(batch_size_per_process, process_index, process_count)
  check_sampling(task, examples, lengths)
  check_length_groups(length_groups, batch_size_per_process)
  buckets = check_buckets(buckets, task.max_sequence_length("train"))
  global_batch_size = batch_size_per_process * process_count
  if examples == "fresh":
    indices_of_step = functools.partial(fresh_indices, global_batch_size=global_batch_size)
  else:
    indices_of_step = functools.partial(train_indices, global_batch_size=global_batch_size,
                                        size=task.split("train").size, seed=seed)
  spec = task.split("train")
  length_of_step = functools.partial(batch_length, seed=seed, min_length=spec.min_length,
                                     max_length=spec.max_length)
  if length_groups == 1:
    local_batch = functools.partial(_local_batch, task, "train", buckets, batch_size_per_process,
                                    process_index, unbounded=examples == "fresh")
  else:
    local_batch = functools.partial(_local_groups, task, buckets, batch_size_per_process,
                                    process_index, length_groups, unbounded=examples == "fresh")
  return functools.partial(_batch_of_step, indices_of_step, length_of_step, local_batch,
                           lengths == "per_batch")


def _batch_of_step(indices_of_step, length_of_step, local_batch, per_batch: bool, step: int):
  length = length_of_step(step) if per_batch else None
  return local_batch(indices_of_step(step), length)


def train_dataset(task: base.Task, *, batch_size_per_process: int, seed: int,
                  buckets: Sequence[int], process_index: int = 0, process_count: int = 1,
                  start_step: int = 0, examples: str = "finite", lengths: str = "per_example",
                  length_groups: int = 1, prefetch: int = PREFETCH) -> grain.IterDataset:
  """Endless training batches of this process, from step `start_step` on.

  Deterministic given `seed` (the order, and the lengths per batch; the
  examples themselves come from the task's seed) and the process layout.
  `examples`, `lengths` and `length_groups`: see the module docstring;
  `prefetch`: `read_options`.
  """
  batch_of_step = train_batch_fn(task, batch_size_per_process=batch_size_per_process, seed=seed,
                                 buckets=buckets, process_index=process_index,
                                 process_count=process_count, examples=examples, lengths=lengths,
                                 length_groups=length_groups)
  if start_step < 0:
    raise ValueError(f"start_step={start_step}: must be >= 0")
  options = read_options(prefetch)
  return grain.MapDataset.range(start_step, sys.maxsize).map(batch_of_step).to_iter_dataset(options)


def eval_batches(task: base.Task, split: str, *, batch_size: int,
                 buckets: Sequence[int] | None = None, num_examples: int | None = None,
                 process_index: int = 0, process_count: int = 1) -> Iterator[dict[str, np.ndarray]]:
  """The split's first `num_examples` (default: all) examples, once, in order.

  `batch_size` is per process; global batch s holds examples
  `[s*B*P, (s+1)*B*P)`, process p its slice p. Every batch has `batch_size`
  rows (the last padded with invalid rows), and every process the same number
  of batches.
  """
  _check_layout(batch_size, process_index, process_count)
  spec = task.split(split)
  num_examples = spec.size if num_examples is None else num_examples
  if not 1 <= num_examples <= spec.size:
    raise ValueError(
        f"num_examples={num_examples}: must be in [1, {spec.size}] for split {split!r}")
  longest = task.max_sequence_length(split)
  buckets = check_buckets(length_buckets(longest) if buckets is None else buckets, longest)
  global_batch_size = batch_size * process_count
  local_batch = functools.partial(_local_batch, task, split, buckets, batch_size, process_index)
  steps = grain.MapDataset.range(-(-num_examples // global_batch_size))
  return iter(
      steps.map(lambda step: local_batch(
          np.arange(step * global_batch_size, min(
              (step + 1) * global_batch_size, num_examples)))).to_iter_dataset(READ_OPTIONS))
