"""Task generators against independent checkers; ranges, disjointness, determinism,
the published Dyck files, the CLI, and bad input."""

import collections
import os
import random
import subprocess
import sys
import textwrap

import ml_collections
import numpy as np
import pytest

from bifocal_jax import tasks
from bifocal_jax.tasks import dyck, external

EXTERNAL = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "external", "dyck-yao2021")
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


def examples_of(task, split, num, start=0):
  """Examples [start, start + num) of a split (generated in one batch), unpadded."""
  batch = task.batch(split, np.arange(start, start + num))
  out = []
  for row in range(num):
    n = int(batch["valid"][row].sum())
    assert batch["valid"][row, :n].all() and not batch["valid"][row, n:].any()
    assert (batch["inputs"][row, n:] == task.pad_id).all() and (batch["mask"][row, n:] == 0).all()
    out.append(dict(inputs=task.decode(batch["inputs"][row, :n]),
                    targets=task.decode(batch["targets"][row, :n]),
                    mask=batch["mask"][row, :n], length=int(batch["length"][row]),
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
  assert len(target.split(" ")) == e["length"] and target.endswith("_")


# ----------------------------------------------------------------------------
# Chomsky-hierarchy tasks.
# ----------------------------------------------------------------------------


def expected_output(name, symbols):
  """Direct computation of each task's answer from its input symbols."""
  if name == "parity_check":
    return [str(symbols.count("1") % 2)]
  if name == "cycle_navigation":
    return [str(sum({"-": -1, "0": 0, "+": 1}[s] for s in symbols) % 5)]
  if name == "reverse_string":
    return symbols[::-1]
  if name == "odds_first":
    return ([s for i, s in enumerate(symbols, 1) if i % 2]
            + [s for i, s in enumerate(symbols, 1) if not i % 2])
  if name == "missing_duplicate_string":
    half = len(symbols) // 2
    assert len(symbols) % 2 == 0 and symbols.count("_") == 1
    hole = symbols.index("_")
    other = hole + half if hole < half else hole - half
    assert [a for a, b in zip(symbols[:half], symbols[half:]) if "_" not in (a, b)] == \
           [b for a, b in zip(symbols[:half], symbols[half:]) if "_" not in (a, b)]
    return [symbols[other]]
  if name == "stack_manipulation":
    num_bits = next((i for i, s in enumerate(symbols) if s not in ("0", "1")), len(symbols))
    assert num_bits >= 1
    stack = symbols[:num_bits]
    for action in symbols[num_bits:]:
      if action == "POP":
        stack = stack[:-1]
      else:
        stack = stack + [{"PUSH0": "0", "PUSH1": "1"}[action]]
    return stack[::-1] + ["_"] * (len(symbols) + 1 - len(stack))
  if name == "modular_arithmetic_brackets":
    return [str(eval("".join(symbols), {"__builtins__": {}}) % 5)]  # pylint: disable=eval-used
  raise AssertionError(name)


def bracket_depth(symbols):
  depth = max_depth = 0
  for s in symbols:
    depth += (s == "(") - (s == ")")
    assert depth >= 0
    max_depth = max(max_depth, depth)
  assert depth == 0
  return max_depth


CHOMSKY = [n for n in tasks.TASK_NAMES if n != "dyck"]


@pytest.mark.parametrize("name", CHOMSKY)
def test_chomsky_outputs_match_direct_computation(name):
  task = tasks.get_task(tasks.default_task_config(name))
  assert not task.causal and task.pad_id == 0 and task.vocab[0] == "<pad>"
  for split, num in (("train", 1000), ("test_length", 100), ("test_depth", 240)):
    if split not in task.split_names:
      continue
    spec = task.split(split)
    depths = collections.Counter()
    for e in examples_of(task, split, num):
      n = e["length"]
      symbols, queries = e["inputs"][:n], e["inputs"][n:]
      assert "?" not in symbols and set(queries) == {"?"}
      assert len(queries) == task.output_length(n)
      assert list(e["mask"]) == [0.0] * n + [1.0] * len(queries)
      assert set(e["targets"][:n]) == {"<pad>"}
      assert e["targets"][n:] == expected_output(name, symbols), (symbols, e["targets"])
      assert spec.min_length <= n <= spec.max_length
      depth = bracket_depth(symbols)
      assert depth == e["depth"] and spec.min_depth <= depth <= spec.max_depth
      depths[depth] += 1
    if name == "modular_arithmetic_brackets":
      assert sorted(depths) == list(spec.depths)  # every allowed depth occurs.


@pytest.mark.parametrize("name", CHOMSKY)
def test_chomsky_answers_are_not_degenerate(name):
  task = tasks.get_task(tasks.default_task_config(name))
  answers = collections.Counter(" ".join(e["targets"][e["length"]:])
                                for e in examples_of(task, "train", 400))
  assert len(answers) >= 2 and max(answers.values()) < 0.7 * 400


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
  seen = {tuple(row[row > 0]) for row in task.batch("train", np.arange(10_000))["inputs"]}
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
def published_heads(tmp_path_factory):
  """The first 200 lines of each published file."""
  folder = tmp_path_factory.mktemp("dyck")
  heads = {}
  for name in PUBLISHED:
    with open(os.path.join(EXTERNAL, name)) as f:
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
    ("missing_duplicate_string", "train.max_length", 1, r"task.train.max_length=1: no input"),
    ("modular_arithmetic_brackets", "test_depth.min_depth", 3,
     r"task.test_depth.min_depth=3: must exceed"),
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
  config = tasks.default_task_config("modular_arithmetic_brackets")
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
