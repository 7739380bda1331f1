"""What every task shares: split specs, counter-based randomness, the batch layout.

A task draws example `i` of split `s` from `(seed, s, i)` alone, never from a
stateful generator, so any subset of examples can be generated in any order, by
any process, one at a time or a whole batch at once, with the same result. The
randomness is counter based: `uniforms(key, indices, n)` hashes
`(key, index, draw number)` with splitmix64, vectorised over a batch.

The batch layout (numpy, what the pipelines yield and the trainer consumes):
`inputs` int32[B, L], `targets` int32[B, L], `mask` float32[B, L] (the scored
positions: where accuracy counts), `loss_mask` float32[B, L] (where the
training loss is taken: `mask` except where a task's original trains on more,
as the Chomsky-hierarchy tasks train on the padding after a termination
token), `valid` bool[B, L] (non-padding tokens), `length` int32[B], `depth`
int32[B], `index` int64[B]. Padding is PAD (0), masks 0, valid False; padding
rows (to fill a fixed batch) have index -1.

Two ways to address examples: example `i` of split `s` at the length the
split draws for it (`Task.batch(s, indices)`), or, for tasks with
`supports_length`, example `i` of split `s` at a given length (`Task.batch(s,
indices, length=n)`, its own random stream per length: what the original
Chomsky-hierarchy curriculum and per-length evaluation use).
"""

from __future__ import annotations

import abc
import dataclasses
import random
import zlib
from collections.abc import Sequence

import ml_collections
import numpy as np

PAD = "<pad>"
PAD_ID = 0
UNSCORED = "."  # printed for an unscored target; no task may use it as a symbol.

_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15

# ----------------------------------------------------------------------------
# Counter-based randomness.
# ----------------------------------------------------------------------------


def _mix64(x: np.ndarray) -> np.ndarray:
  """splitmix64's finaliser on a uint64 array (wraps modulo 2**64)."""
  x = x ^ (x >> np.uint64(30))
  x = x * np.uint64(0xBF58476D1CE4E5B9)
  x = x ^ (x >> np.uint64(27))
  x = x * np.uint64(0x94D049BB133111EB)
  return x ^ (x >> np.uint64(31))


def stream_key(*parts: int | str) -> int:
  """A 64-bit key naming one random stream, e.g. `(seed, split, 'length')`."""
  key = 0
  for part in parts:
    value = zlib.crc32(part.encode()) if isinstance(part, str) else int(part) & _MASK64
    key = int(_mix64(np.array([(key * _GOLDEN + value + 1) & _MASK64], np.uint64))[0])
  return key


def _example_hashes(key: int, indices: np.ndarray) -> np.ndarray:
  """uint64[B]: one hash per example index in stream `key`."""
  indices = np.asarray(indices, np.int64).astype(np.uint64)
  return _mix64(_mix64(indices * np.uint64(_GOLDEN) + np.uint64(key)))


def uniforms(key: int, indices: np.ndarray, num: int) -> np.ndarray:
  """float64[B, num] in [0, 1): draw `j` of example `indices[b]` in stream `key`."""
  base = _example_hashes(key, indices)
  counters = np.arange(1, num + 1, dtype=np.uint64) * np.uint64(_GOLDEN)
  bits = _mix64(base[:, None] + counters[None, :])
  return (bits >> np.uint64(11)).astype(np.float64) * 2.0**-53


def example_rngs(key: int, indices: np.ndarray) -> list[random.Random]:
  """One Python generator per example, for sequential sampling in stream `key`."""
  return [random.Random(seed) for seed in _example_hashes(key, indices).tolist()]


def permute(key: int, positions: np.ndarray, size: int) -> np.ndarray:
  """A keyed pseudo-random permutation of [0, size), applied to `positions`.

  A 4-round Feistel network on the smallest even number of bits that holds
  `size`, with cycle walking (re-apply until inside [0, size)): a bijection,
  vectorised, and computed per position without materialising the permutation.
  """
  half_bits = max(1, ((size - 1).bit_length() + 1) // 2)
  half_mask = np.uint64((1 << half_bits) - 1)
  round_keys = _mix64(np.uint64(key) + np.arange(1, 5, dtype=np.uint64) * np.uint64(_GOLDEN))

  def feistel(x):
    left, right = x >> np.uint64(half_bits), x & half_mask
    for round_key in round_keys:
      left, right = right, left ^ (_mix64(right + round_key) & half_mask)
    return (left << np.uint64(half_bits)) | right

  permuted = feistel(np.asarray(positions, np.int64).astype(np.uint64))
  outside = permuted >= size
  while outside.any():
    permuted[outside] = feistel(permuted[outside])
    outside = permuted >= size
  return permuted.astype(np.int64)


def uniform_integers(key: int, indices: np.ndarray, low: np.ndarray,
                     high: np.ndarray) -> np.ndarray:
  """int64[B]: uniform in [low, high] (inclusive, per example) from stream `key`."""
  low = np.asarray(low, np.int64)
  span = np.asarray(high, np.int64) - low + 1
  return low + np.floor(uniforms(key, indices, 1)[:, 0] * span).astype(np.int64)


# ----------------------------------------------------------------------------
# Splits and configs.
# ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Split:
  """One split's declared ranges (inclusive) and number of examples.

  `stratified`: the depth of example `i` is `min_depth + i % (number of
  depths)` (each depth equally represented), rather than drawn.
  """

  name: str
  min_length: int
  max_length: int
  min_depth: int
  max_depth: int
  size: int
  stratified: bool = False

  @property
  def depths(self) -> range:
    return range(self.min_depth, self.max_depth + 1)


def split_config(min_length: int, max_length: int, size: int, min_depth=None,
                 max_depth=None) -> ml_collections.ConfigDict:
  """A split's sub-config; depth keys only for tasks that have a depth."""
  c = ml_collections.ConfigDict()
  c.min_length = min_length
  c.max_length = max_length
  if min_depth is not None:
    c.min_depth = min_depth
    c.max_depth = max_depth
  c.size = size
  return c


def fail(key: str, value, why: str):
  raise ValueError(f"task.{key}={value!r}: {why}")


def get_key(config: ml_collections.ConfigDict, key: str):
  """`config[key]` (dotted), or a ValueError naming the missing key."""
  value = config
  for part in key.split("."):
    if part not in value:
      raise ValueError(f"task.{key} is missing from the task config")
    value = value[part]
  return value


def int_key(config, key: str, *, minimum: int) -> int:
  value = get_key(config, key)
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
    fail(key, value, f"must be an integer >= {minimum}")
  return int(value)


def parse_split(config, name: str, *, has_depth: bool, stratified: bool = False) -> Split:
  """Reads and checks `config[name]`: non-empty, non-inverted ranges, size >= 1."""
  min_length = int_key(config, f"{name}.min_length", minimum=1)
  max_length = int_key(config, f"{name}.max_length", minimum=1)
  if max_length < min_length:
    fail(f"{name}.max_length", max_length, f"empty range: below min_length={min_length}")
  min_depth = max_depth = 0
  if has_depth:
    min_depth = int_key(config, f"{name}.min_depth", minimum=0)
    max_depth = int_key(config, f"{name}.max_depth", minimum=0)
    if max_depth < min_depth:
      fail(f"{name}.max_depth", max_depth, f"empty range: below min_depth={min_depth}")
  size = int_key(config, f"{name}.size", minimum=1)
  return Split(name, min_length, max_length, min_depth, max_depth, size, stratified)


def check_extrapolation(splits: dict[str, Split]):
  """Test splits lie beyond training: longer (`test_length`), deeper (`test_depth`)."""
  train = splits["train"]
  if "test_length" in splits and splits["test_length"].min_length <= train.max_length:
    fail("test_length.min_length", splits["test_length"].min_length,
         f"must exceed train.max_length={train.max_length} (test on longer inputs)")
  if "test_depth" in splits and splits["test_depth"].min_depth <= train.max_depth:
    fail("test_depth.min_depth", splits["test_depth"].min_depth,
         f"must exceed train.max_depth={train.max_depth} (test on deeper inputs)")


# ----------------------------------------------------------------------------
# The task interface.
# ----------------------------------------------------------------------------


class Task(abc.ABC):
  """A task: vocabulary, splits, and examples drawn from `(seed, split, index)`."""

  name: str
  causal: bool
  pad_id = PAD_ID
  supports_length = False  # whether `batch(..., length=n)` draws examples at one given length

  def __init__(self, config: ml_collections.ConfigDict, vocab: Sequence[str],
               splits: Sequence[Split]):
    self.config = config
    self.seed = int_key(config, "seed", minimum=0)
    self.vocab = tuple(vocab)
    if self.vocab[PAD_ID] != PAD or len(set(self.vocab)) != len(self.vocab):
      raise ValueError(f"{self.name}: vocabulary must start with {PAD} and be unique: {self.vocab}")
    if UNSCORED in self.vocab:
      raise ValueError(f"{self.name}: {UNSCORED!r} marks unscored targets, it cannot be a symbol")
    self.token_ids = {token: i for i, token in enumerate(self.vocab)}
    self._splits = {s.name: s for s in splits}
    self._keys: dict[tuple[str, str], int] = {}

  @property
  def vocab_size(self) -> int:
    return len(self.vocab)

  @property
  def split_names(self) -> tuple[str, ...]:
    return tuple(self._splits)

  def split(self, name: str) -> Split:
    if name not in self._splits:
      raise ValueError(f"split={name!r}: task {self.name} has no such split (its splits: "
                       f"{', '.join(self.split_names)})")
    return self._splits[name]

  def key(self, split: str, stream: str) -> int:
    """The key of one random stream of one split."""
    if (split, stream) not in self._keys:
      self._keys[split, stream] = stream_key(self.seed, self.name, split, stream)
    return self._keys[split, stream]

  @abc.abstractmethod
  def max_sequence_length(self, split: str) -> int:
    """Upper bound of the sequence length L (all tokens the model sees) in `split`."""

  @abc.abstractmethod
  def sequence_lengths(self, split: str, indices: np.ndarray,
                       length: int | None = None) -> np.ndarray:
    """int64[B]: the sequence length L of each example, without generating it (cheap)."""

  @abc.abstractmethod
  def _generate(self, split: str, indices: np.ndarray, width: int,
                length: int | None = None) -> dict[str, np.ndarray]:
    """`inputs`, `targets`, `mask`, `loss_mask`, `valid` [B, width], `length`, `depth` [B]."""

  @abc.abstractmethod
  def format_example(self, example: dict) -> tuple[str, str]:
    """(input string, target string) of one example, for printing."""

  def check_length(self, split: str, length: int):
    """A ValueError unless examples of `split` can be drawn at `length`."""
    spec = self.split(split)
    if not self.supports_length:
      raise ValueError(f"length={length}: task {self.name} draws no examples at a given length")
    if not spec.min_length <= length <= spec.max_length:
      raise ValueError(f"length={length}: outside split {split!r} "
                       f"(lengths {spec.min_length}..{spec.max_length})")

  def batch(self, split: str, indices: Sequence[int], width: int | None = None, *,
            length: int | None = None, unbounded: bool = False) -> dict:
    """Examples `indices` of `split`, padded to `width` (default: the longest).

    `length`: every example at this length (tasks with `supports_length`).
    `unbounded`: indices may run past the split's size (an endless stream of
    fresh examples from the split's distribution, as the original trains).
    """
    spec = self.split(split)
    if length is not None:
      length = int(length)
      self.check_length(split, length)
    indices = np.asarray(indices, np.int64).reshape(-1)
    outside = (indices < 0) if unbounded else (indices < 0) | (indices >= spec.size)
    if outside.any():
      raise ValueError(f"index={indices[outside][0]}: outside split {split!r} of size {spec.size}")
    longest = int(self.sequence_lengths(split, indices, length).max(initial=0))
    width = longest if width is None else width
    if width < longest:
      raise ValueError(f"width={width}: shorter than the longest example ({longest})")
    out = self._generate(split, indices, width, length)
    out["index"] = indices.copy()
    return out

  def example(self, split: str, index: int, length: int | None = None) -> dict:
    """Example `index` of `split`, unpadded: inputs/targets/mask/loss_mask [L], length, depth."""
    row = self.batch(split, [index], length=length)
    num_tokens = int(row["valid"][0].sum())
    return dict(inputs=row["inputs"][0, :num_tokens], targets=row["targets"][0, :num_tokens],
                mask=row["mask"][0, :num_tokens], loss_mask=row["loss_mask"][0, :num_tokens],
                length=int(row["length"][0]), depth=int(row["depth"][0]))

  def decode(self, ids: Sequence[int]) -> list[str]:
    return [self.vocab[int(i)] for i in ids]


def empty_batch(batch_size: int, width: int) -> dict[str, np.ndarray]:
  """A batch of padding rows (what fills the last evaluation batch)."""
  return dict(inputs=np.zeros((batch_size, width), np.int32), targets=np.zeros(
      (batch_size, width), np.int32), mask=np.zeros((batch_size, width), np.float32),
              loss_mask=np.zeros((batch_size, width), np.float32), valid=np.zeros(
                  (batch_size, width), bool), length=np.zeros((batch_size,), np.int32),
              depth=np.zeros((batch_size,), np.int32), index=np.full((batch_size,), -1, np.int64))


def pad_rows(batch: dict[str, np.ndarray], batch_size: int) -> dict[str, np.ndarray]:
  """`batch` with padding rows appended up to `batch_size` rows."""
  missing = batch_size - len(batch["index"])
  if missing == 0:
    return batch
  filler = empty_batch(missing, batch["inputs"].shape[1])
  return {k: np.concatenate([v, filler[k]]) for k, v in batch.items()}
