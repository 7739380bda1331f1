"""The regular tasks of the Chomsky-hierarchy benchmark (their `tasks/regular/`)."""

from __future__ import annotations

import numpy as np

from bifocal_jax.tasks.chomsky import common
from bifocal_jax.tasks.chomsky.common import BITS, DIGITS, MODULUS


def _one(n):
  return np.ones_like(n)


class EvenPairs(common.ChomskyTask):
  """Input: n bits; output: 1 iff the number of `01` and `10` pairs (adjacent
  bits that differ) is odd, i.e. iff the first and last bits differ."""

  name = "even_pairs"
  input_symbols = BITS
  output_symbols = BITS
  output_length = staticmethod(_one)

  def sample(self, rng, length):
    bits = common.bits(rng, length)
    changes = sum(a != b for a, b in zip(bits, bits[1:]))
    return bits, [BITS[changes % 2]]


class ModularArithmetic(common.ChomskyTask):
  """Input: digits 0..4 alternating with operators `+ - *`, uniform and
  independent; output: the value modulo 5, `*` before `+ -`, left to right.

  An example of even length n has n - 1 symbols (their sampler makes every
  expression odd-length by dropping one). Their input ids are digits 0..4,
  then `+ - *`, then a blank `_` no example contains (not in our vocabulary).

  Their sampler cannot run as written: it draws the operators from a
  generator that its first call (one length) uses up, so every later length
  fails. We follow its evident intent: the operators `+ * -`, uniform. Their
  evaluator multiplies in int32, so a product of 16 or more non-zero factors
  could overflow and give a wrong label; we compute exactly (the chance of
  such a product is far below 1e-6 per example at length 500).
  """

  name = "modular_arithmetic"
  input_symbols = (*DIGITS, "+", "-", "*")
  output_symbols = DIGITS
  output_length = staticmethod(_one)

  @staticmethod
  def input_length(length):
    return length - 1 + length % 2

  def sample(self, rng, length):
    n = self.input_length(length)
    tokens = []
    for i in range(n):
      tokens.append(DIGITS[rng.randrange(MODULUS)] if i % 2 == 0 else ("+", "*",
                                                                       "-")[rng.randrange(3)])
    return tokens, [DIGITS[evaluate_flat(tokens)]]


def evaluate_flat(tokens: list[str], modulus: int = MODULUS) -> int:
  """Value of `d op d op ... d` (`*` first, then `+ -`, left to right) mod `modulus`."""
  total, term, sign = 0, int(tokens[0]), 1
  for op, digit in zip(tokens[1::2], tokens[2::2]):
    if op == "*":
      term = term * int(digit) % modulus
    else:
      total += sign * term
      term, sign = int(digit), (1 if op == "+" else -1)
  return (total + sign * term) % modulus


class ParityCheck(common.ChomskyTask):
  """Input: n bits; output: their parity (1 iff the number of ones is odd).

  The control task: the answer does not depend on where the bits are.
  """

  name = "parity_check"
  input_symbols = BITS
  output_symbols = BITS
  output_length = staticmethod(_one)

  def sample(self, rng, length):
    bits = common.bits(rng, length)
    return bits, [BITS[bits.count("1") % 2]]


class CycleNavigation(common.ChomskyTask):
  """Input: n moves on a cycle of 5 states, each `-` (back), `0` (stay) or `+`
  (forward; their ids 0, 1, 2), starting at state 0; output: the final state."""

  name = "cycle_navigation"
  input_symbols = ("-", "0", "+")
  output_symbols = DIGITS
  output_length = staticmethod(_one)

  def sample(self, rng, length):
    moves = [rng.randrange(3) for _ in range(length)]  # symbol i moves by i - 1.
    return [self.input_symbols[m] for m in moves], [DIGITS[(sum(moves) - length) % MODULUS]]


TASKS = (EvenPairs, ModularArithmetic, ParityCheck, CycleNavigation)
