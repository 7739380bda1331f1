"""Batches of long strings within a memory budget, for evaluation.

The published `k8_m20.test` reaches 5,133 tokens. Its strings are sorted by
length, padded to fine length buckets (`length_buckets`: <= 12.5% padding) and
batched so that attention's `[B, heads, L, L]` float32 scores stay within a
memory budget (`batch_size_for_length`); a width's last, partial batch is
padded to a power of two (`fitted_rows`) rather than the full batch.
(Training buckets are `pipeline.length_buckets`: powers of two; a task
split's batches are `pipeline.eval_batches`.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import numpy as np

from bifocal_jax.tasks import base
from bifocal_jax.tasks import external

DEFAULT_MEMORY_BUDGET = 1 << 30  # bytes of attention scores per batch
SCORE_BYTES = 4  # attention scores and softmax are float32


def length_buckets(max_length: int = 1 << 20) -> tuple[int, ...]:
  """Padded lengths: steps of 16 up to 128, then 8 per octave (<= 12.5% padding)."""
  buckets = [16]
  while buckets[-1] < max_length:
    b = buckets[-1]
    buckets.append(b + max(16, 1 << (b.bit_length() - 4)))
  return tuple(buckets)


def batch_size_for_length(length: int, *, num_heads: int, budget: int = DEFAULT_MEMORY_BUDGET,
                          max_batch_size: int = 64, multiple: int = 1) -> int:
  """Rows per batch keeping `[B, heads, L, L]` float32 scores within `budget` bytes.

  At least one row; at most `max_batch_size`; rounded up to a multiple of
  `multiple` (the devices the batch is split over).
  """
  if length < 1 or num_heads < 1 or budget < 1 or max_batch_size < 1 or multiple < 1:
    raise ValueError(f"batch_size_for_length: length={length}, num_heads={num_heads}, "
                     f"budget={budget}, max_batch_size={max_batch_size}, multiple={multiple} "
                     "must all be >= 1")
  rows = max(1, min(max_batch_size, budget // (num_heads * length * length * SCORE_BYTES)))
  return -(-rows // multiple) * multiple


def fitted_rows(rows: int, full: int, multiple: int = 1) -> int:
  """Rows a batch of `rows` real rows is padded to: the smallest
  `multiple * 2**k` that holds them, at most `full` (a multiple of `multiple`).

  A width's last batch is usually partial (a checkpoint's subset of a
  published file holds a few strings per length bucket); padding it to the
  full batch computed up to 64 rows for 3. Powers of two keep the compiled
  shapes per width to a handful.
  """
  fitted = multiple
  while fitted < rows:
    fitted *= 2
  return min(fitted, full)


def regroup(rows: Iterable[dict[str, np.ndarray]], batch_size_fn: Callable[[int], int], *,
            multiple: int = 1) -> Iterator[dict[str, np.ndarray]]:
  """Batches of consecutive rows of equal width, `batch_size_fn(width)` rows each.

  `rows` (batches of one row, sorted by width) come from a length-sorted
  reader; a width's last batch is padded with invalid rows to `fitted_rows`
  (`multiple`: the devices a batch is split over).
  """
  group: list[dict[str, np.ndarray]] = []

  def flush():
    width = group[0]["inputs"].shape[1]
    batch = {k: np.concatenate([r[k] for r in group]) for k in group[0]}
    return base.pad_rows(batch, fitted_rows(len(group), batch_size_fn(width), multiple))

  for row in rows:
    if group and (row["inputs"].shape[1] != group[0]["inputs"].shape[1] or
                  len(group) == batch_size_fn(group[0]["inputs"].shape[1])):
      yield flush()
      group = []
    group.append(row)
  if group:
    yield flush()


def dyck_file_batches(path: str, *, k: int, batch_size_fn: Callable[[int], int], multiple: int = 1,
                      num_examples: int | None = None) -> Iterator[dict[str, np.ndarray]]:
  """A published Dyck file (its first `num_examples` lines, default all),
  sorted by length, in memory-bounded batches."""
  rows = external.dyck_file_batches(path, batch_size=1, k=k, buckets=length_buckets(),
                                    num_examples=num_examples)
  return regroup(rows, batch_size_fn, multiple=multiple)
