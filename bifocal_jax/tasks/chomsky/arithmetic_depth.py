"""`modular_arithmetic_brackets_depth`: our depth-controlled modular arithmetic.

Not a task of the benchmark: ours, to separate extrapolation in depth from
extrapolation in length, which the original `modular_arithmetic_brackets`
confounds (its fully bracketed trees get deeper as they get longer: mean depth
about 11 at test lengths 41..500).
"""

from __future__ import annotations

import random

import ml_collections
import numpy as np

from bifocal_jax.tasks import base
from bifocal_jax.tasks.chomsky import common
from bifocal_jax.tasks.chomsky.common import DIGITS, MODULUS

OPERATORS = ("+", "-", "*")


class ModularArithmeticBracketsDepth(common.ChomskyTask):
  """Our variant. Input: an arithmetic expression of exactly n symbols over the
  digits 0..4, binary `+ - *` (usual precedence: `*` first), unary minus on a
  digit (`-3`) and brackets; output: its value modulo 5.

  How it differs from `modular_arithmetic_brackets` (theirs): expressions are
  flat chains of operands with operator precedence, and brackets are optional
  (about one operand in four beside the spine), not a fully bracketed binary
  tree; and the bracket nesting depth is chosen first, uniformly in the
  split's range among the depths n symbols allow (n >= 2 depth + 1), then the
  expression is built around a spine of exactly that depth. `train`, `valid`
  and `test_length` (longer: 41..500) stay within depth `d_train` (3 by
  default); `test_depth` (lengths 1..40) is deeper than any training example
  (d_train+1..d_train+3), stratified by depth. Same symbols and ids as theirs.
  """

  name = "modular_arithmetic_brackets_depth"
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

  def check_length(self, split, length):
    super().check_length(split, length)
    spec = self.split(split)
    deepest = spec.max_depth if spec.stratified else spec.min_depth
    if length < 2 * deepest + 1:
      raise ValueError(f"length={length}: too short for depth {deepest} of split {split!r} "
                       f"(needs {2 * deepest + 1})")

  def sample(self, rng, length):
    spec = self.split("train")
    return self._sample(rng, length, spec.min_depth, spec.max_depth)

  def _sample(self, rng, length, min_depth, max_depth):
    depth = rng.randint(min_depth, min(max_depth, (length - 1) // 2))
    tokens = self._expression(rng, length, depth)
    return tokens, [DIGITS[evaluate(tokens)]]

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


def default_config() -> ml_collections.ConfigDict:
  """Depth bounds linked to `d_train` (setting one moves all): test_depth is d_train+1..+3."""
  c = common.default_config(ModularArithmeticBracketsDepth.name)
  c.d_train = 3
  d = c.get_ref("d_train")
  for name in ("train", "valid", "test_length"):
    c[name].min_depth = 0
    c[name].max_depth = d
  c.test_depth = base.split_config(1, 40, 480, min_depth=d + 1, max_depth=d + 3)
  return c
