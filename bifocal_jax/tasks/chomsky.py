"""Algorithmic tasks of the Chomsky-hierarchy benchmark (Deletang et al., ICLR 2023).

Their definitions, our code; chosen for periodic or recursive structure, with
`parity_check` as a control where position should not matter. The benchmark's
conventions: an input of length n (train n in 1..40, test n in 41..500 by
default), followed by `output_length(n)` positions holding the query token `?`,
where the model (an encoder: `causal=False`) writes the output; the targets and
mask=1 sit at those positions only, scored per token. "Length" is n; "depth" is
the bracket nesting depth for `modular_arithmetic_brackets`, 0 otherwise.

Each task's vocabulary: PAD=0, its input symbols, `?`, then its output symbols
(shared with the input symbols where they coincide).
"""

from __future__ import annotations

import abc
import random

import ml_collections
import numpy as np

from bifocal_jax.tasks import base

QUERY = "?"
BITS = ("0", "1")
MODULUS = 5
DIGITS = tuple(str(i) for i in range(MODULUS))
OPERATORS = ("+", "-", "*")


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
  """An input of n symbols, then `output_length(n)` query positions to fill."""

  causal = False
  input_symbols: tuple[str, ...]
  output_symbols: tuple[str, ...]
  SPLITS = ("train", "valid", "test_length")
  has_depth = False

  def __init__(self, config: ml_collections.ConfigDict):
    splits = {name: base.parse_split(config, name, has_depth=self.has_depth,
                                     stratified=name == "test_depth")
              for name in self.SPLITS}
    for spec in splits.values():
      first, last, _ = self._length_grid(spec, spec.max_depth if spec.stratified else spec.min_depth)
      if first > last:
        base.fail(f"{spec.name}.max_length", spec.max_length,
                  f"no input of this task fits in lengths [{spec.min_length}, {spec.max_length}]")
    base.check_extrapolation(splits)
    vocab = [base.PAD, *self.input_symbols, QUERY]
    vocab += [s for s in self.output_symbols if s not in vocab]
    super().__init__(config, vocab, splits.values())
    self.query_id = self.token_ids[QUERY]

  @staticmethod
  @abc.abstractmethod
  def output_length(n):
    """Output positions after an input of length n (works on arrays)."""

  @abc.abstractmethod
  def sample(self, rng: random.Random, n: int, min_depth: int,
             max_depth: int) -> tuple[list[str], list[str], int]:
    """(input symbols [n], output symbols [output_length(n)], depth) of one example."""

  def _length_grid(self, spec: base.Split, depth: int) -> tuple[int, int, int]:
    """Input lengths allowed in `spec` for an example of `depth`: (first, last, step)."""
    del depth
    return spec.min_length, spec.max_length, 1

  def _depths_and_lengths(self, split: str, indices: np.ndarray):
    """Per example: the least depth allowed (its stratum's, if stratified) and n."""
    spec = self.split(split)
    stratum = indices % len(spec.depths) if spec.stratified else np.zeros_like(indices)
    grids = np.array([self._length_grid(spec, d) for d in spec.depths], np.int64)
    first, last, step = grids[stratum].T
    steps = base.uniform_integers(self.key(split, "length"), indices, 0, (last - first) // step)
    return spec.min_depth + stratum, first + step * steps

  def sequence_lengths(self, split: str, indices: np.ndarray) -> np.ndarray:
    n = self._depths_and_lengths(split, np.asarray(indices, np.int64))[1]
    return n + self.output_length(n)

  def max_sequence_length(self, split: str) -> int:
    spec = self.split(split)
    first, last, step = self._length_grid(spec, spec.min_depth)
    n = first + (last - first) // step * step
    return int(n + self.output_length(n))

  def _generate(self, split: str, indices: np.ndarray, width: int) -> dict[str, np.ndarray]:
    spec = self.split(split)
    depths, lengths = self._depths_and_lengths(split, indices)
    out = base.empty_batch(len(indices), width)
    rngs = base.example_rngs(self.key(split, "content"), indices)
    for row, (rng, depth, n) in enumerate(zip(rngs, depths.tolist(), lengths.tolist())):
      max_depth = depth if spec.stratified else spec.max_depth
      inputs, outputs, out["depth"][row] = self.sample(rng, n, depth, max_depth)
      ids = [self.token_ids[s] for s in inputs] + [self.query_id] * len(outputs)
      out["inputs"][row, : len(ids)] = ids
      out["targets"][row, n : len(ids)] = [self.token_ids[s] for s in outputs]
      out["mask"][row, n : len(ids)] = 1.0
      out["valid"][row, : len(ids)] = True
    out["length"][:] = lengths
    del out["index"]  # `Task.batch` sets it.
    return out

  def format_example(self, example: dict) -> tuple[str, str]:
    """The input symbols; the output symbols (the scored positions only)."""
    inputs = [s for s in self.decode(example["inputs"]) if s != QUERY]
    outputs = self.decode(example["targets"][np.asarray(example["mask"]) > 0])
    return " ".join(inputs), " ".join(outputs)


class ParityCheck(ChomskyTask):
  """Regular. Input: n bits; output: their parity (1 iff the number of ones is odd).

  The control task: the answer does not depend on where the bits are.
  """

  name = "parity_check"
  input_symbols = BITS
  output_symbols = BITS

  @staticmethod
  def output_length(n):
    return np.ones_like(n)

  def sample(self, rng, n, min_depth, max_depth):
    bits = _bits(rng, n)
    return bits, [BITS[bits.count("1") % 2]], 0


class CycleNavigation(ChomskyTask):
  """Regular. Input: n moves on a cycle of 5 states, each `-` (back), `0` (stay) or `+`
  (forward), starting at state 0; output: the final state."""

  name = "cycle_navigation"
  input_symbols = ("-", "0", "+")
  output_symbols = DIGITS

  @staticmethod
  def output_length(n):
    return np.ones_like(n)

  def sample(self, rng, n, min_depth, max_depth):
    moves = [rng.randrange(3) for _ in range(n)]  # symbol i moves by i - 1.
    return [self.input_symbols[m] for m in moves], [DIGITS[(sum(moves) - n) % MODULUS]], 0


class ReverseString(ChomskyTask):
  """Deterministic context-free. Input: n bits; output: the same bits in reverse order."""

  name = "reverse_string"
  input_symbols = BITS
  output_symbols = BITS

  @staticmethod
  def output_length(n):
    return n

  def sample(self, rng, n, min_depth, max_depth):
    bits = _bits(rng, n)
    return bits, bits[::-1], 0


class OddsFirst(ChomskyTask):
  """Context-sensitive. Input: bits w1 w2 .. wn; output: w1 w3 w5 .. then w2 w4 w6 ..."""

  name = "odds_first"
  input_symbols = BITS
  output_symbols = BITS

  @staticmethod
  def output_length(n):
    return n

  def sample(self, rng, n, min_depth, max_depth):
    bits = _bits(rng, n)
    return bits, bits[0::2] + bits[1::2], 0


class MissingDuplicateString(ChomskyTask):
  """Context-sensitive. Input: a bit string w written twice (n = 2|w|, so n is even),
  with one position replaced by `_`; output: the bit that was there."""

  name = "missing_duplicate_string"
  input_symbols = (*BITS, "_")
  output_symbols = BITS

  @staticmethod
  def output_length(n):
    return np.ones_like(n)

  def _length_grid(self, spec, depth):
    first = max(2, spec.min_length + spec.min_length % 2)
    return first, spec.max_length - spec.max_length % 2, 2

  def sample(self, rng, n, min_depth, max_depth):
    doubled = _bits(rng, n // 2) * 2
    missing = rng.randrange(n)
    answer, doubled[missing] = doubled[missing], "_"
    return doubled, [answer], 0


class StackManipulation(ChomskyTask):
  """Deterministic context-free. Input: a stack of bits written bottom to top, then
  actions `POP`, `PUSH0`, `PUSH1` (n symbols in all, the stack at least one);
  output: the final stack top to bottom, then `_` up to n + 1 positions.

  Popping an empty stack does nothing.
  """

  name = "stack_manipulation"
  input_symbols = (*BITS, "POP", "PUSH0", "PUSH1")
  output_symbols = (*BITS, "_")

  @staticmethod
  def output_length(n):
    return n + 1

  def sample(self, rng, n, min_depth, max_depth):
    stack = _bits(rng, rng.randint(1, n))
    actions = [self.input_symbols[2 + rng.randrange(3)] for _ in range(n - len(stack))]
    final = list(stack)
    for action in actions:
      if action == "POP":
        final = final[:-1]
      else:
        final.append(action[-1])
    return stack + actions, final[::-1] + ["_"] * (n + 1 - len(final)), 0


class ModularArithmeticBrackets(ChomskyTask):
  """Context-free. Input: an arithmetic expression of exactly n tokens over the digits
  0..4, binary `+ - *` (usual precedence), unary minus on a digit (`-3`) and
  brackets; output: its value modulo 5.

  Depth-controlled: the nesting depth of brackets is chosen first, uniformly in
  the split's range among the depths n tokens allow (n >= 2 depth + 1), and the
  expression built around a spine of exactly that depth. `train`, `valid` and
  `test_length` (longer) stay within depth `d_train`; `test_depth` is deeper,
  stratified by depth.
  """

  name = "modular_arithmetic_brackets"
  input_symbols = (*DIGITS, *OPERATORS, "(", ")")
  output_symbols = DIGITS
  SPLITS = ("train", "valid", "test_length", "test_depth")
  has_depth = True
  bracket_probability = 0.25  # of each operand beside the spine (depth permitting).

  def __init__(self, config):
    d_train = base.int_key(config, "d_train", minimum=0)
    for name in ("train", "valid", "test_length"):
      if base.get_key(config, f"{name}.max_depth") > d_train:
        base.fail(f"{name}.max_depth", base.get_key(config, f"{name}.max_depth"),
                  f"must be <= d_train={d_train}")
    super().__init__(config)

  @staticmethod
  def output_length(n):
    return np.ones_like(n)

  def _length_grid(self, spec, depth):
    return max(spec.min_length, 2 * depth + 1), spec.max_length, 1

  def sample(self, rng, n, min_depth, max_depth):
    depth = rng.randint(min_depth, min(max_depth, (n - 1) // 2))
    tokens = self._expression(rng, n, depth)
    return tokens, [DIGITS[evaluate(tokens)]], depth

  def _expression(self, rng, n: int, depth: int) -> list[str]:
    """Exactly n tokens, nesting depth exactly `depth`: a chain of operands, one of
    them the spine `( expression of depth - 1 )`."""
    if depth == 0:
      return self._chain(rng, n, 0)
    # No part may be a single token: it would be an operator without an operand.
    spine = _pick(rng, 2 * depth + 1, n, excluded=(n - 1,))
    rest = n - spine
    left = _pick(rng, 0, rest, excluded=(1, rest - 1))
    right = rest - left
    tokens = ["(", *self._expression(rng, spine - 2, depth - 1), ")"]
    if left:
      tokens = [*self._chain(rng, left - 1, depth), OPERATORS[rng.randrange(3)], *tokens]
    if right:
      tokens = [*tokens, OPERATORS[rng.randrange(3)], *self._chain(rng, right - 1, depth)]
    return tokens

  def _chain(self, rng, n: int, max_depth: int) -> list[str]:
    """Exactly n tokens: operands joined by operators, brackets nested <= max_depth."""
    tokens = []
    while True:
      if max_depth > 0 and n >= 3 and rng.random() < self.bracket_probability:
        size = _pick(rng, 3, n, excluded=(n - 1,))
        tokens += ["(", *self._chain(rng, size - 2, max_depth - 1), ")"]
      else:  # A digit, or a negated one; never leave a lone token behind.
        size = _pick(rng, 1, min(n, 2), excluded=(n - 1,))
        tokens += ["-"] * (size - 1) + [DIGITS[rng.randrange(MODULUS)]]
      n -= size
      if n == 0:
        return tokens
      tokens.append(OPERATORS[rng.randrange(3)])
      n -= 1


def _bits(rng: random.Random, n: int) -> list[str]:
  """n uniform bits, as symbols."""
  return list(format(rng.getrandbits(n), f"0{n}b")) if n else []


def _pick(rng: random.Random, low: int, high: int, excluded=()) -> int:
  """A uniform integer in [low, high] other than the (few) `excluded` values."""
  excluded = sorted({v for v in excluded if low <= v <= high})
  choice = rng.randint(low, high - len(excluded))
  for value in excluded:  # map [low, high - #excluded] onto the allowed values, in order.
    if choice >= value:
      choice += 1
  return choice


def evaluate(tokens: list[str], modulus: int = MODULUS) -> int:
  """Value of a well-formed expression (precedence: unary minus, `*`, then `+ -`) mod `modulus`."""
  position = 0

  def peek():
    return tokens[position] if position < len(tokens) else None

  def take():
    nonlocal position
    position += 1
    return tokens[position - 1]

  def factor():
    token = take()
    if token == "(":
      value = expression()
      take()  # ")"
      return value
    if token == "-":
      return -int(take()) % modulus
    return int(token)

  def term():
    value = factor()
    while peek() == "*":
      take()
      value = value * factor() % modulus
    return value

  def expression():
    value = term()
    while peek() in ("+", "-"):
      sign = 1 if take() == "+" else -1
      value = (value + sign * term()) % modulus
    return value

  return expression()


TASKS = (ParityCheck, CycleNavigation, ReverseString, OddsFirst, MissingDuplicateString,
         StackManipulation, ModularArithmeticBrackets)


def default_arithmetic_config() -> ml_collections.ConfigDict:
  """Depth bounds linked to `d_train` (setting one moves all): test_depth is d_train+1..+3."""
  c = default_config(ModularArithmeticBrackets.name)
  c.d_train = 3
  d = c.get_ref("d_train")
  for name in ("train", "valid", "test_length"):
    c[name].min_depth = 0
    c[name].max_depth = d
  c.test_depth = base.split_config(1, 40, 480, min_depth=d + 1, max_depth=d + 3)
  return c
