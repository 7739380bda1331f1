"""ListOps: every target re-derived by a stack machine; the sampler's statistics
against a line-for-line port of LRA's `generate_tree` (numpy RNG) rejected to
the same conditions; determinism, disjointness, split bounds, bad input, a
tiny training run and its evaluation."""

import collections
import hashlib
import random
import subprocess
import sys

import numpy as np
import pytest

import helpers
from bifocal_jax import configs
from bifocal_jax.evaluation import evaluate as evaluate_lib
from bifocal_jax.evaluation import evaluator
from bifocal_jax import tasks
from bifocal_jax import train
from bifocal_jax.tasks import listops

NAMES = ("listops", "listops_depth")


def make_task(name, **overrides):
  config = tasks.default_task_config(name)
  for key, value in overrides.items():
    node = config
    *parents, leaf = key.split(".")
    for parent in parents:
      node = node[parent]
    node[leaf] = value
  return tasks.get_task(config)


# ----------------------------------------------------------------------------
# An independent solver: a stack machine over the tokens.
# ----------------------------------------------------------------------------


def _value(op, args):
  if op == "MIN":
    return min(args)
  if op == "MAX":
    return max(args)
  if op == "SM":
    return sum(args) % 10
  assert op == "MED"
  ordered = sorted(args)
  middle = len(ordered) // 2
  # numpy's median of an even count is the mean of the middle two; int() truncates.
  return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) // 2


def solve(tokens):
  """Per token: the value of the list a `]` closes (None elsewhere); the depth;
  and per list its operator and argument count. Asserts well-formedness."""
  stack, values, lists, depth = [], [], [], 0
  for token in tokens:
    if token.startswith("["):
      assert token[1:] in ("MIN", "MAX", "MED", "SM"), token
      stack.append((token[1:], []))
      depth = max(depth, len(stack))
      values.append(None)
    elif token == "]":
      op, args = stack.pop()
      value = _value(op, args)
      lists.append((op, len(args)))
      if stack:
        stack[-1][1].append(value)
      values.append(value)
    else:
      assert token.isdigit() and len(token) == 1 and stack, tokens
      stack[-1][1].append(int(token))
      values.append(None)
  assert not stack and tokens[-1] == "]", tokens
  return values, depth, lists


def examples_of(task, split, indices):
  batch = task.batch(split, indices)
  for row in range(len(indices)):
    n = int(batch["valid"][row].sum())
    assert (batch["inputs"][row, n:] == 0).all() and not batch["mask"][row, n:].any()
    yield dict(tokens=task.decode(batch["inputs"][row, :n]),
               targets=task.decode(batch["targets"][row, :n]), mask=batch["mask"][row, :n],
               loss_mask=batch["loss_mask"][row, :n], length=int(batch["length"][row]),
               depth=int(batch["depth"][row]))


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("split,num", [("train", 1500), ("valid", 300), ("test_length", 300),
                                       ("test_depth", 300)])
def test_every_target_matches_a_stack_machine_and_splits_hold_their_bounds(name, split, num):
  task = make_task(name)
  spec = task.split(split)
  depths = collections.Counter()
  for i, e in enumerate(examples_of(task, split, np.arange(num))):
    values, depth, _ = solve(e["tokens"])
    assert e["depth"] == depth and e["length"] == len(e["tokens"])
    assert spec.min_length <= e["length"] <= spec.max_length
    assert spec.min_depth <= depth <= spec.max_depth
    if spec.stratified:
      assert depth == spec.min_depth + i % len(spec.depths)
    if name == "listops_depth":
      scored = [v is not None for v in values]
    else:  # the answer only, at the last token
      scored = [False] * (len(values) - 1) + [True]
    np.testing.assert_array_equal(e["mask"], scored)
    np.testing.assert_array_equal(e["loss_mask"], e["mask"])
    for target, value, m in zip(e["targets"], values, scored):
      assert target == (str(value) if m else "<pad>")
    depths[depth] += 1
  # Every depth occurs (past length 100 at depth <= 3, LRA's generator is as deep as allowed).
  assert set(depths) == ({spec.max_depth} if split == "test_length" else set(spec.depths)), depths
  assert max(len(e["tokens"]) for e in examples_of(task, split, np.arange(50))) <= (
      task.max_sequence_length(split))


def test_vocabulary_and_argmax_over_the_ten_digits():
  task = make_task("listops_depth")
  assert task.vocab == ("<pad>", *"0123456789", "[MIN", "[MAX", "[MED", "[SM", "]")
  assert task.causal and evaluator.class_ids(task) == tuple(range(1, 11))
  assert evaluator.close_ids(task) is None


def test_both_tasks_answer_the_same_expression_alike():
  """`listops`'s one target is what `listops_depth` scores at the last `]`."""
  a, b = make_task("listops"), make_task("listops_depth")
  for e in examples_of(a, "valid", np.arange(100)):
    assert e["mask"].sum() == 1 and e["targets"][-1] == str(solve(e["tokens"])[0][-1])
  for e in examples_of(b, "valid", np.arange(100)):
    assert e["mask"].sum() == e["tokens"].count("]")


# ----------------------------------------------------------------------------
# The sampler against LRA's generator.
# ----------------------------------------------------------------------------

# A line-for-line port of lra_benchmarks/data/listops.py (google-research/long-range-arena),
# with numpy's RNG for Python's `random` and the lengths it counts.
MIN, MAX, MED, SUM_MOD, END = "[MIN", "[MAX", "[MED", "[SM", "]"
OPERATORS = [MIN, MAX, MED, SUM_MOD]
VALUES = range(10)
VALUE_P = 0.25


def generate_tree(rng, depth, max_depth, max_args):
  if depth < max_depth:
    r = rng.random()
  else:
    r = 1

  if r > VALUE_P:
    value = VALUES[rng.integers(len(VALUES))]
    return value, 1
  else:
    length = 2
    num_values = int(rng.integers(2, max_args + 1))
    values = []
    for _ in range(num_values):
      sub_t, sub_l = generate_tree(rng, depth + 1, max_depth, max_args)
      values.append(sub_t)
      length += sub_l

    op = OPERATORS[rng.integers(len(OPERATORS))]
    t = (op, values[0])
    for value in values[1:]:
      t = (t, value)
    t = (t, END)
  return t, length


def to_tokens(t):
  """LRA's `to_string` without its parentheses (what both pipelines feed the model)."""
  if isinstance(t, str):
    return [t]
  if not isinstance(t, tuple):
    return [str(t)]
  return to_tokens(t[0]) + to_tokens(t[1])


def statistics(expressions):
  """Frequencies of lengths, depths, argument counts, operators, digits and answers."""
  stats = {k: collections.Counter() for k in ("length", "depth", "args", "op", "digit", "answer")}
  for tokens in expressions:
    values, depth, lists = solve(tokens)
    stats["length"][len(tokens)] += 1
    stats["depth"][depth] += 1
    stats["answer"][values[-1]] += 1
    for op, count in lists:
      stats["op"][op] += 1
      stats["args"][count] += 1
    stats["digit"].update(t for t in tokens if t.isdigit())
  return stats


def assert_same_frequencies(ours, theirs, what):
  """Each category's frequency within 5 standard errors (two samples), plus a little."""
  n1, n2 = sum(ours.values()), sum(theirs.values())
  for key in set(ours) | set(theirs):
    p1, p2 = ours[key] / n1, theirs[key] / n2
    p = (ours[key] + theirs[key]) / (n1 + n2)
    bound = 5 * np.sqrt(p * (1 - p) * (1 / n1 + 1 / n2)) + 2e-3
    assert abs(p1 - p2) <= bound, (what, key, p1, p2, bound)


def reference(num, *, max_depth, max_args, min_length, max_length, depths, seed=0):
  """`num` token sequences of LRA's generator kept when length and depth are in range."""
  rng = np.random.default_rng(seed)
  out = []
  while len(out) < num:
    tree, length = generate_tree(rng, 1, max_depth, max_args)
    if min_length <= length <= max_length:
      tokens = to_tokens(tree)
      assert len(tokens) == length
      if solve(tokens)[1] in depths:
        out.append(tokens)
  return out


@pytest.mark.parametrize("split,overrides", [
    ("train", dict(d_train=2, max_args=6, **{"train.max_length": 30, "test_length.min_length": 31})),
    ("train", dict()),  # the defaults: LRA's max_args=10, depth <= 3, lengths 4..100
    ("test_depth", dict(d_train=2, **{"test_depth.max_depth": 3, "test_depth.size": 3000})),
])
def test_sampler_statistics_match_lra_generate_tree(split, overrides):
  task = make_task("listops_depth", **overrides)
  spec = task.split(split)
  num = 3000
  ours = [e["tokens"] for e in examples_of(task, split, np.arange(num))]
  levels = spec.max_depth  # LRA's generate_tree(1, max_depth) nests max_depth - 1 lists
  theirs = reference(num, max_depth=levels + 1, max_args=task.max_args,
                     min_length=spec.min_length, max_length=spec.max_length,
                     depths=range(spec.min_depth, spec.max_depth + 1))
  ours_stats, their_stats = statistics(ours), statistics(theirs)
  for what in ("depth", "args", "op", "digit", "answer"):
    assert_same_frequencies(ours_stats[what], their_stats[what], what)
  # Lengths: the generator's own distribution within the range (compared in octaves).
  assert_same_frequencies(_octaves(ours_stats["length"]), _octaves(their_stats["length"]),
                          "length")
  mean = lambda c: sum(k * v for k, v in c.items()) / sum(c.values())
  assert abs(mean(ours_stats["length"]) - mean(their_stats["length"])) < 0.05 * mean(
      their_stats["length"])


def _octaves(counter):
  out = collections.Counter()
  for k, v in counter.items():
    out[int(np.log2(k))] += v
  return out


def test_median_truncates_as_numpy_does():
  task = make_task("listops_depth", operators=("MED",))
  seen_even = False
  for e in examples_of(task, "train", np.arange(300)):
    values, _, _ = solve(e["tokens"])
    seen_even |= any(count % 2 == 0 for _, count in solve(e["tokens"])[2])
    assert [t for t, m in zip(e["targets"], e["mask"]) if m] == [str(v) for v in values if v is not None]
  assert seen_even


def test_operator_subset_samples_only_those_operators():
  task = make_task("listops_depth", operators=("MIN", "MAX", "SM"))
  ops = collections.Counter()
  for e in examples_of(task, "valid", np.arange(300)):
    ops.update(op for op, _ in solve(e["tokens"])[2])
  assert set(ops) == {"MIN", "MAX", "SM"} and task.vocab_size == 16


# ----------------------------------------------------------------------------
# Determinism, disjointness, bad input.
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_examples_are_a_function_of_seed_split_and_index(name):
  task, again = make_task(name), make_task(name)
  indices = [17, 3, 1999, 0, 250]
  for split in task.split_names:
    together = task.batch(split, indices)
    for row, i in enumerate(indices):
      alone = again.example(split, i)
      n = alone["length"]
      np.testing.assert_array_equal(together["inputs"][row, :n], alone["inputs"])
      np.testing.assert_array_equal(together["targets"][row, :n], alone["targets"])
      assert task.expression(split, i)[0] == task.decode(alone["inputs"][:1])[0]
  first = [tuple(task.example("train", i)["inputs"]) for i in range(20)]
  assert first != [tuple(make_task(name, seed=1).example("train", i)["inputs"]) for i in range(20)]
  assert first != [tuple(task.example("valid", i)["inputs"]) for i in range(20)]


def test_no_test_example_is_a_training_example():
  task = make_task("listops_depth")

  def hashes(split, num):
    inputs = task.batch(split, np.arange(num))["inputs"]
    return {hashlib.sha1(row[row > 0].astype(np.int8).tobytes()).hexdigest() for row in inputs}

  seen = hashes("train", 4000)
  for split in ("test_length", "test_depth"):
    assert not hashes(split, 500) & seen, split
  # Shallow, short expressions recur (as in Dyck): valid is the training distribution.
  assert len(hashes("valid", 500) & seen) < 50


@pytest.mark.parametrize("key,value,match", [
    ("operators", ("MIN", "FIRST"), "non-empty tuple of distinct names"),
    ("operators", (), "non-empty tuple"),
    ("max_args", 1, "integer >= 2"),
    ("d_train", 0, "integer >= 1"),
    ("test_depth.min_depth", 3, "must exceed train.max_depth=3"),
    ("test_length.min_length", 100, "must exceed train.max_length=100"),
    ("test_depth.max_length", 12, "no expression of depth 4..4"),
    ("train.min_depth", 0, "must be >= 1"),
    ("test_length.max_length", 3000, "too long for the float64 tables"),
])
def test_bad_configs_raise_one_clear_error(key, value, match):
  with pytest.raises(ValueError, match=match):
    make_task("listops_depth", **{key: value})


def test_cli_prints_input_tab_targets():
  out = subprocess.run([
      sys.executable, "-m", "bifocal_jax.tasks", "--config", "configs/listops_depth.py",
      "--split", "valid", "--num", "3"
  ], cwd=helpers.ROOT, capture_output=True, text=True, check=True).stdout.splitlines()
  assert len(out) == 3
  for line in out:
    source, target = line.split("\t")
    tokens, targets = source.split(" "), target.split(" ")
    values = solve(tokens)[0]
    assert targets == ["." if v is None else str(v) for v in values]


# ----------------------------------------------------------------------------
# Training and evaluation.
# ----------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.usefixtures("persistent_compiles")
def test_tiny_training_run_and_its_evaluation(tmp_path):
  config = configs.load_file(helpers.ROOT / "configs" / "listops_depth.py", "tiny")
  config.steps = 10
  config.eval_every = 10
  config.buckets = (40,)
  summary = train.train_and_evaluate(config, str(tmp_path))
  assert summary["step"] == 10 and np.isfinite(summary["loss"])
  results = evaluate_lib.evaluate(str(tmp_path), num_examples=16, log=lambda _: None)
  for split in ("valid", "test_length", "test_depth"):
    r = results["splits"][split]
    assert r["examples"] == 16 and 0 <= r["token_accuracy"] <= 1
    assert set(r["ci95"]) >= {"token_accuracy", "sequence_accuracy"}
    assert set(r["by_depth"]) <= {str(d) for d in task_depths(config, split)}


def task_depths(config, split):
  return tasks.get_task(config.task).split(split).depths


def test_draw_is_numpys_cumsum_and_searchsorted_bitwise():
  """`_draw` sums and searches in Python; every draw must stay the one the
  numpy formula makes (examples are pure functions of seed, split, index)."""
  gen = np.random.default_rng(0)
  for trial in range(3000):
    size = int(gen.integers(1, 80))
    weights = gen.random(size) * 10.0**gen.integers(-200, 5, size)
    weights[gen.random(size) < 0.3] = 0.0
    if not weights.any():
      weights[-1] = 1.0
    seed = int(gen.integers(1 << 30))
    expected_rng, rng = random.Random(seed), random.Random(seed)
    cdf = np.cumsum(weights)
    expected = min(int(np.searchsorted(cdf, expected_rng.random() * cdf[-1], side="right")),
                   size - 1)
    assert listops._draw(rng, weights) == expected, trial
