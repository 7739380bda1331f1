"""The deterministic context-free tasks of the Chomsky-hierarchy benchmark
(their `tasks/dcf/`)."""

from __future__ import annotations

import random

import numpy as np

from bifocal_jax.tasks.chomsky import common
from bifocal_jax.tasks.chomsky.common import BITS, DIGITS, END, MODULUS


def bracket_expression(rng: random.Random, length: int, *, mult: bool,
                       modulus: int = MODULUS) -> tuple[list[str], int]:
  """Their `generate_one_expression_and_result`: a fully bracketed random
  binary tree of exactly `length` symbols, and its value modulo `modulus`.

  Lengths 1..4 are a leaf `d`, `-d`, `(d)`, `(-d)` (d uniform in 0..modulus-1);
  longer ones `(L op R)` with |L| uniform in 1..length-4 and op uniform in
  `+ -` (and `*` if `mult`).
  """
  if length < 5:
    digit = rng.randrange(modulus)
    sign = -1 if length in (2, 4) else 1
    leaf = ["-"] * (length in (2, 4)) + [DIGITS[digit]]
    return (["(", *leaf, ")"] if length >= 3 else leaf), sign * digit % modulus
  left_length = rng.randint(1, length - 4)
  left, left_value = bracket_expression(rng, left_length, mult=mult, modulus=modulus)
  right, right_value = bracket_expression(rng, length - 3 - left_length, mult=mult, modulus=modulus)
  op = rng.randrange(3 if mult else 2)
  value = (left_value + right_value, left_value - right_value, left_value * right_value)[op]
  return ["(", *left, "+-*"[op], *right, ")"], value % modulus


class ModularArithmeticBrackets(common.ChomskyTask):
  """Input: a fully bracketed arithmetic expression of exactly n symbols over the
  digits 0..4 and `+ - *` (`bracket_expression`, multiplication on as their
  `constants.py` builds it); output: its value modulo 5.

  Brackets are about half the symbols, and the nesting depth grows with n
  (recorded as the example's depth; it is not controlled: see
  `modular_arithmetic_brackets_depth` for our depth-controlled variant).
  Their input ids: digits 0..4, `+ - * ( )`, then `x` (unused here).
  """

  name = "modular_arithmetic_brackets"
  input_symbols = (*DIGITS, "+", "-", "*", "(", ")")
  output_symbols = DIGITS

  @staticmethod
  def output_length(n):
    return np.ones_like(n)

  def sample(self, rng, length):
    tokens, value = bracket_expression(rng, length, mult=True)
    return tokens, [DIGITS[value]]


class ReverseString(common.ChomskyTask):
  """Input: n bits; output: the same bits in reverse order."""

  name = "reverse_string"
  input_symbols = BITS
  output_symbols = BITS

  @staticmethod
  def output_length(n):
    return n

  def sample(self, rng, length):
    bits = common.bits(rng, length)
    return bits, bits[::-1]


class SolveEquation(common.ChomskyTask):
  """Input: `E = v`, where E is a bracketed expression of n - 2 symbols with
  `+ -` only (`bracket_expression`, no `*`, so the solution is unique) in which
  one digit is replaced by `x`, and v its value modulo 5; output: the digit.

  The digit replaced: a position drawn uniformly, then the first digit at or
  after it (wrapping around), as their code does; digits after brackets or
  operators are therefore more likely than others. Lengths 1 and 2, which
  cannot hold an equation, are `0` repeated with answer 0, as theirs.
  Their input ids: digits 0..4, `+ - ( ) x =`.
  """

  name = "solve_equation"
  input_symbols = (*DIGITS, "+", "-", "(", ")", "x", "=")
  output_symbols = DIGITS

  @staticmethod
  def output_length(n):
    return np.ones_like(n)

  def sample(self, rng, length):
    if length < 3:
      return ["0"] * length, ["0"]
    tokens, value = bracket_expression(rng, length - 2, mult=False)
    position = rng.randrange(length - 2)
    while tokens[position] not in DIGITS:
      position = (position + 1) % (length - 2)
    solution, tokens[position] = tokens[position], "x"
    return [*tokens, "=", DIGITS[value]], [solution]


class StackManipulation(common.ChomskyTask):
  """Input: a stack of bits written bottom to top, then actions `POP`, `PUSH0`,
  `PUSH1` (their ids 2, 3, 4); output: the final stack top to bottom, `END`,
  then `0` up to n + 1 positions (their output classes `0 1 END`).

  The initial stack holds 1..n-1 bits (uniform), so there is at least one
  action, except at length 1 (one bit, no action). Popping an empty stack does
  nothing. Their accuracy scores the stack and `END`, not the padding after
  it; their loss trains on every position (ours too: `loss_mask`). (Their
  docstring's second example shows n + 2 outputs; the code makes n + 1.)
  """

  name = "stack_manipulation"
  input_symbols = (*BITS, "POP", "PUSH0", "PUSH1")
  output_symbols = (*BITS, END)
  terminated = True

  @staticmethod
  def output_length(n):
    return n + 1

  def sample(self, rng, length):
    if length == 1:
      stack, actions = common.bits(rng, 1), []
    else:
      stack = common.bits(rng, rng.randint(1, length - 1))
      actions = common.symbols_of(rng, self.input_symbols[2:], length - len(stack))
    final = list(stack)
    for action in actions:
      if action == "POP":
        final = final[:-1]
      else:
        final.append(action[-1])
    return stack + actions, final[::-1] + [END] + ["0"] * (length - len(final))


TASKS = (ModularArithmeticBrackets, ReverseString, SolveEquation, StackManipulation)
