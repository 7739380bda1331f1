"""What the Chomsky-hierarchy tasks share: the layout, the splits, the id space.

The benchmark's conventions (Deletang et al., ICLR 2023, and their code): an
example of length n is an input of `input_length(n)` symbols (n itself for
every task but `modular_arithmetic`), followed by `output_length` positions
holding the query token `?` (their "empty" one-hot, which
`make_model_with_empty_targets` appends), where the model (an encoder:
`causal=False`) writes the output. Targets sit at those positions only:
`loss_mask` is 1 at every one of them (their loss averages the cross-entropy
over all output positions), `mask` where their `accuracy_mask` counts (all of
them, except that the tasks whose output ends with a termination token score
it and what precedes it, not the padding after it). "Length" is n, the length
their sampler is called with; "depth" is the bracket nesting depth of the
input (0 for tasks without brackets).

Each task's symbols are listed in the original's id order: `input_symbols[i]`
is their input one-hot index i, `output_symbols[j]` their output class j.
Our vocabulary: PAD=0, the input symbols, `?`, then the output symbols not
already in it. `che_example` maps an example back to their id space.
"""

from __future__ import annotations

import abc
import random

import ml_collections
import numpy as np

from bifocal_jax.tasks import base

QUERY = "?"
BITS = ("0", "1")
MODULUS = 5  # their `experiments/constants.py` builds every modular task with the default, 5.
DIGITS = tuple(str(i) for i in range(MODULUS))
END = "END"  # the termination token of outputs padded to a fixed length.


def default_config(name: str) -> ml_collections.ConfigDict:
  """The benchmark's lengths: train and valid 1..40, test_length 41..500."""
  c = ml_collections.ConfigDict()
  c.name = name
  c.seed = 0
  c.train = base.split_config(1, 40, 1 << 20)
  c.valid = base.split_config(1, 40, 512)
  c.test_length = base.split_config(41, 500, 512)
  return c


class ChomskyTask(base.Task):
  """An input of `input_length(n)` symbols, then `output_length` query positions to fill."""

  causal = False
  supports_length = True
  input_symbols: tuple[str, ...]
  output_symbols: tuple[str, ...]
  terminated = False  # output: an answer, END, then padding (scored up to END)
  SPLITS = ("train", "valid", "test_length")
  has_depth = False

  def __init__(self, config: ml_collections.ConfigDict):
    splits = {
        name:
            base.parse_split(config, name, has_depth=self.has_depth,
                             stratified=name == "test_depth") for name in self.SPLITS
    }
    for spec in splits.values():
      first, last, _ = self._length_grid(spec,
                                         spec.max_depth if spec.stratified else spec.min_depth)
      if first > last:
        base.fail(f"{spec.name}.max_length", spec.max_length,
                  f"no input of this task fits in lengths [{spec.min_length}, {spec.max_length}]")
    base.check_extrapolation(splits)
    train, longer = splits["train"], splits.get("test_length")
    if longer and self.input_length(longer.min_length) <= self.input_length(train.max_length):
      base.fail("test_length.min_length", longer.min_length,
                f"its inputs are no longer than train.max_length={train.max_length}'s")
    vocab = [base.PAD, *self.input_symbols, QUERY]
    vocab += [s for s in self.output_symbols if s not in vocab]
    super().__init__(config, vocab, splits.values())
    self.query_id = self.token_ids[QUERY]
    self.input_ids = tuple(self.token_ids[s] for s in self.input_symbols)
    self.output_ids = tuple(self.token_ids[s] for s in self.output_symbols)

  @staticmethod
  def input_length(length):
    """Input symbols of an example of length n (works on arrays)."""
    return length

  @staticmethod
  @abc.abstractmethod
  def output_length(n):
    """Output positions after an input of n symbols (works on arrays)."""

  @abc.abstractmethod
  def sample(self, rng: random.Random, length: int) -> tuple[list[str], list[str]]:
    """(input symbols, output symbols at every output position) of one example."""

  def _sample(self, rng: random.Random, length: int, min_depth: int, max_depth: int):
    """`sample`, for tasks whose depth is not a condition of the split."""
    del min_depth, max_depth
    return self.sample(rng, length)

  def _length_grid(self, spec: base.Split, depth: int) -> tuple[int, int, int]:
    """Lengths allowed in `spec` for an example of `depth`: (first, last, step)."""
    del depth
    return spec.min_length, spec.max_length, 1

  def _depths_and_lengths(self, split: str, indices: np.ndarray, length: int | None):
    """Per example: the least depth allowed (its stratum's, if stratified) and n."""
    spec = self.split(split)
    stratum = indices % len(spec.depths) if spec.stratified else np.zeros_like(indices)
    if length is not None:
      return spec.min_depth + stratum, np.full(len(indices), length, np.int64)
    grids = np.array([self._length_grid(spec, d) for d in spec.depths], np.int64)
    first, last, step = grids[stratum].T
    steps = base.uniform_integers(self.key(split, "length"), indices, 0, (last - first) // step)
    return spec.min_depth + stratum, first + step * steps

  def sequence_lengths(self, split: str, indices: np.ndarray, length=None) -> np.ndarray:
    n = self.input_length(self._depths_and_lengths(split, np.asarray(indices, np.int64), length)[1])
    return n + self.output_length(n)

  def max_sequence_length(self, split: str) -> int:
    spec = self.split(split)
    first, last, step = self._length_grid(spec, spec.min_depth)
    n = self.input_length(first + (last - first) // step * step)
    return int(n + self.output_length(n))

  def _generate(self, split: str, indices: np.ndarray, width: int,
                length=None) -> dict[str, np.ndarray]:
    spec = self.split(split)
    depths, lengths = self._depths_and_lengths(split, indices, length)
    out = base.empty_batch(len(indices), width)
    # One random stream per length when the length is given, so that examples
    # at different lengths are independent whatever indices the caller uses.
    stream = "content" if length is None else f"content@{length}"
    rngs = base.example_rngs(self.key(split, stream), indices)
    has_brackets = "(" in self.token_ids  # else every depth is 0: skip the count
    for row, (rng, depth, n) in enumerate(zip(rngs, depths.tolist(), lengths.tolist())):
      max_depth = depth if spec.stratified else spec.max_depth
      inputs, outputs = self._sample(rng, n, depth, max_depth)
      num_inputs = len(inputs)
      assert num_inputs == self.input_length(n) and len(outputs) == self.output_length(num_inputs)
      ids = [self.token_ids[s] for s in inputs] + [self.query_id] * len(outputs)
      out["inputs"][row, :len(ids)] = ids
      out["targets"][row, num_inputs:len(ids)] = [self.token_ids[s] for s in outputs]
      out["mask"][row, num_inputs:num_inputs + self.num_scored(outputs)] = 1.0
      out["loss_mask"][row, num_inputs:len(ids)] = 1.0
      out["valid"][row, :len(ids)] = True
      if has_brackets:
        out["depth"][row] = bracket_depth(inputs)
    out["length"][:] = lengths
    del out["index"]  # `Task.batch` sets it.
    return out

  def num_scored(self, outputs: list[str]) -> int:
    """Output positions their accuracy counts: all, or up to the first END."""
    return outputs.index(END) + 1 if self.terminated else len(outputs)

  def format_example(self, example: dict) -> tuple[str, str]:
    """The input symbols; the target at every output position, `.` where unscored."""
    query = np.asarray(example["inputs"]) == self.query_id
    inputs = self.decode(np.asarray(example["inputs"])[~query])
    targets = [
        self.vocab[t] if m else base.UNSCORED
        for t, m in zip(np.asarray(example["targets"])[query],
                        np.asarray(example["mask"])[query])
    ]
    return " ".join(inputs), " ".join(targets)

  def che_example(self, example: dict) -> dict:
    """One example (`Task.example`, or a row of a batch) in the original's id
    space: `{"length", "input", "output", "scored"}`."""
    inputs = np.asarray(example["inputs"])
    valid = np.asarray(example.get("valid", np.ones(inputs.shape, bool)))
    query = inputs == self.query_id
    input_index = dict(zip(self.input_ids, range(len(self.input_ids))))
    output_index = dict(zip(self.output_ids, range(len(self.output_ids))))
    return dict(length=int(example["length"]),
                input=[input_index[t] for t in inputs[valid & ~query].tolist()],
                output=[output_index[t] for t in np.asarray(example["targets"])[query].tolist()],
                scored=np.asarray(example["mask"])[query].astype(int).tolist())


def bits(rng: random.Random, n: int) -> list[str]:
  """n uniform bits, as symbols."""
  return list(format(rng.getrandbits(n), f"0{n}b")) if n else []


def symbols_of(rng: random.Random, alphabet: tuple[str, ...], n: int) -> list[str]:
  """n symbols drawn uniformly from `alphabet`."""
  return [alphabet[rng.randrange(len(alphabet))] for _ in range(n)]


def bracket_depth(symbols: list[str]) -> int:
  """Nesting depth of the brackets in `symbols` (0 without brackets)."""
  depth = deepest = 0
  for s in symbols:
    depth += (s == "(") - (s == ")")
    deepest = max(deepest, depth)
  return deepest


def binary(number: int, width: int, *, little_endian: bool) -> list[str]:
  """`number` in binary, zero-filled to `width` digits (more if it needs them)."""
  digits = format(number, "b").zfill(width)
  return list(digits[::-1] if little_endian else digits)
