"""The published Dyck data of Yao et al. (2021), for evaluation only.

`published` says where the files live (the data directory,
`BIFOCAL_DATA_DIR`) and fetches them, checksummed, from their source
(`python -m bifocal_jax.tasks.external fetch`). This module reads them.

Format: one string per line, tokens separated by single spaces, 8 bracket
types `a`..`h`; `(x` opens and `x)` closes bracket type x, and the line ends
with `END`. The loader checks each line (a malformed one raises
`ValueError("<path>:<line>: <what is wrong>")`) and labels it with the Dyck
task's own rule (`dyck.closing_targets`), so its examples are those the task
would generate for the same string.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator

import numpy as np

from bifocal_jax.tasks import base, dyck
from bifocal_jax.tasks.external import published


def parse_line(line: str, k: int, where: str) -> list[int]:
  """Token ids of one line, checked: known tokens, balanced, matching types, END last."""
  vocab = _token_ids(k)
  tokens = line.rstrip("\r\n").split(" ")
  if tokens[-1] != "END":
    raise ValueError(f"{where}: does not end with END")
  stack: list[int] = []
  ids = []
  for position, token in enumerate(tokens[:-1]):
    if token not in vocab or token in (base.PAD, "END"):
      raise ValueError(f"{where}: token {position} {token!r} is not a bracket of Dyck-{k}")
    ids.append(vocab[token])
    if ids[-1] <= k:
      stack.append(ids[-1])
    elif not stack or stack.pop() + k != ids[-1]:
      raise ValueError(f"{where}: token {position} {token!r} closes no matching bracket")
  if stack:
    raise ValueError(f"{where}: {len(stack)} bracket(s) left open before END")
  if not ids:
    raise ValueError(f"{where}: empty string")
  return ids + [vocab["END"]]


@functools.cache
def _token_ids(k: int) -> dict[str, int]:
  return {token: i for i, token in enumerate(dyck.bracket_vocab(k))}


def _num_tokens(line: str) -> int:
  return line.count(" ") + 1


def _read(path: str) -> list[tuple[int, str]]:
  with open(path) as f:
    return [(number, line) for number, line in enumerate(f, start=1)]


def _batch(lines: list[tuple[int, str]], path: str, k: int, width: int) -> dict[str, np.ndarray]:
  """Lines (number, text) as one batch; `index` is the line number minus one."""
  out = base.empty_batch(len(lines), width)
  for row, (number, line) in enumerate(lines):
    ids = parse_line(line, k, f"{path}:{number}")
    out["inputs"][row, :len(ids)] = ids
    out["valid"][row, :len(ids)] = True
    out["length"][row] = len(ids)
    out["index"][row] = number - 1
  out["targets"], out["mask"], out["depth"] = dyck.closing_targets(out["inputs"], k)
  out["loss_mask"] = out["mask"].copy()
  return out


def load_dyck_file(path: str, k: int = 8) -> list[dict]:
  """Every line of `path`, in order, as an example dict (inputs, targets, mask, length, depth)."""
  examples = {}
  for batch in dyck_file_batches(path, batch_size=256, k=k):
    for row in np.flatnonzero(batch["index"] >= 0):
      n = batch["length"][row]
      examples[int(batch["index"][row])] = dict(inputs=batch["inputs"][row, :n],
                                                targets=batch["targets"][row, :n],
                                                mask=batch["mask"][row, :n], length=int(n),
                                                depth=int(batch["depth"][row]))
  return [examples[i] for i in range(len(examples))]


def dyck_file_batches(path: str, *, batch_size: int, k: int = 8,
                      buckets: tuple[int, ...] | None = None,
                      num_examples: int | None = None) -> Iterator[dict[str, np.ndarray]]:
  """Batches of `path`'s lines (its first `num_examples`, default all), sorted
  by length so long strings share batches.

  Each batch is padded to the smallest bucket that holds its longest line
  (default: its longest line), and the last one with padding rows to
  `batch_size`. `index` is the line's number minus one.
  """
  if batch_size < 1:
    raise ValueError(f"batch_size={batch_size}: must be >= 1")
  if num_examples is not None and num_examples < 1:
    raise ValueError(f"num_examples={num_examples}: must be >= 1")
  lines = sorted(_read(path)[:num_examples], key=lambda item: _num_tokens(item[1]))
  longest = _num_tokens(lines[-1][1]) if lines else 0
  if buckets is not None and (not buckets or max(buckets) < longest):
    raise ValueError(f"buckets={buckets}: the longest line of {path} has {longest} tokens")
  for start in range(0, len(lines), batch_size):
    chunk = lines[start:start + batch_size]
    width = _num_tokens(chunk[-1][1])
    if buckets is not None:
      width = min(b for b in buckets if b >= width)
    yield base.pad_rows(_batch(chunk, path, k, width), batch_size)


__all__ = ["dyck_file_batches", "load_dyck_file", "parse_line", "published"]
