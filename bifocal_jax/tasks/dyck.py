"""Dyck-(k, m): bounded-depth bracket strings, closing-bracket prediction.

The strings are those of the m-bounded Dyck automaton of Hewitt et al. (2020),
as used by Yao et al. (2021) for their published data (`external`): with an
empty stack, stop (END) with probability 1/2 or open; at depth m, close;
otherwise open or close with probability 1/2 each; every opening bracket's
type is uniform over k.

Rather than run the automaton and reject strings outside a split's ranges
(hopeless for long or deep strings), we sample the automaton *conditioned* on
its length and depth: draw the number of bracket pairs uniformly in the split's
range, then walk the heights step by step with the exact conditional
probability of going up, from a table over (steps left, height, minimum depth
reached yet) computed once by dynamic programming over the automaton's step
weights. A string's probability given its length is then exactly the
automaton's. Splits `train`, `valid` and `test_length` condition on depth in
`[min_depth, max_depth]` (bound `max_depth`); `test_depth` is stratified: example
`i` has depth exactly `d = min_depth + i % (number of depths)`, drawn from the
d-bounded automaton conditioned on reaching d (as Yao et al.'s test files).

Tokens: PAD=0, `(a`..: 1..k, `a)`..: k+1..2k, END=2k+1. The input is the string
with END, exactly as in the published format. Labels: after reading token t,
if the stack is non-empty the target is the closing bracket of its top and
mask=1; otherwise PAD with mask 0. Length = tokens including END; depth = the
maximum nesting depth. Generation is vectorised over a batch; only the walk over
heights loops, over time.
"""

from __future__ import annotations

import functools
import string

import ml_collections
import numpy as np

from bifocal_jax.tasks import base

NAME = "dyck"
SPLITS = ("train", "valid", "test_length", "test_depth")


def default_config() -> ml_collections.ConfigDict:
  """Dyck-(8, 5), sized for a CPU demo.

  The depth bounds are linked to `m` (ml_collections references): setting `m`,
  or any of them, moves them all (test_depth stays m+1..2m).
  """
  c = ml_collections.ConfigDict()
  c.name = NAME
  c.seed = 0
  c.k = 8
  c.m = 5
  m = c.get_ref("m")
  c.train = base.split_config(3, 99, 1 << 20, min_depth=1, max_depth=m)
  # Held-out splits of 2,000 strings: a token accuracy near 0.9 then has a 95%
  # interval of about +-0.01 (tokens within a string are correlated).
  c.valid = base.split_config(3, 99, 2000, min_depth=1, max_depth=m)
  c.test_length = base.split_config(101, 299, 2000, min_depth=1, max_depth=m)
  c.test_depth = base.split_config(3, 99, 2000, min_depth=m + 1, max_depth=2 * m)
  return c


def bracket_vocab(k: int) -> tuple[str, ...]:
  """PAD, `(a`.., `a)`.., END: the published token spellings."""
  letters = string.ascii_lowercase[:k]
  return (base.PAD, *(f"({x}" for x in letters), *(f"{x})" for x in letters), "END")


# ----------------------------------------------------------------------------
# Pure functions: the stack, the labels, the conditional walk.
# ----------------------------------------------------------------------------


def stack_tops(is_open_BxT: np.ndarray, height_BxT: np.ndarray) -> np.ndarray:
  """int[B, T]: position of the open bracket on top of the stack after step t (-1: empty).

  The top at height h is the latest opening that reached h: any opening at h
  closed since would have needed a later one to get back to h.
  """
  positions = np.arange(is_open_BxT.shape[1])
  top = np.full(is_open_BxT.shape, -1, np.int64)
  for level in range(1, int(height_BxT.max(initial=0)) + 1):
    last_open = np.maximum.accumulate(np.where(is_open_BxT & (height_BxT == level), positions, -1),
                                      axis=1)
    top = np.where(height_BxT == level, last_open, top)
  return top


def closing_targets(inputs_BxL: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """The labelling rule, from well-formed token ids: (targets, mask, depth).

  targets[b, t] is the closing bracket of the stack's top after reading
  inputs[b, :t+1] (mask 1), or PAD when the stack is empty (mask 0).
  """
  is_open = (inputs_BxL >= 1) & (inputs_BxL <= k)
  is_close = (inputs_BxL > k) & (inputs_BxL <= 2 * k)
  height = np.cumsum(is_open.astype(np.int32) - is_close, axis=1)
  return _targets(inputs_BxL, height, stack_tops(is_open, height), k)


def _targets(inputs_BxL, height_BxL, top_BxL, k):
  top_token = np.take_along_axis(inputs_BxL, np.maximum(top_BxL, 0), axis=1)
  nonempty = height_BxL > 0
  targets = np.where(nonempty, top_token + k, base.PAD_ID).astype(np.int32)
  return targets, nonempty.astype(np.float32), height_BxL.max(axis=1, initial=0).astype(np.int32)


@functools.lru_cache(maxsize=64)
def walk_table(min_depth: int, max_depth: int, max_steps: int) -> np.ndarray:
  """P(up | steps left r, height h, reached min_depth f): float64[r, h, f].

  For the walk of the `max_depth`-bounded automaton conditioned on returning to
  0 after exactly r more steps having reached `min_depth` at some point. Step
  weights: 1/2 up and 1/2 down below the bound, 1 down at it, so the
  conditional distribution over whole walks is the automaton's given their
  length. Counts are rescaled per r (only ratios within a row matter).
  """
  heights = np.arange(max_depth + 1)
  w_up = np.where(heights < max_depth, 0.5, 0.0)[:, None]
  w_down = np.select([heights == 0, heights == max_depth], [0.0, 1.0], 0.5)[:, None]
  reached = np.arange(2)[None, :]
  reached_after_up = np.maximum(reached, (heights + 1 >= min_depth)[:, None].astype(int))
  # Row max_depth + 1 stays zero: the target of an impossible step up or of -1.
  count = np.zeros((max_depth + 2, 2))
  count[0, 1] = 1.0  # zero steps left: done iff at height 0 having reached min_depth.
  p_up = np.zeros((max_steps + 1, max_depth + 1, 2))
  for r in range(1, max_steps + 1):
    up = w_up * count[heights[:, None] + 1, reached_after_up]
    down = w_down * count[heights - 1]
    total = up + down
    np.divide(up, total, out=p_up[r], where=total > 0)
    count[:max_depth + 1] = total / total.max()
  return p_up


def _state_tables(min_depth: int, max_depth: int, num_states: int):
  """Successor of each state `2*h + reached` after a step down (col 0) or up (col 1)."""
  h, reached = np.divmod(np.arange(num_states), 2)
  up = 2 * np.minimum(h + 1, max_depth) + np.maximum(reached, h + 1 >= min_depth)
  down = 2 * np.maximum(h - 1, 0) + reached
  return np.stack([down, up], axis=1)


# ----------------------------------------------------------------------------
# The task.
# ----------------------------------------------------------------------------


class Dyck(base.Task):
  """Dyck-(k, m) closing-bracket prediction (decoder: causal)."""

  name = NAME
  causal = True

  def __init__(self, config: ml_collections.ConfigDict):
    self.k = base.int_key(config, "k", minimum=1)
    if self.k > 26:
      base.fail("k", self.k, "at most 26 bracket types (letters a..z)")
    self.m = base.int_key(config, "m", minimum=1)
    splits = {
        name: base.parse_split(config, name, has_depth=True, stratified=name == "test_depth")
        for name in SPLITS
    }
    for spec in splits.values():
      if spec.min_depth < 1:
        base.fail(f"{spec.name}.min_depth", spec.min_depth, "must be >= 1 (non-empty strings)")
      if not spec.stratified and spec.max_depth > self.m:
        base.fail(f"{spec.name}.max_depth", spec.max_depth, f"must be <= m={self.m}")
      deepest = spec.max_depth if spec.stratified else spec.min_depth
      if self._pairs_range(spec, deepest)[0] > self._pairs_range(spec, deepest)[1]:
        base.fail(
            f"{spec.name}.max_length", spec.max_length,
            f"no string of depth {deepest} fits in lengths "
            f"[{spec.min_length}, {spec.max_length}] (needs {2 * deepest + 1} tokens)")
    base.check_extrapolation(splits)
    super().__init__(config, bracket_vocab(self.k), splits.values())
    self.end_id = 2 * self.k + 1
    self._chains = {}

  @property
  def close_ids(self) -> tuple[int, ...]:
    return tuple(range(self.k + 1, 2 * self.k + 1))

  @staticmethod
  def _pairs_range(spec: base.Split, depth: int) -> tuple[int, int]:
    """Bracket pairs p (length 2p + 1) in the split's lengths, with room for `depth`."""
    return max(spec.min_length // 2, depth, 1), (spec.max_length - 1) // 2

  def _strata(self, spec: base.Split) -> list[tuple[int, int]]:
    """The (min_depth, max_depth) conditions: one per depth if stratified."""
    if spec.stratified:
      return [(d, d) for d in spec.depths]
    return [(spec.min_depth, spec.max_depth)]

  def _stratum_and_pairs(self, split: str, indices: np.ndarray):
    spec = self.split(split)
    strata = self._strata(spec)
    stratum = indices % len(strata)
    low = np.array([self._pairs_range(spec, lo)[0] for lo, _ in strata])[stratum]
    high = self._pairs_range(spec, 0)[1]
    return stratum, base.uniform_integers(self.key(split, "length"), indices, low, high)

  def sequence_lengths(self, split: str, indices: np.ndarray, length=None) -> np.ndarray:
    del length  # `supports_length` is False: `Task.batch` refuses one.
    return 2 * self._stratum_and_pairs(split, np.asarray(indices, np.int64))[1] + 1

  def max_sequence_length(self, split: str) -> int:
    return 2 * self._pairs_range(self.split(split), 0)[1] + 1

  def _walk_chain(self, split: str):
    """The walk as one flat Markov chain over z = (stratum, steps left, state).

    Returns `p_up[z]`, `successor[2 * z + went_up]` and, per stratum, the z of
    its start state with zero steps left (add `steps * num_states`). Cached.
    """
    if split not in self._chains:
      self._chains[split] = self._build_walk_chain(split)
    return self._chains[split]

  def _build_walk_chain(self, split: str):
    spec = self.split(split)
    strata = self._strata(spec)
    max_steps = 2 * self._pairs_range(spec, 0)[1]
    num_states = 2 * (spec.max_depth + 1)
    p_up = np.zeros((len(strata), max_steps + 1, num_states))
    successor = np.zeros((len(strata), max_steps + 1, num_states, 2), np.int64)
    stratum_z = np.arange(len(strata))[:, None, None] * (max_steps + 1) * num_states
    rows_left = np.maximum(np.arange(max_steps + 1) - 1, 0)[None, :, None] * num_states
    for i, (lo, hi) in enumerate(strata):
      p_up[i, :, :2 * (hi + 1)] = walk_table(lo, hi, max_steps).reshape(max_steps + 1, -1)
      successor[i] = _state_tables(lo, hi, num_states)[None]
    successor += (stratum_z + rows_left)[..., None]
    start_z = stratum_z[:, 0, 0] + np.array([int(lo == 0) for lo, _ in strata])
    return p_up.reshape(-1), successor.reshape(-1), start_z, num_states

  def _walk(self, split: str, indices: np.ndarray, stratum: np.ndarray, steps: np.ndarray):
    """(up, kind) [B, T]: whether step t goes up (opens), and if so the bracket type."""
    p_up, successor, start_z, num_states = self._walk_chain(split)
    num_steps = int(steps.max(initial=0))
    draws_TxB = np.ascontiguousarray(base.uniforms(self.key(split, "walk"), indices, num_steps).T)
    z_TxB = np.zeros((num_steps, len(indices)), np.int64)
    z = start_z[stratum] + steps * num_states
    for t in range(num_steps):
      z_TxB[t] = z
      z = successor.take(2 * z + (draws_TxB[t] < p_up.take(z)))
    p_TxB = p_up.take(z_TxB)  # 0 past each walk's end.
    up_TxB = draws_TxB < p_TxB
    # Given draw < p, draw / p is again uniform in [0, 1): it picks the type.
    kind_TxB = np.floor(
        np.divide(draws_TxB, p_TxB, out=np.zeros_like(p_TxB), where=up_TxB) * self.k)
    return up_TxB.T, kind_TxB.T.astype(np.int32)

  def _generate(self, split: str, indices: np.ndarray, width: int,
                length=None) -> dict[str, np.ndarray]:
    del length
    stratum, pairs = self._stratum_and_pairs(split, indices)
    steps = 2 * pairs
    up, kind = self._walk(split, indices, stratum, steps)
    num_steps = up.shape[1]
    is_open = up  # steps past the end have p = 0: never up.
    is_close = ~up & (np.arange(num_steps) < steps[:, None])
    # Stack heights and tops over all `width` positions (END and padding: empty).
    height = np.zeros((len(indices), width), np.int32)
    height[:, :num_steps] = np.cumsum(is_open.astype(np.int32) - is_close, axis=1)
    top = np.full((len(indices), width), -1, np.int64)
    top[:, :num_steps] = stack_tops(is_open, height[:, :num_steps])
    # A closing bracket closes the stack's top before its step.
    tokens = np.zeros((len(indices), width), np.int32)
    tokens[:, :num_steps] = np.where(is_open, 1 + kind, 0)
    top_before = np.maximum(top[:, :num_steps - 1], 0)
    closing = self.k + np.take_along_axis(tokens, top_before, axis=1)
    tokens[:, 1:num_steps] = np.where(is_close[:, 1:], closing, tokens[:, 1:num_steps])
    tokens[np.arange(len(indices)), steps] = self.end_id
    targets, mask, depth = _targets(tokens, height, top, self.k)
    return dict(inputs=tokens, targets=targets, mask=mask, loss_mask=mask.copy(),
                valid=np.arange(width) < (steps + 1)[:, None], length=(steps + 1).astype(np.int32),
                depth=depth)

  def format_example(self, example: dict) -> tuple[str, str]:
    """The published format for the input; the target per position, `.` where unscored."""
    targets = [
        self.vocab[t] if m else base.UNSCORED for t, m in zip(example["targets"], example["mask"])
    ]
    return " ".join(self.decode(example["inputs"])), " ".join(targets)
