"""The Chomsky-hierarchy benchmark's samplers, re-implemented for the tests from
reading its code (google-deepmind/neural_networks_chomsky_hierarchy, `tasks/`,
with the parameters of `experiments/constants.py`), in its id space.

`sample(name, rs, py, length)` draws one example as their `sample_batch`
would, with `rs` (a numpy RandomState) standing for both `np.random` and
`jax.random`, and `py` (a `random.Random`) for Python's `random`: the same
distributions, not the same streams. It returns `(input ids, output classes,
scored)`, `scored` being their `accuracy_mask`. Written independently of
`bifocal_jax.tasks.chomsky`; where their code cannot run as written
(`modular_arithmetic`'s operators), it follows the same intent as ours.
"""

import math

import numpy as np

M = 5  # the modulus of every modular task, and bucket_sort's vocabulary size.


def _plain(out):
  return list(out), [1] * len(out)


def _until_termination(out):
  """Their accuracy_mask for outputs ending in a termination token: positions up
  to the first occurrence of the largest class id."""
  last = int(np.argmax(out))
  return list(out), [int(i <= last) for i in range(len(out))]


def even_pairs(rs, py, n):
  s = rs.randint(0, 2, n)
  return list(s), *_plain([int(np.logical_xor(s[:-1], s[1:]).sum() % 2)])


def _their_flat_value(expression):
  """Their `_evaluate_expression` (ids: digits, then + 5, - 6, * 7), in numpy."""
  e = np.array(expression, np.int64)
  if e.size >= 2:
    minus = e == M + 1
    e = np.where(minus, M, e)
    e[2:] *= 1 - 2 * minus[1:-1]
  term = np.cumsum(e == M)[::2]
  products = np.ones(term[-1] + 1, np.int64)
  for t, value in zip(term, e[::2]):
    products[t] *= value
  return int(products.sum() % M)


def modular_arithmetic(rs, py, n):
  if n % 2 != 1:
    n -= 1
  expression = np.empty(n, np.int64)
  expression[::2] = rs.randint(0, M, n // 2 + 1)
  expression[1::2] = rs.choice(np.array([M + 0, M + 2, M + 1]), n // 2)  # + * -
  return list(expression), *_plain([_their_flat_value(expression)])


def parity_check(rs, py, n):
  s = rs.randint(0, 2, n)
  return list(s), *_plain([int(s.sum() % 2)])


def cycle_navigation(rs, py, n):
  actions = rs.randint(0, 3, n)
  return list(actions), *_plain([int((actions - 1).sum() % 5)])


def _expression(rs, length, mult):
  """Their generate_one_expression_and_result: (string, value)."""
  if length <= 4:
    d = rs.randint(0, M)
    return {1: (f"{d}", d), 2: (f"-{d}", -d % M), 3: (f"({d})", d),
            4: (f"(-{d})", -d % M)}[length]
  left_length = rs.randint(1, length - 3)
  left, lv = _expression(rs, left_length, mult)
  right, rv = _expression(rs, length - left_length - 3, mult)
  op = rs.randint(0, 3 if mult else 2)
  return f"({left}{'+-*'[op]}{right})", (lv + rv, lv - rv, lv * rv)[op] % M


BRACKETS_IDS = {**{str(d): d for d in range(M)}, "+": M, "-": M + 1, "*": M + 2, "(": M + 3,
                ")": M + 4}
EQUATION_IDS = {**{str(d): d for d in range(M)}, "+": M, "-": M + 1, "(": M + 2, ")": M + 3,
                "x": M + 4, "=": M + 5}


def modular_arithmetic_brackets(rs, py, n):
  string, value = _expression(rs, n, mult=True)
  return [BRACKETS_IDS[c] for c in string], *_plain([value])


def reverse_string(rs, py, n):
  s = rs.randint(0, 2, n)
  return list(s), *_plain(s[::-1])


def solve_equation(rs, py, n):
  if n < 3:
    return [0] * n, *_plain([0])
  string, value = _expression(rs, n - 2, mult=False)
  i = rs.randint(0, len(string))
  while not string[i].isdigit():
    i = (i + 1) % (n - 2)
  equation = f"{string[:i]}x{string[i + 1:]}={value}"
  return [EQUATION_IDS[c] for c in equation], *_plain([int(string[i])])


def stack_manipulation(rs, py, n):
  if n == 1:
    stack = list(rs.randint(0, 2, 1))
    expression, final = stack, list(stack)
  else:
    stack = list(rs.randint(0, 2, rs.randint(1, n)))
    actions = list(rs.randint(2, 5, n - len(stack)))
    final = list(stack)
    for a in actions:
      if a == 2:
        if final:
          final.pop()
      else:
        final.append(a - 3)
    expression = stack + actions
  out = final[::-1] + [2]
  return expression, *_until_termination(out + [0] * (n + 1 - len(out)))


def duplicate_string(rs, py, n):
  s = list(rs.randint(0, 2, n))
  return s, *_plain(s + s)


def missing_duplicate_string(rs, py, n):
  if n == 1:
    return [1], *_plain([1])
  s = list(rs.randint(0, 2, n // 2)) * 2
  hole = rs.randint(0, len(s))
  answer, s[hole] = s[hole], 2
  return s + [3] * (n % 2), *_plain([answer])


def odds_first(rs, py, n):
  s = rs.randint(0, 2, n)
  return list(s), *_plain(np.concatenate([s[1::2], s[::2]]))


def _little_endian(number, width):
  return [int(c) for c in f"{number:b}".zfill(width)[::-1]]


def _binary_operands(rs, py, n):
  len_n = int(rs.randint(1, n - 1))
  len_m = n - 1 - len_n
  a, b = py.randint(1, 2**len_n - 1), py.randint(1, 2**len_m - 1)
  return a, b, _little_endian(a, len_n) + [2] + _little_endian(b, len_m)


def binary_addition(rs, py, n):
  if n <= 2:
    number = int(rs.randint(0, 2**n - 1))
    expression, result = _little_endian(number, n), _little_endian(number, 0)
  else:
    a, b, expression = _binary_operands(rs, py, n)
    result = _little_endian(a + b, 0)
  return expression, *_until_termination(result + [2] + [0] * (n - len(result)))


def binary_multiplication(rs, py, n):
  if n <= 2:
    expression, result = _little_endian(int(rs.randint(0, 2**n - 1)), n), [0] * (n - 1)
  else:
    a, b, expression = _binary_operands(rs, py, n)
    result = _little_endian(a * b, 0)
  return expression, *_until_termination(result + [2] + [0] * (n - 1 - len(result)))


def compute_sqrt(rs, py, n):
  number = py.randint(1, 2**n - 1)
  big_endian = lambda x, width: [int(c) for c in f"{x:b}".zfill(width)]
  return big_endian(number, n), *_plain(big_endian(math.isqrt(number), math.ceil(n / 2)))


def bucket_sort(rs, py, n):
  s = rs.randint(0, M, n)
  return list(s), *_plain(np.sort(s))


SAMPLERS = {f.__name__: f for f in (
    even_pairs, modular_arithmetic, parity_check, cycle_navigation, modular_arithmetic_brackets,
    reverse_string, solve_equation, stack_manipulation, duplicate_string, missing_duplicate_string,
    odds_first, binary_addition, binary_multiplication, compute_sqrt, bucket_sort)}


def sample(name, rs, py, length):
  inputs, outputs, scored = SAMPLERS[name](rs, py, length)
  return dict(length=length, input=[int(i) for i in inputs], output=[int(o) for o in outputs],
              scored=scored)
