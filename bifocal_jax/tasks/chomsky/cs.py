"""The context-sensitive tasks of the Chomsky-hierarchy benchmark (their `tasks/cs/`)."""

from __future__ import annotations

import math

import numpy as np

from bifocal_jax.tasks.chomsky import common
from bifocal_jax.tasks.chomsky.common import BITS, END


class DuplicateString(common.ChomskyTask):
  """Input: n bits; output: the same bits twice."""

  name = "duplicate_string"
  input_symbols = BITS
  output_symbols = BITS

  @staticmethod
  def output_length(n):
    return 2 * n

  def sample(self, rng, length):
    bits = common.bits(rng, length)
    return bits, bits + bits


class MissingDuplicateString(common.ChomskyTask):
  """Input: a bit string w of n // 2 bits written twice, one of the 2 (n // 2)
  positions (uniform) replaced by `_`, and for odd n a final `#` (their
  placeholder 2 and empty token 3); output: the bit that was replaced.

  Length 1 cannot hold a duplicated string: it is the input `1` with answer
  `1`, as their code sets it.
  """

  name = "missing_duplicate_string"
  input_symbols = (*BITS, "_", "#")
  output_symbols = BITS

  @staticmethod
  def output_length(n):
    return np.ones_like(n)

  def sample(self, rng, length):
    if length == 1:
      return ["1"], ["1"]
    doubled = common.bits(rng, length // 2) * 2
    missing = rng.randrange(len(doubled))
    answer, doubled[missing] = doubled[missing], "_"
    return doubled + ["#"] * (length % 2), [answer]


class OddsFirst(common.ChomskyTask):
  """Input: bits w1 w2 .. wn; output: w2 w4 w6 .. then w1 w3 w5 ..

  As their code computes it (`[s[1::2], s[::2]]`, 0-based); their docstring
  says the reverse order (w1 w3 .. first), but the code produced the
  paper's numbers.
  """

  name = "odds_first"
  input_symbols = BITS
  output_symbols = BITS

  @staticmethod
  def output_length(n):
    return n

  def sample(self, rng, length):
    bits = common.bits(rng, length)
    return bits, bits[1::2] + bits[0::2]


def _operands(rng, length: int) -> tuple[int, int, int, int]:
  """Two positive numbers written in `length - 1` binary digits in all:
  (first, its digits, second, its digits); the first gets 1..length-2 digits."""
  first_digits = rng.randint(1, length - 2)
  second_digits = length - 1 - first_digits
  return (rng.randint(1, 2**first_digits - 1), first_digits, rng.randint(1, 2**second_digits - 1),
          second_digits)


def _short_input(rng, length: int) -> list[str]:
  """Their input at lengths 1 and 2: a number in [0, 2^n - 2], n digits, little-endian."""
  return common.binary(rng.randint(0, 2**length - 2), length, little_endian=True)


class BinaryAddition(common.ChomskyTask):
  """Input: `a + b`, two positive numbers in little-endian binary with
  zero-filled widths (a's width uniform in 1..n-2, b's the rest; each number
  uniform below 2^width); output: a + b in little-endian binary without
  trailing zeros, `END`, then `0` up to n + 1 positions. Scored up to `END`.

  Lengths 1 and 2, too short for an addition, are a number without `+`
  (uniform in 0..2^n - 2: their code draws with an exclusive upper bound, so
  at length 1 always 0), whose output is that number; their docstring says
  "a binary value" without these limits.
  """

  name = "binary_addition"
  input_symbols = (*BITS, "+")
  output_symbols = (*BITS, END)
  terminated = True

  @staticmethod
  def output_length(n):
    return n + 1

  def sample(self, rng, length):
    if length <= 2:
      inputs = _short_input(rng, length)
      result = common.binary(int("".join(inputs[::-1]), 2), 0, little_endian=True)
    else:
      a, a_digits, b, b_digits = _operands(rng, length)
      inputs = [
          *common.binary(a, a_digits, little_endian=True), "+",
          *common.binary(b, b_digits, little_endian=True)
      ]
      result = common.binary(a + b, 0, little_endian=True)
    return inputs, result + [END] + ["0"] * (length - len(result))


class BinaryMultiplication(common.ChomskyTask):
  """Input: `a * b` as in `binary_addition`; output: a * b in little-endian
  binary without trailing zeros, `END`, then `0` up to n positions. Scored up
  to `END`.

  Lengths 1 and 2 are a number without `*` (as in `binary_addition`), with a
  fixed output: `END` at length 1, `0 END` at length 2, as their code sets it.
  """

  name = "binary_multiplication"
  input_symbols = (*BITS, "*")
  output_symbols = (*BITS, END)
  terminated = True

  @staticmethod
  def output_length(n):
    return n

  def sample(self, rng, length):
    if length <= 2:
      inputs, result = _short_input(rng, length), ["0"] * (length - 1)
    else:
      a, a_digits, b, b_digits = _operands(rng, length)
      inputs = [
          *common.binary(a, a_digits, little_endian=True), "*",
          *common.binary(b, b_digits, little_endian=True)
      ]
      result = common.binary(a * b, 0, little_endian=True)
    return inputs, result + [END] + ["0"] * (length - 1 - len(result))


class ComputeSqrt(common.ChomskyTask):
  """Input: a number uniform in 1..2^n - 1, n big-endian binary digits
  (zero-filled); output: the floor of its square root, ceil(n / 2) big-endian
  digits (zero-filled).

  (Their docstring's first example gives 101 for sqrt(37); the code, which we
  follow, gives 110.)
  """

  name = "compute_sqrt"
  input_symbols = BITS
  output_symbols = BITS

  @staticmethod
  def output_length(n):
    return (n + 1) // 2

  def sample(self, rng, length):
    number = rng.randint(1, 2**length - 1)
    root = math.isqrt(number)
    return (common.binary(number, length, little_endian=False),
            common.binary(root, (length + 1) // 2, little_endian=False))


class BucketSort(common.ChomskyTask):
  """Input: n symbols uniform in 0..4 (their vocabulary size 5); output: them sorted."""

  name = "bucket_sort"
  input_symbols = common.DIGITS
  output_symbols = common.DIGITS

  @staticmethod
  def output_length(n):
    return n

  def sample(self, rng, length):
    symbols = common.symbols_of(rng, self.input_symbols, length)
    return symbols, sorted(symbols)


TASKS = (DuplicateString, MissingDuplicateString, OddsFirst, BinaryAddition, BinaryMultiplication,
         ComputeSqrt, BucketSort)
