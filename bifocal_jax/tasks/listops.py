"""ListOps (Nangia and Bowman 2018) as the Long Range Arena generates it.

The expressions are those of LRA's generator (github google-research/
long-range-arena, `lra_benchmarks/data/listops.py`): `generate_tree(1,
max_depth, max_args)` makes a node a digit 0..9 (uniform) with probability
1 - VALUE_P = 0.75 (always at tree depth `max_depth`), otherwise an operator
uniform over MIN, MAX, MED, SM (sum mod 10) with `randint(2, max_args)`
arguments, each drawn the same way one level deeper. Its `to_value` is the
semantics: `min`, `max`, `int(np.median(args))` (the mean of the two middle
values, truncated, for an even count) and `sum(args) % 10`. LRA keeps the
trees whose length lies in its window (500 < length < 2000, `max_depth=10`,
`max_args=10`); its data is the set of distinct trees so drawn, ours is not
deduplicated.

Token format: the original ListOps token sequence, `[MAX 2 9 [MIN 4 7 ] 0 ]`:
an operator opens a list as one token (`[MIN` `[MAX` `[MED` `[SM`), `]`
closes it, digits are tokens. nyu-mll's files (`spinn/data/listops/`) also
write the binary-tree parentheses `( ... )`, which their loader
(`ConvertBinaryBracketedSeq`) drops; LRA's pipeline drops them too (and
renames `]` to `X` for its tokenizer); we follow both: no parentheses, `]`
spelled as in the data. Vocabulary: PAD=0, digits `0`..`9` = 1..10, `[MIN`
`[MAX` `[MED` `[SM` = 11..14, `]` = 15 (nyu-mll's order, without their
unused operators).

Depth is the bracket nesting depth: a digit 0, a list 1 + its deepest
argument's (LRA's `generate_tree(1, D, ...)` nests at most D - 1 lists).
Length is the number of tokens (LRA's `length`). A split with depths
`[min_depth, max_depth]` is LRA's generator with `max_depth = max_depth + 1`
conditioned on the split's length range and on depth >= `min_depth`, exactly
as LRA's rejection on length: its length distribution is the generator's own
within the range. `test_depth` is stratified: example `i` has depth exactly
`d = min_depth + i % (number of depths)`, drawn from the generator bounded at
`d` conditioned on reaching `d` (as Dyck's `test_depth`). Rather than reject
(hopeless for deep, short expressions), we sample top down from the exact
conditional distributions, from tables (dynamic programming over the
generator's probabilities of a subtree's length and depth) computed once per
task: the length first (inverse CDF: `sequence_lengths` needs no sampling),
then each node's argument count, and each argument's length and depth given
those left to place. The tables are float64 probabilities: lengths up to
about 1,000 at depth 6 and more (LRA's own 500..2000 underflow: a clear
error, not a wrong sample).

Tasks (decoder: causal; targets are digits, accuracy's argmax ranges over the
ten of them, as LRA's ten-way classifier):
- `listops`: the published task, one answer: the value of the whole
  expression, scored at its last token (the final `]`, which sees all of it;
  LRA classifies the sequence with an encoder).
- `listops_depth`: our variant: at every `]`, the value of the list it closes
  (computable from the prefix), so intermediate results are scored and only
  depth tracking gets them right. Its last target is `listops`'s answer.
`d_train` (3) bounds the depths of `train`, `valid` and `test_length`;
`test_depth` is d_train+1..2 d_train. Lengths 4..100 for `train`, `valid`
and `test_depth`, 101..300 for `test_length` (there LRA's generator is always
at depth d_train: a list of depth <= 2 has at most 122 tokens, and long ones
are rare). `operators` may name a subset of the
four (the vocabulary keeps all four).
"""

from __future__ import annotations

import bisect
import itertools
import random

import ml_collections
import numpy as np

from bifocal_jax.tasks import base

NAMES = ("listops", "listops_depth")
SPLITS = ("train", "valid", "test_length", "test_depth")
DIGITS = tuple(str(i) for i in range(10))
OPERATORS = ("MIN", "MAX", "MED", "SM")
CLOSE = "]"
VALUE_P = 0.25  # LRA's: a node below the bound is an operator with probability 0.25 (r <= VALUE_P)
LRA_MAX_ARGS = 10


def vocab() -> tuple[str, ...]:
  return (base.PAD, *DIGITS, *(f"[{op}" for op in OPERATORS), CLOSE)


def apply(op: str, args) -> int:
  """LRA's `to_value` of one saturated list."""
  if op == "MIN":
    return min(args)
  if op == "MAX":
    return max(args)
  if op == "MED":
    return int(np.median(args))
  if op == "SM":
    return sum(args) % 10
  raise ValueError(f"operator {op!r}: not one of {OPERATORS}")


def default_config(name: str) -> ml_collections.ConfigDict:
  """LRA's generator at CPU size: depth <= d_train=3 (its max_depth 4), lengths <= 100.

  The depth bounds are linked to `d_train` (setting it moves them all;
  test_depth stays d_train+1..2 d_train).
  """
  if name not in NAMES:
    raise ValueError(f"task name={name!r}: not a ListOps task {NAMES}")
  c = ml_collections.ConfigDict()
  c.name = name
  c.seed = 0
  c.d_train = 3
  c.max_args = LRA_MAX_ARGS
  c.operators = OPERATORS
  d = c.get_ref("d_train")
  c.train = base.split_config(4, 100, 1 << 20, min_depth=1, max_depth=d)
  c.valid = base.split_config(4, 100, 2000, min_depth=1, max_depth=d)
  c.test_length = base.split_config(101, 300, 2000, min_depth=1, max_depth=d)
  c.test_depth = base.split_config(4, 100, 2000, min_depth=d + 1, max_depth=2 * d)
  return c


# ----------------------------------------------------------------------------
# The generator's distribution over a subtree's (length, depth), and sampling from it.
# ----------------------------------------------------------------------------


class Tables:
  """Exact probabilities of LRA's `generate_tree`, for conditional sampling.

  A node with `r` levels left (r = max_depth - its tree depth; 0: a digit)
  yields a subtree of length n and depth h with probability `node[r][n, h]`.
  For j independent arguments with `r` levels left: `all_at_most[r][j, m, g]`
  is the probability that their lengths sum to m and every depth is <= g;
  `max_exactly[r][j, m, g]` that they sum to m and the deepest has depth g
  (its own recursion: no subtraction of nearly equal numbers).
  Arrays are `[..., max_length + 1, levels + 1]`.
  """

  def __init__(self, levels: int, max_length: int, max_args: int):
    self.levels, self.max_length, self.max_args = levels, max_length, max_args
    n1, h1 = max_length + 1, levels + 1
    leaf = np.zeros((n1, h1))
    leaf[1, 0] = 1.0
    self.node = [leaf]
    self.all_at_most, self.max_exactly = [], []
    for r in range(levels):  # arguments with r levels left, under a node with r + 1
      arg = self.node[r]
      at_most = np.cumsum(arg, axis=1)
      below = np.concatenate([np.zeros((n1, 1)), at_most[:, :-1]], axis=1)  # depth <= g - 1
      s = np.zeros((max_args + 1, n1, h1))
      e = np.zeros((max_args + 1, n1, h1))
      s[0, 0, :] = 1.0
      for j in range(1, max_args + 1):
        for g in range(r + 1):
          s[j, :, g] = np.convolve(s[j - 1, :, g], at_most[:, g])[:n1]
          e[j, :, g] = (np.convolve(s[j - 1, :, g], arg[:, g])[:n1] +
                        np.convolve(e[j - 1, :, g], below[:, g])[:n1])
      self.all_at_most.append(s)
      self.max_exactly.append(e)
      node = np.zeros((n1, h1))
      node[1, 0] = 1.0 - VALUE_P
      # An operator node: 2 tokens, randint(2, max_args) arguments, depth 1 + theirs.
      lists = VALUE_P * e[2:].sum(0) / (max_args - 1)
      node[2:, 1:] = lists[:n1 - 2, :h1 - 1]
      self.node.append(node)
    positive = np.concatenate([t[t > 0] for t in self.node])
    if positive.min(initial=1.0) < 1e-250:
      raise ValueError(f"task.max_length={max_length}: too long for the float64 tables "
                       "(probabilities underflow)")

  def argument_counts(self, r: int, n: int, h: int) -> np.ndarray:
    """Unnormalised P(k arguments | a list at r levels of length n and depth h), k = 0..A."""
    weights = self.max_exactly[r - 1][:, n - 2, h - 1].copy()
    weights[:2] = 0.0
    return weights


def _draw(rng: random.Random, weights: np.ndarray) -> int:
  """An index drawn with probability proportional to `weights` (non-negative).

  The cumulative sums left to right, as `np.cumsum` adds them, and the first
  one above the uniform, as `np.searchsorted(side="right")`: in Python, since
  numpy's per-call overhead on these short arrays is a large share of
  generating an example (docs/performance.md, "Data throughput"; the same
  draws, bitwise: `tests/tasks/test_listops.py`)."""
  cdf = list(itertools.accumulate(weights.tolist()))
  return min(bisect.bisect_right(cdf, rng.random() * cdf[-1]), len(cdf) - 1)


def sample_tree(tables: Tables, rng: random.Random, operators: tuple[str, ...], r: int, n: int,
                h: int, out: list) -> int:
  """Appends to `out` the tokens of a subtree drawn from `generate_tree` at `r`
  levels left given length n and depth h, each `]` as `("]", value)`; returns its value."""
  if h == 0:
    digit = rng.randrange(10)
    out.append(DIGITS[digit])
    return digit
  k = _draw(rng, tables.argument_counts(r, n, h))
  op = operators[rng.randrange(len(operators))]
  out.append(f"[{op}")
  s, e, arg = tables.all_at_most[r - 1], tables.max_exactly[r - 1], tables.node[r - 1]
  m, g, reached = n - 2, h - 1, False
  values = []
  for left in range(k - 1, -1, -1):  # arguments after this one
    if left == 0:
      n1 = m
      if reached:
        h1 = _draw(rng, arg[n1, :g + 1])
      else:
        h1 = g
    else:
      lengths = np.arange(1, m + 1)
      rest_all = s[left, m - lengths, g]
      at_most = arg[1:m + 1, :g + 1].sum(1)
      if reached:
        n1 = 1 + _draw(rng, at_most * rest_all)
        h1 = _draw(rng, arg[n1, :g + 1])
      else:
        exact = arg[1:m + 1, g]
        below = at_most - exact
        rest_exact = e[left, m - lengths, g]
        n1 = 1 + _draw(rng, exact * rest_all + below * rest_exact)
        depth_weights = arg[n1, :g + 1] * e[left, m - n1, g]
        depth_weights[g] = arg[n1, g] * s[left, m - n1, g]
        h1 = _draw(rng, depth_weights)
    values.append(sample_tree(tables, rng, operators, r - 1, n1, h1, out))
    reached |= h1 == g
    m -= n1
  value = apply(op, values)
  out.append((CLOSE, value))
  return value


# ----------------------------------------------------------------------------
# The tasks.
# ----------------------------------------------------------------------------


class ListOps(base.Task):
  """`listops`: the published task, the expression's value at its last token."""

  name = "listops"
  causal = True

  def __init__(self, config: ml_collections.ConfigDict):
    d_train = base.int_key(config, "d_train", minimum=1)
    self.max_args = base.int_key(config, "max_args", minimum=2)
    operators = base.get_key(config, "operators")
    if (isinstance(operators, str) or not operators or len(set(operators)) != len(operators) or
        not set(operators) <= set(OPERATORS)):
      base.fail("operators", operators,
                f"must be a non-empty tuple of distinct names of {OPERATORS}")
    self.operators = tuple(operators)
    splits = {
        name: base.parse_split(config, name, has_depth=True, stratified=name == "test_depth")
        for name in SPLITS
    }
    for spec in splits.values():
      if spec.min_depth < 1:
        base.fail(f"{spec.name}.min_depth", spec.min_depth, "must be >= 1 (at least one list)")
      if not spec.stratified and spec.max_depth > d_train:
        base.fail(f"{spec.name}.max_depth", spec.max_depth, f"must be <= d_train={d_train}")
    base.check_extrapolation(splits)
    super().__init__(config, vocab(), splits.values())
    levels = max(spec.max_depth for spec in splits.values())
    self.tables = Tables(levels, max(spec.max_length for spec in splits.values()), self.max_args)
    self._lengths = {name: self._length_distributions(spec) for name, spec in splits.items()}
    self.output_ids = tuple(self.token_ids[d] for d in DIGITS)

  def _strata(self, spec: base.Split) -> list[tuple[int, int, int]]:
    """(levels of the bound, min depth, max depth) of each stratum."""
    if spec.stratified:
      return [(d, d, d) for d in spec.depths]
    return [(spec.max_depth, spec.min_depth, spec.max_depth)]

  def _length_distributions(self, spec: base.Split):
    """Per stratum: the CDF over lengths min_length..max_length, and over depths given each."""
    strata = []
    for levels, lo, hi in self._strata(spec):
      joint = self.tables.node[levels][spec.min_length:spec.max_length + 1, lo:hi + 1]
      if not joint.sum() > 0:
        base.fail(
            f"{spec.name}.max_length", spec.max_length,
            f"no expression of depth {lo}..{hi} with at most {self.max_args} arguments "
            f"fits in lengths [{spec.min_length}, {spec.max_length}]")
      cdf = np.cumsum(joint.sum(1))
      strata.append((cdf / cdf[-1], joint))
    return strata

  def _stratum_and_lengths(self, split: str, indices: np.ndarray):
    spec = self.split(split)
    strata = self._lengths[split]
    stratum = indices % len(strata)
    draws = base.uniforms(self.key(split, "length"), indices, 1)[:, 0]
    lengths = np.empty(len(indices), np.int64)
    for i, (cdf, _) in enumerate(strata):
      here = stratum == i
      lengths[here] = spec.min_length + np.minimum(np.searchsorted(cdf, draws[here], side="right"),
                                                   len(cdf) - 1)
    return stratum, lengths

  def sequence_lengths(self, split: str, indices: np.ndarray, length=None) -> np.ndarray:
    del length  # `supports_length` is False: `Task.batch` refuses one.
    return self._stratum_and_lengths(split, np.asarray(indices, np.int64))[1]

  def max_sequence_length(self, split: str) -> int:
    spec = self.split(split)
    return max(spec.min_length + int(np.flatnonzero(joint.sum(1) > 0)[-1])
               for _, joint in self._lengths[split])

  def expression(self, split: str, index: int) -> list:
    """Example `index` of `split` as tokens, each `]` as `("]", value of its list)`."""
    indices = np.array([index], np.int64)
    stratum, lengths = self._stratum_and_lengths(split, indices)
    rng = base.example_rngs(self.key(split, "content"), indices)[0]
    return self._expression(split, int(stratum[0]), int(lengths[0]), rng)

  def _expression(self, split: str, stratum: int, n: int, rng: random.Random) -> list:
    """An expression of length n from the split's stratum: its depth, then the tree."""
    levels, lo, _ = self._strata(self.split(split))[stratum]
    _, joint = self._lengths[split][stratum]
    depth = lo + _draw(rng, joint[n - self.split(split).min_length])
    out = []
    sample_tree(self.tables, rng, self.operators, levels, n, depth, out)
    return out

  def scored(self, is_close: np.ndarray) -> np.ndarray:
    """Which of an expression's positions are scored, given where its `]` are."""
    scored = np.zeros_like(is_close)
    scored[-1] = True  # the last token closes the whole expression
    return scored

  def _generate(self, split: str, indices: np.ndarray, width: int,
                length=None) -> dict[str, np.ndarray]:
    del length
    stratum, lengths = self._stratum_and_lengths(split, indices)
    out = base.empty_batch(len(indices), width)
    rngs = base.example_rngs(self.key(split, "content"), indices)
    for row, (rng, i, n) in enumerate(zip(rngs, stratum.tolist(), lengths.tolist())):
      tokens = self._expression(split, i, n, rng)
      is_close = np.array([isinstance(t, tuple) for t in tokens])
      symbols = [t[0] if isinstance(t, tuple) else t for t in tokens]
      scored = self.scored(is_close)
      height = np.cumsum([t.startswith("[") - (t == CLOSE) for t in symbols])
      out["inputs"][row, :n] = [self.token_ids[s] for s in symbols]
      values = [self.token_ids[DIGITS[t[1]]] if isinstance(t, tuple) else 0 for t in tokens]
      out["targets"][row, :n] = np.where(scored, values, base.PAD_ID)
      out["mask"][row, :n] = scored
      out["depth"][row] = height.max()
    out["loss_mask"] = out["mask"].copy()
    out["valid"] = np.arange(width) < lengths[:, None]
    out["length"][:] = lengths
    del out["index"]  # `Task.batch` sets it.
    return out

  def format_example(self, example: dict) -> tuple[str, str]:
    """The token sequence; the target per position, `.` where unscored."""
    targets = [
        self.vocab[t] if m else base.UNSCORED for t, m in zip(example["targets"], example["mask"])
    ]
    return " ".join(self.decode(example["inputs"])), " ".join(targets)


class ListOpsDepth(ListOps):
  """`listops_depth`: ours, the value of every list scored at the `]` that closes it."""

  name = "listops_depth"

  def scored(self, is_close: np.ndarray) -> np.ndarray:
    return is_close.copy()


TASKS = (ListOps, ListOpsDepth)
