"""Task generators against independent checkers; ranges, disjointness, determinism,
the published Dyck files, the CLI, and bad input."""

import collections
import json
import math
import os
import random
import subprocess
import sys
import textwrap

import ml_collections
import numpy as np
import pytest

import chomsky_reference
from bifocal_jax import tasks
from bifocal_jax.tasks import base, dyck, external

# The published files' declared ranges (README): lengths and max depths.
PUBLISHED = {
    "k8_m5.dev": ((3, 179), (1, 5)),
    "k8_m5.test": ((183, 359), (5, 5)),
    "k8_m10.dev": ((3, 687), (1, 10)),
    "k8_m10.test": ((703, 1269), (10, 10)),
    "k8_m20.test": ((2943, 5133), (20, 20)),
}


def make_task(name, **overrides):
  config = tasks.default_task_config(name)
  for key, value in overrides.items():
    node = config
    *parents, leaf = key.split(".")
    for parent in parents:
      node = node[parent]
    node[leaf] = value
  return tasks.get_task(config)


def examples_of(task, split, num, start=0, length=None):
  """Examples [start, start + num) of a split (generated in one batch), unpadded."""
  batch = task.batch(split, np.arange(start, start + num), length=length)
  out = []
  for row in range(num):
    n = int(batch["valid"][row].sum())
    assert batch["valid"][row, :n].all() and not batch["valid"][row, n:].any()
    assert (batch["inputs"][row, n:] == task.pad_id).all() and (batch["mask"][row, n:] == 0).all()
    assert (batch["loss_mask"][row, n:] == 0).all()
    out.append(dict(inputs=task.decode(batch["inputs"][row, :n]),
                    targets=task.decode(batch["targets"][row, :n]),
                    mask=batch["mask"][row, :n], loss_mask=batch["loss_mask"][row, :n], length=int(batch["length"][row]),
                    depth=int(batch["depth"][row]), index=int(batch["index"][row])))
  return out


# ----------------------------------------------------------------------------
# Dyck.
# ----------------------------------------------------------------------------


def check_dyck(tokens, targets, mask):
  """Stack parser: the string is balanced Dyck ending in END, and each target is the
  closing bracket of the stack's top (mask 1) or PAD on an empty stack (mask 0).
  Returns the maximum depth."""
  assert tokens[-1] == "END" and "END" not in tokens[:-1]
  stack, depth = [], 0
  for token, target, m in zip(tokens, targets, mask):
    if token.startswith("("):
      stack.append(token[1])
    elif token.endswith(")"):
      assert stack and stack.pop() == token[0], tokens
    depth = max(depth, len(stack))
    if stack:
      assert (target, m) == (stack[-1] + ")", 1.0)
    else:
      assert (target, m) == ("<pad>", 0.0)
  assert not stack
  return depth


@pytest.mark.parametrize("split,num", [("train", 2000), ("valid", 500), ("test_length", 256),
                                       ("test_depth", 250)])
def test_dyck_examples_are_well_formed_labelled_and_in_range(split, num):
  task = make_task("dyck")
  spec = task.split(split)
  examples = examples_of(task, split, num)
  depths = collections.Counter()
  for e in examples:
    assert check_dyck(e["inputs"], e["targets"], e["mask"]) == e["depth"]
    assert e["length"] == len(e["inputs"])
    assert spec.min_length <= e["length"] <= spec.max_length
    assert spec.min_depth <= e["depth"] <= spec.max_depth
    depths[e["depth"]] += 1
  if split == "test_depth":  # stratified: every depth equally often, by index.
    assert all(e["depth"] == spec.min_depth + e["index"] % len(spec.depths) for e in examples)
    assert set(depths.values()) == {num // len(spec.depths)}
  else:  # uniform pair counts: the lengths cover the range.
    lengths = [e["length"] for e in examples]
    assert min(lengths) <= spec.min_length + 10 and max(lengths) >= spec.max_length - 10
  letters = collections.Counter(t[1] for e in examples for t in e["inputs"] if t.startswith("("))
  assert len(letters) == task.k and min(letters.values()) > 0.8 * max(letters.values())


def automaton_walk(rng, m):
  """The m-bounded automaton of the published README, as up/down steps (U/D)."""
  steps, height = [], 0
  while True:
    if height == 0 and rng.random() < 0.5:
      return "".join(steps)
    up = height == 0 or (height < m and rng.random() < 0.5)
    steps.append("U" if up else "D")
    height += 1 if up else -1


def test_dyck_walks_follow_the_automaton_conditioned_on_length():
  # Strings of exactly 4 pairs, depth <= 2: the sampler's shapes must have the
  # automaton's conditional distribution (simulated here by rejection).
  task = make_task("dyck", m=2, **{"train.min_length": 9, "train.max_length": 9,
                                    "valid.max_length": 9, "test_length.min_length": 11,
                                    "test_length.max_length": 21})
  num = 6000
  batch = task.batch("train", np.arange(num))
  opens = (batch["inputs"] >= 1) & (batch["inputs"] <= task.k)
  sampled = collections.Counter("".join("U" if o else "D" for o in row[:8]) for row in opens)
  rng = random.Random(0)
  reference = collections.Counter()
  while sum(reference.values()) < num:
    walk = automaton_walk(rng, 2)
    if len(walk) == 8:
      reference[walk] += 1
  assert set(sampled) == set(reference)  # all 8 shapes of height <= 2 (uniform: TV 0.24).
  total_variation = sum(abs(sampled[w] - reference[w]) for w in reference) / (2 * num)
  assert total_variation < 0.04, (sampled, reference)


def test_dyck_min_depth_condition_and_long_deep_strings():
  task = make_task("dyck", m=6, **{"train.min_depth": 4, "test_length.min_length": 1001,
                                    "test_length.max_length": 1201, "test_depth.max_depth": 20,
                                    "test_depth.min_length": 41, "test_depth.max_length": 41})
  for e in examples_of(task, "train", 300):
    assert 4 <= check_dyck(e["inputs"], e["targets"], e["mask"]) == e["depth"] <= 6
  for e in examples_of(task, "test_length", 20):
    assert 1001 <= e["length"] <= 1201 and check_dyck(e["inputs"], e["targets"], e["mask"]) <= 6
  deep = examples_of(task, "test_depth", 28)  # depths 7..20, only 41 tokens.
  assert sorted({e["depth"] for e in deep}) == list(range(7, 21))
  for e in deep:
    assert e["length"] == 41 and check_dyck(e["inputs"], e["targets"], e["mask"]) == e["depth"]


def test_dyck_vocabulary_and_layout():
  task = make_task("dyck")
  assert task.vocab_size == 2 * task.k + 2 and task.pad_id == 0 and task.causal
  assert task.vocab[1] == "(a" and task.vocab[task.k + 1] == "a)" and task.vocab[-1] == "END"
  assert task.close_ids == tuple(range(task.k + 1, 2 * task.k + 1))
  assert task.split_names == ("train", "valid", "test_length", "test_depth")
  e = task.example("valid", 3)
  assert e["inputs"].dtype == np.int32 and e["targets"].dtype == np.int32
  assert e["mask"].dtype == np.float32 and len(e["inputs"]) == e["length"]
  source, target = task.format_example(e)
  assert source.split(" ") == task.decode(e["inputs"])
  assert len(target.split(" ")) == e["length"] and target.endswith(" .")


# ----------------------------------------------------------------------------
# Chomsky-hierarchy tasks.
# ----------------------------------------------------------------------------

ORIGINAL = tuple(chomsky_reference.SAMPLERS)  # the 15 tasks of Deletang et al.
CHOMSKY = (*ORIGINAL, "modular_arithmetic_brackets_depth")


def python_value(expression):
  """Value mod 5 by Python's parser: `*` before `+ -`, and a unary minus on a
  digit binds tightest, as every arithmetic task means it."""
  return eval(expression, {"__builtins__": {}}) % 5  # pylint: disable=eval-used


def termination_output(digits, width):
  """`digits`, END, then `0` up to `width` positions; scored: the digits and END."""
  return digits + ["END"] + ["0"] * (width - len(digits) - 1), len(digits) + 1


def solve_binary(symbols, add):
  """binary_addition / binary_multiplication from the input alone."""
  n, op = len(symbols), "+" if add else "*"
  if op in symbols:
    a, b = ("".join(symbols).split(op))
    a, b = int(a[::-1], 2), int(b[::-1], 2)
    digits = list(format(a + b if add else a * b, "b")[::-1])
  elif add:  # lengths 1 and 2: a lone number, its own answer.
    digits = list(format(int("".join(symbols[::-1]), 2), "b")[::-1])
  else:  # their fixed answer at lengths 1 and 2.
    digits = ["0"] * (n - 1)
  return termination_output(digits, n + 1 if add else n)


def solve(name, symbols):
  """Each task's answer from its input symbols alone, by direct computation:
  (the target at every output position, how many of them are scored)."""
  n = len(symbols)
  if name == "even_pairs":
    return [str(sum(a != b for a, b in zip(symbols, symbols[1:])) % 2)], 1
  if name.startswith("modular_arithmetic"):
    return [str(python_value("".join(symbols)))], 1
  if name == "parity_check":
    return [str(symbols.count("1") % 2)], 1
  if name == "cycle_navigation":
    return [str(sum({"-": -1, "0": 0, "+": 1}[s] for s in symbols) % 5)], 1
  if name == "reverse_string":
    return symbols[::-1], n
  if name == "duplicate_string":
    return symbols + symbols, 2 * n
  if name == "odds_first":  # 1-based positions 2, 4, .. then 1, 3, .. (their code)
    return [s for i, s in enumerate(symbols, 1) if i % 2 == 0] + \
           [s for i, s in enumerate(symbols, 1) if i % 2 == 1], n
  if name == "bucket_sort":
    return sorted(symbols, key=int), n
  if name == "compute_sqrt":
    return list(format(math.isqrt(int("".join(symbols), 2)), "b").zfill(math.ceil(n / 2))), \
           math.ceil(n / 2)
  if name == "solve_equation":
    if "=" not in symbols:  # lengths 1 and 2: zeros, answer 0.
      assert n < 3 and set(symbols) == {"0"}
      return ["0"], 1
    left, right = "".join(symbols).split("=")
    assert symbols.count("x") == 1 and "*" not in left
    solutions = [d for d in "01234" if python_value(left.replace("x", d)) == int(right)]
    assert len(solutions) == 1, symbols
    return solutions, 1
  if name == "missing_duplicate_string":
    if n == 1:
      assert symbols == ["1"]
      return ["1"], 1
    body = symbols[:-1] if n % 2 else symbols
    assert symbols[n - n % 2:] == ["#"] * (n % 2) and "#" not in body and body.count("_") == 1
    half, hole = n // 2, body.index("_")
    assert [a for a, b in zip(body[:half], body[half:]) if "_" not in (a, b)] == \
           [b for a, b in zip(body[:half], body[half:]) if "_" not in (a, b)]
    return [body[hole + half] if hole < half else body[hole - half]], 1
  if name == "stack_manipulation":
    num_bits = next((i for i, s in enumerate(symbols) if s not in ("0", "1")), n)
    stack = symbols[:num_bits]
    for action in symbols[num_bits:]:
      stack = stack[:-1] if action == "POP" else stack + [{"PUSH0": "0", "PUSH1": "1"}[action]]
    return termination_output(stack[::-1], n + 1)
  if name in ("binary_addition", "binary_multiplication"):
    return solve_binary(symbols, name == "binary_addition")
  raise AssertionError(name)


def bracket_depth(symbols):
  depth = max_depth = 0
  for s in symbols:
    depth += (s == "(") - (s == ")")
    assert depth >= 0
    max_depth = max(max_depth, depth)
  assert depth == 0
  return max_depth


def check_chomsky_example(task, e):
  """Layout, targets, masks and depth of one example against `solve`."""
  query = [i for i, s in enumerate(e["inputs"]) if s == "?"]
  n = len(e["inputs"]) - len(query)
  symbols = e["inputs"][:n]
  assert query == list(range(n, len(e["inputs"]))) and n == task.input_length(e["length"])
  outputs, scored = solve(task.name, symbols)
  assert len(outputs) == len(query) == task.output_length(n)
  assert e["targets"] == ["<pad>"] * n + outputs, (symbols, e["targets"])
  assert list(e["mask"]) == [0.0] * n + [1.0] * scored + [0.0] * (len(outputs) - scored)
  assert list(e["loss_mask"]) == [0.0] * n + [1.0] * len(outputs)  # their loss: every output.
  assert e["depth"] == bracket_depth(symbols)


@pytest.mark.parametrize("name", CHOMSKY)
def test_chomsky_examples_match_an_independent_solver(name):
  task = make_task(name)
  assert not task.causal and task.pad_id == 0 and task.vocab[0] == "<pad>"
  for split, num in (("train", 500), ("test_length", 40), ("test_depth", 240)):
    if split not in task.split_names:
      continue
    spec = task.split(split)
    depths = collections.Counter()
    for e in examples_of(task, split, num):
      check_chomsky_example(task, e)
      assert spec.min_length <= e["length"] <= spec.max_length
      if task.has_depth:
        assert spec.min_depth <= e["depth"] <= spec.max_depth
      depths[e["depth"]] += 1
    if task.has_depth:  # every allowed depth occurs.
      assert sorted(depths) == list(spec.depths)
  for length in (1, 2, 3, 4, 5, 6, 7):  # the short lengths many originals treat apart.
    for e in examples_of(task, "train", 30, length=length):
      assert e["length"] == length
      check_chomsky_example(task, e)


@pytest.mark.parametrize("name", CHOMSKY)
def test_chomsky_answers_are_not_degenerate(name):
  task = make_task(name)
  answers = collections.Counter(" ".join(e["targets"][len(e["targets"]) - task.output_length(
      task.input_length(e["length"])):]) for e in examples_of(task, "train", 400))
  assert len(answers) >= 2 and max(answers.values()) < 0.7 * 400


# Sampling statistics against `chomsky_reference` (their samplers): per example,
# numeric features (shares of each label and symbol, counts) and indicators
# (the whole example at short lengths, where a hole or separator sits, ...).


def features(name, e):
  """{feature: value} of one example in their id space."""
  inputs, outputs, scored = e["input"], e["output"], e["scored"]
  labels = [o for o, s in zip(outputs, scored) if s]
  f = collections.defaultdict(float, inputs=len(inputs), scored=len(labels))
  f.update({f"label {c}": k / len(labels) for c, k in collections.Counter(labels).items()})
  f.update({f"symbol {c}": k / len(inputs) for c, k in collections.Counter(inputs).items()})
  f[f"first label {labels[0]}"] = 1
  if e["length"] <= 3:
    f[f"example {inputs} {outputs} {scored}"] = 1
  marker = {"solve_equation": 9, "missing_duplicate_string": 2, "binary_addition": 2,
            "binary_multiplication": 2}.get(name)  # x, the hole, `+`, `*`
  if marker in inputs:
    f[f"marker at {inputs.index(marker)}"] = 1
  brackets = {"modular_arithmetic_brackets": (8, 9), "solve_equation": (7, 8)}.get(name)
  if brackets:
    symbols = [{brackets[0]: "(", brackets[1]: ")", 6: "-"}.get(i, "d") for i in inputs]
    f["depth"] = bracket_depth(symbols)
    if len(symbols) >= 5 + 2 * (name == "solve_equation"):  # `(L op R)`: how long L is.
      f[f"left operand {operand_length(symbols, 1)}"] = 1
  if name == "solve_equation" and 9 in inputs:  # x follows how many non-digits
    x = inputs.index(9)
    f["run before x"] = x - max((i for i in range(x) if inputs[i] < 5), default=-1) - 1
  if name == "stack_manipulation":
    f[f"actions {sum(i >= 2 for i in inputs)}"] = 1
  if name == "compute_sqrt":
    f["value"] = int("".join(map(str, inputs)), 2) / 2 ** len(inputs)
  return f


def operand_length(symbols, start):
  """Length of the operand at `start` of a bracketed expression: `d`, `-d` or `( .. )`."""
  if symbols[start] != "(":
    return 1 + (symbols[start] == "-")
  depth = 0
  for end in range(start, len(symbols)):
    depth += (symbols[end] == "(") - (symbols[end] == ")")
    if depth == 0:
      return end + 1 - start
  raise AssertionError(symbols)


def assert_same_distribution(ours, theirs, where):
  """Every feature's mean agrees within 4.5 standard errors; an indicator's
  counts a, b within (|a - b| - 1) / sqrt(a + b) < 4.5 (both samples of size N)."""
  assert len(ours) == len(theirs)
  for key in set().union(*ours, *theirs):
    a = np.array([f.get(key, 0) for f in ours], np.float64)
    b = np.array([f.get(key, 0) for f in theirs], np.float64)
    if not a.any() and not b.any():
      continue
    if np.isin(a, (0, 1)).all() and np.isin(b, (0, 1)).all():
      z = (abs(a.sum() - b.sum()) - 1) / np.sqrt(a.sum() + b.sum())
    else:
      spread = np.sqrt((a.var() + b.var()) / len(a))
      z = abs(a.mean() - b.mean()) / spread if spread else (np.inf if a.mean() != b.mean() else 0)
    assert z < 4.5, f"{where}: {key!r}: ours {a.mean():.4f}, theirs {b.mean():.4f}"


def their_examples(name, lengths, seed):
  rs, py = np.random.RandomState(seed), random.Random(seed)
  return [chomsky_reference.sample(name, rs, py, int(n)) for n in lengths]


def our_examples(task, split, num, length=None):
  """The first `num` examples of `split` in their id space."""
  batch = task.batch(split, np.arange(num), length=length)
  return [task.che_example({k: v[row] for k, v in batch.items()}) for row in range(num)]


@pytest.mark.parametrize("name", ORIGINAL)
def test_chomsky_sampling_matches_the_original(name):
  task = make_task(name)
  for length, num in ((1, 300), (2, 500), (3, 500), (4, 500), (5, 500), (6, 500), (9, 500),
                      (40, 500), (101, 150)):
    split = "train" if length <= 40 else "test_length"
    ours = our_examples(task, split, num, length)
    assert all(e["length"] == length for e in ours)
    theirs = their_examples(name, [length] * num, seed=length)
    assert_same_distribution([features(name, e) for e in ours],
                             [features(name, e) for e in theirs], f"length {length}")
  # The splits: lengths uniform in 1..40 and 41..500, as their curriculum and evaluation.
  for split, num, low, high in (("train", 800, 1, 40), ("test_length", 100, 41, 500)):
    ours = our_examples(task, split, num)
    theirs = their_examples(name, np.random.RandomState(1).randint(low, high + 1, num), seed=2)
    with_length = lambda e: {**features(name, e), "length": e["length"],
                             "odd length": e["length"] % 2, f"length /10 = {e['length'] // 10}": 1}
    assert_same_distribution([with_length(e) for e in ours], [with_length(e) for e in theirs],
                             split)

# ----------------------------------------------------------------------------
# Every task: lengths, disjointness, determinism.
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", tasks.TASK_NAMES)
def test_sequence_lengths_are_known_without_generating(name):
  task = tasks.get_task(tasks.default_task_config(name))
  for split in task.split_names:
    indices = np.arange(40) * 6
    batch = task.batch(split, indices)
    lengths = task.sequence_lengths(split, indices)
    np.testing.assert_array_equal(batch["valid"].sum(1), lengths)
    assert batch["inputs"].shape[1] == lengths.max() <= task.max_sequence_length(split)


@pytest.mark.parametrize("name", tasks.TASK_NAMES)
def test_test_splits_share_no_example_with_training(name):
  task = tasks.get_task(tasks.default_task_config(name))
  # Most Chomsky tasks' test inputs are longer than any training input: fewer suffice.
  num = 10_000 if "test_depth" in task.split_names else 2000
  seen = {tuple(row[row > 0]) for row in task.batch("train", np.arange(num))["inputs"]}
  for split in task.split_names:
    if split.startswith("test"):
      inputs = task.batch(split, np.arange(120))["inputs"]
      assert not {tuple(row[row > 0]) for row in inputs} & seen, split


@pytest.mark.parametrize("name", tasks.TASK_NAMES)
def test_examples_depend_only_on_seed_split_and_index(name):
  task = tasks.get_task(tasks.default_task_config(name))
  again = tasks.get_task(tasks.default_task_config(name))
  split = task.split_names[-1]
  together = task.batch(split, [11, 3, 249, 7])
  for row, index in enumerate([11, 3, 249, 7]):
    alone = again.example(split, index)
    n = alone["length"] if task.causal else len(alone["inputs"])
    np.testing.assert_array_equal(together["inputs"][row, :n], alone["inputs"])
    np.testing.assert_array_equal(together["targets"][row, :n], alone["targets"])
    np.testing.assert_array_equal(together["mask"][row, :n], alone["mask"])
    assert together["depth"][row] == alone["depth"]
  # Other splits and other seeds give other examples.
  other_seed = make_task(name, seed=1)
  first = [tuple(task.example("train", i)["inputs"]) for i in range(20)]
  assert first != [tuple(other_seed.example("train", i)["inputs"]) for i in range(20)]
  assert first != [tuple(task.example("valid", i)["inputs"]) for i in range(20)]


# ----------------------------------------------------------------------------
# The published Dyck files.
# ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def published_heads(tmp_path_factory, published_dir):
  """The first 200 lines of each published file."""
  folder = tmp_path_factory.mktemp("dyck")
  heads = {}
  for name in PUBLISHED:
    with open(os.path.join(published_dir, name)) as f:
      lines = [next(f) for _ in range(200 if name != "k8_m20.test" else 40)]
    heads[name] = folder / name
    heads[name].write_text("".join(lines))
  return heads


def test_external_loader_reads_published_files(published_heads):
  vocab = dyck.bracket_vocab(8)
  for name, path in published_heads.items():
    (lo_len, hi_len), (lo_depth, hi_depth) = PUBLISHED[name]
    lines = path.read_text().splitlines()
    examples = external.load_dyck_file(str(path))
    assert len(examples) == len(lines)
    for line, e in zip(lines, examples):
      tokens = [vocab[i] for i in e["inputs"]]
      assert " ".join(tokens) == line
      targets = [vocab[i] for i in e["targets"]]
      assert check_dyck(tokens, targets, e["mask"]) == e["depth"]
      assert lo_len <= e["length"] == len(tokens) <= hi_len
      assert lo_depth <= e["depth"] <= hi_depth


def test_external_batches_cover_each_line_once_sorted_by_length(published_heads):
  path = str(published_heads["k8_m5.test"])
  examples = external.load_dyck_file(path)
  seen, widths = [], []
  for batch in external.dyck_file_batches(path, batch_size=64, buckets=(256, 512)):
    assert batch["inputs"].shape[0] == 64 and batch["inputs"].shape[1] in (256, 512)
    for row in np.flatnonzero(batch["index"] >= 0):
      e = examples[batch["index"][row]]
      np.testing.assert_array_equal(batch["inputs"][row, : e["length"]], e["inputs"])
      np.testing.assert_array_equal(batch["targets"][row, : e["length"]], e["targets"])
      assert not batch["valid"][row, e["length"]:].any()
      seen.append(int(batch["index"][row]))
      widths.append(e["length"])
    padding = batch["index"] < 0
    assert not batch["valid"][padding].any() and not batch["mask"][padding].any()
  assert sorted(seen) == list(range(len(examples))) and widths == sorted(widths)


def test_external_batches_of_a_files_first_lines(published_heads):
  path = str(published_heads["k8_m5.test"])
  seen = [int(i) for batch in external.dyck_file_batches(path, batch_size=4, num_examples=5)
          for i in batch["index"] if i >= 0]
  assert sorted(seen) == list(range(5))  # the first lines in file order, then sorted by length
  with pytest.raises(ValueError, match="num_examples=0: must be >= 1"):
    next(external.dyck_file_batches(path, batch_size=4, num_examples=0))


def test_generated_strings_read_back_with_the_same_labels(tmp_path):
  task = make_task("dyck")
  path = tmp_path / "generated.txt"
  examples = [task.example("test_depth", i) for i in range(50)]
  path.write_text("".join(task.format_example(e)[0] + "\n" for e in examples))
  for e, loaded in zip(examples, external.load_dyck_file(str(path), k=task.k)):
    for key in ("inputs", "targets", "mask"):
      np.testing.assert_array_equal(loaded[key], e[key])
    assert (loaded["length"], loaded["depth"]) == (e["length"], e["depth"])


@pytest.mark.parametrize("line,why", [
    ("(a a) (b b)", "does not end with END"),
    ("(a a) END (b b) END", "not a bracket"),
    ("(a b) END", "closes no matching bracket"),
    ("a) END", "closes no matching bracket"),
    ("(a (b b) END", "left open"),
    ("(a  a) END", "not a bracket"),
    ("(z z) END", "not a bracket"),
    ("END", "empty string"),
    ("", "does not end with END"),
])
def test_external_loader_names_file_and_line_of_malformed_input(tmp_path, line, why):
  path = tmp_path / "bad.txt"
  path.write_text(f"(a a) END\n(c (b b) c) END\n{line}\n")
  with pytest.raises(ValueError, match=f"^{path}:3: .*{why}"):
    external.load_dyck_file(str(path))


# ----------------------------------------------------------------------------
# Bad configs; the command line.
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("name,key,value,match", [
    ("dyck", "train.max_length", 2, r"task.train.max_length=2: empty range"),
    ("dyck", "valid.min_depth", 6, r"task.valid.max_depth=5: empty range"),
    ("dyck", "test_length.min_length", 99, r"task.test_length.min_length=99: must exceed"),
    ("dyck", "test_depth.min_depth", 5, r"task.test_depth.min_depth=5: must exceed"),
    ("dyck", "test_depth.max_length", 15, r"task.test_depth.max_length=15: no string of depth 10"),
    ("dyck", "k", 0, r"task.k=0: must be an integer >= 1"),
    ("dyck", "train.size", 0, r"task.train.size=0"),
    ("dyck", "seed", -1, r"task.seed=-1"),
    ("dyck", "color", 1, r"task.color: not a key of this task"),
    ("dyck", "train.max_lenght", 1, r"task.train.max_lenght: not a key of this task"),
    ("parity_check", "valid.min_length", 0, r"task.valid.min_length=0"),
    ("parity_check", "test_length.min_length", 30, r"task.test_length.min_length=30: must exceed"),
    ("modular_arithmetic_brackets_depth", "test_depth.min_depth", 3,
     r"task.test_depth.min_depth=3: must exceed"),
    ("modular_arithmetic_brackets_depth", "test_depth.max_length", 8,
     r"task.test_depth.max_length=8: no input of this task fits"),
    ("modular_arithmetic", "train.max_length", 41,  # length 42 has 41 symbols, as 41 does.
     r"task.test_length.min_length=41: must exceed"),
])
def test_bad_configs_raise_one_clear_error(name, key, value, match):
  with pytest.raises(ValueError, match=match):
    make_task(name, **{key: value})


def test_unknown_task_and_split():
  with pytest.raises(ValueError, match=r"task name='dyke': unknown"):
    tasks.default_task_config("dyke")
  config = tasks.default_task_config("dyck")
  config.name = "dyke"
  with pytest.raises(ValueError, match=r"task.name='dyke': unknown"):
    tasks.get_task(config)
  task = make_task("parity_check")
  with pytest.raises(ValueError, match=r"split='test_depth'"):
    task.example("test_depth", 0)
  with pytest.raises(ValueError, match=r"index=512: outside split 'valid'"):
    task.example("valid", 512)


def test_depth_bounds_follow_m_and_d_train_unless_unlinked():
  config = tasks.default_task_config("dyck")
  config.m = 3
  task = tasks.get_task(config)
  assert [task.split(s).max_depth for s in task.split_names] == [3, 3, 3, 6]
  assert task.split("test_depth").min_depth == 4
  config.train = ml_collections.ConfigDict(config.train.to_dict())  # no longer linked to m.
  config.train.max_depth = 4
  with pytest.raises(ValueError, match=r"task.train.max_depth=4: must be <= m=3"):
    tasks.get_task(config)
  config = tasks.default_task_config("modular_arithmetic_brackets_depth")
  config.test_length = ml_collections.ConfigDict(config.test_length.to_dict())
  config.test_length.max_depth = 4
  with pytest.raises(ValueError, match=r"task.test_length.max_depth=4: must be <= d_train=3"):
    tasks.get_task(config)


def test_cli_prints_examples(tmp_path):
  config_file = tmp_path / "config.py"
  config_file.write_text(textwrap.dedent("""
      import ml_collections
      from bifocal_jax import tasks

      def get_config():
        config = ml_collections.ConfigDict()
        config.task = tasks.default_task_config("dyck")
        config.task.test_depth.max_length = 41
        return config
  """))
  result = subprocess.run(
      [sys.executable, "-m", "bifocal_jax.tasks", "--config", str(config_file),
       "--split", "test_depth", "--num", "4", "--config.task.seed=2"],
      capture_output=True, text=True, check=True, timeout=120)
  lines = result.stdout.splitlines()
  config = tasks.default_task_config("dyck")
  config.test_depth.max_length = 41
  config.seed = 2
  task = tasks.get_task(config)
  assert lines == ["\t".join(task.format_example(task.example("test_depth", i))) for i in range(4)]
  for line in lines:
    source, target = line.split("\t")
    assert len(source.split(" ")) == len(target.split(" ")) <= 41
    external.parse_line(source, 8, "cli")  # the published format.


def test_cli_prints_chomsky_examples_in_their_id_space(tmp_path):
  # `--config` names a config of the package, from any folder.
  result = subprocess.run(
      [sys.executable, "-m", "bifocal_jax.tasks", "--config", "stack_manipulation", "--split",
       "test_length", "--start", "5", "--num", "3", "--length", "45", "--format", "che"],
      capture_output=True, text=True, check=True, timeout=120, cwd=tmp_path,
      env=dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
  lines = [json.loads(line) for line in result.stdout.splitlines()]
  task = make_task("stack_manipulation")
  assert lines == [task.che_example(task.example("test_length", i, length=45)) for i in range(5, 8)]
  for e in lines:  # their ids: bits 0 1, POP 2, PUSH0 3, PUSH1 4; outputs 0 1, END 2.
    assert e["length"] == len(e["input"]) == 45 and len(e["output"]) == len(e["scored"]) == 46
    outputs, scored = solve(task.name, [task.input_symbols[i] for i in e["input"]])
    assert e["output"] == [task.output_symbols.index(s) for s in outputs]
    assert e["scored"] == [1] * scored + [0] * (46 - scored) and e["output"][scored - 1] == 2


def test_text_format_marks_unscored_targets_apart_from_every_symbol():
  for name in tasks.TASK_NAMES:
    assert base.UNSCORED not in make_task(name).vocab
  task = make_task("stack_manipulation")
  e = task.example("train", 0, length=6)
  source, target = task.format_example(e)
  assert len(source.split(" ")) == 6 and len(target.split(" ")) == 7
  assert sum(t != base.UNSCORED for t in target.split(" ")) == e["mask"].sum()
  task = make_task("missing_duplicate_string")
  source, target = task.format_example(task.example("train", 0, length=7))
  assert source.count("_") == 1 and source.endswith(" #") and target in ("0", "1")

  class DotParity(tasks.chomsky.regular.ParityCheck):
    input_symbols = (".", "1")

  with pytest.raises(ValueError, match="marks unscored targets"):
    DotParity(tasks.default_task_config("parity_check"))


def test_examples_at_a_given_length_and_past_the_split_size():
  task = make_task("parity_check")
  batch = task.batch("test_length", np.arange(8), length=41)
  assert (batch["length"] == 41).all() and (batch["valid"].sum(1) == 42).all()
  np.testing.assert_array_equal(task.batch("test_length", [3], length=41)["inputs"][0],
                                batch["inputs"][3])
  # One stream per length: the examples at 42 do not extend those at 41.
  longer = task.batch("test_length", np.arange(8), length=42)["inputs"][:, :41]
  assert (longer != batch["inputs"][:, :41]).any(1).all()
  with pytest.raises(ValueError, match=r"length=40: outside split 'test_length' \(lengths 41..500\)"):
    task.batch("test_length", [0], length=40)
  with pytest.raises(ValueError, match="task dyck draws no examples at a given length"):
    make_task("dyck").batch("train", [0], length=9)
  with pytest.raises(ValueError, match=r"length=12: too short for depth 6 of split 'test_depth'"):
    make_task("modular_arithmetic_brackets_depth").batch("test_depth", [0], length=12)
  far = task.batch("valid", [10**12], unbounded=True)  # an endless stream of the split's examples.
  assert far["index"][0] == 10**12 and 1 <= far["length"][0] <= 40
  with pytest.raises(ValueError, match="index=1000000000000: outside split 'valid' of size 512"):
    task.batch("valid", [10**12])


def test_modular_arithmetic_brackets_is_their_fully_bracketed_language():
  # Their trees: brackets half the symbols; 0 the answer of ~27% of training and
  # ~31% of test examples (multiplication by 0), and deeper when longer.
  task = make_task("modular_arithmetic_brackets")
  train = examples_of(task, "train", 1500)
  symbols = [s for e in train for s in e["inputs"] if s != "?"]
  assert 0.47 < (symbols.count("(") + symbols.count(")")) / len(symbols) < 0.53
  assert 0.24 < np.mean([e["targets"][-1] == "0" for e in train]) < 0.31
  test = examples_of(task, "test_length", 150)
  assert 9.5 < np.mean([e["depth"] for e in test]) < 12.5
  # Our variant keeps test_length at training depths (<= 3).
  variant = make_task("modular_arithmetic_brackets_depth")
  assert max(e["depth"] for e in examples_of(variant, "test_length", 100)) <= 3
