"""Dyck answers by depth and by the pairs walked past: labels of written and
generated strings, a run's counts against the evaluation's own."""

import json

import helpers
import numpy as np
import pytest

from bifocal_jax import tasks
from bifocal_jax.evaluation import probe
from experiments.extrapolation import dyck_skips
from experiments.extrapolation import runs as extrapolation_runs

def dyck():
  return tasks.get_task(tasks.default_task_config("dyck"))


def walked(tokens):
  """(depth, skipped) after each token, by a list of open brackets' highest
  closed children: the test's own reading of the definitions."""
  out, stack = [], []
  for token in tokens:
    if token.startswith("("):
      stack.append(0)
    elif token.endswith(")"):
      height = stack.pop() + 1
      if stack:
        stack[-1] = max(stack[-1], height)
    out.append((len(stack), stack[-1] if stack else -1))
  return out


def test_labels_of_a_written_string():
  task = dyck()
  text = "(a (b b) (c (a a) c) a) END"
  ids = np.array([[task.token_ids[t] for t in text.split()]])
  labels = dyck_skips.position_labels(ids, ids > 0, probe.brackets(task))
  assert labels["depth"][0].tolist() == [1, 2, 1, 2, 3, 2, 1, 0, 0]
  # (b b) then (c (a a) c), of height 2, closed inside (a; nothing open after a)
  assert labels["skipped"][0].tolist() == [0, 0, 1, 0, 0, 1, 2, -1, -1]


def test_walk_back_of_a_written_string():
  task = dyck()
  text = "(a (b b) (c (a a) c) a) END"
  ids = np.array([[task.token_ids[t] for t in text.split()]])
  walk = dyck_skips.walk_back([dict(inputs=ids, valid=ids > 0)], probe.brackets(task))
  # scored positions 0-6; back to the innermost open bracket 0,0,2,0,0,2,6 tokens
  assert walk == {0: dict(positions=4, median=0.0, p90=0.0),
                  1: dict(positions=2, median=2.0, p90=2.0),
                  2: dict(positions=1, median=6.0, p90=6.0)}


def test_generated_strings_agree_with_a_walk_and_the_tasks_mask():
  task = dyck()
  batch = task.batch("test_depth", np.arange(40), task.max_sequence_length("test_depth"))
  labels = dyck_skips.position_labels(batch["inputs"], batch["valid"], probe.brackets(task))
  for row in range(len(batch["inputs"])):
    n = int(batch["valid"][row].sum())
    tokens = [task.vocab[i] for i in batch["inputs"][row][:n]]
    assert list(zip(labels["depth"][row][:n].tolist(),
                    labels["skipped"][row][:n].tolist())) == walked(tokens)
  # a position is scored exactly where a bracket is open
  np.testing.assert_array_equal(batch["mask"] > 0, labels["depth"] > 0)
  m = task.config.m
  assert (labels["skipped"] >= m).any()  # pairs higher than any inside a training string


def test_tables_average_each_runs_accuracy():
  runs = {
      "a0": dict(kind="a", counts={"1,0": dict(correct=1, total=1),
                                   "7,0": dict(correct=0, total=2),
                                   "2,6": dict(correct=1, total=4)}),
      "a1": dict(kind="a", counts={"1,0": dict(correct=1, total=1),
                                   "7,6": dict(correct=1, total=1)}),
  }
  table = dyck_skips.tables(runs, m=5)["a"]
  assert dyck_skips.tables({}, m=5) == {}
  assert table["by_depth"][7]["mean"] == pytest.approx((0 + 1) / 2)
  assert table["by_skipped"][6]["mean"] == pytest.approx((1 / 4 + 1) / 2)
  assert table["by_skipped"][0]["mean"] == pytest.approx((1 / 3 + 1) / 2)
  # at the trained depths only: run a0's depth-2 position, none of a1's
  assert table["by_skipped_at_trained_depths"][6]["n"] == 1
  assert table["by_skipped_at_trained_depths"][6]["mean"] == pytest.approx(1 / 4)


def test_counts_of_a_run_are_the_evaluations():
  """Every scored position counted once, as many correct as the evaluation's
  closing-bracket accuracy says."""
  run = helpers.untrained_run("dyck.py")
  counts = dyck_skips.score_run(run, "test_depth", num_examples=32)
  split = run.evaluator.split(run.params, "test_depth", num_examples=32)
  assert sum(v["total"] for v in counts.values()) == split["tokens"]
  assert sum(v["correct"] for v in counts.values()) == round(
      split["close_accuracy"] * split["tokens"])
  depths = {int(k.split(",")[0]) for k in counts}
  assert max(depths) > run.config.task.m and min(depths) == 1


def test_a_dyck_file_is_scored_by_its_first_lines(tmp_path):
  """A Dyck file, named as the evaluation names it, counts its first lines'
  scored positions; an unknown name is refused in one line."""
  run = helpers.untrained_run("dyck.py")
  path = tmp_path / "strings.test"
  path.write_text("(a (b b) a) END\n(c c) END\n(a (b (c c) b) a) END\n")
  counts = dyck_skips.score_run(run, str(path), num_examples=2)
  # the positions with a bracket open in the first two strings, by (depth, skipped)
  assert {k: v["total"] for k, v in counts.items()} == {"1,0": 2, "2,0": 1, "1,1": 1}
  with pytest.raises(ValueError, match="'k8_m7.test': neither a split of task dyck"):
    dyck_skips.score_run(run, "k8_m7.test", num_examples=2)


def test_other_tasks_are_refused():
  run = helpers.untrained_run("listops_depth.py")
  with pytest.raises(ValueError, match="task 'listops_depth' has no closing-bracket score"):
    dyck_skips.score_run(run, "test_depth", num_examples=8)


@pytest.mark.slow
def test_the_benchmark_reports_a_trained_run_and_skips_one_in_flight(tmp_path):
  config, _, in_flight = helpers.finished_and_in_flight_runs(tmp_path, "dyck.py")
  out = tmp_path / "skips.json"
  (tmp_path / "run.json").write_text("{}")  # a rerun's summary beside its workdir: not a run
  proc = helpers.run_experiment("dyck_skips", f"--workdirs={tmp_path}/run*,{in_flight}",
                               "--examples=16", f"--out={out}")
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert f"{in_flight}: skipped, its last checkpoint is step 5 of 10" in proc.stderr
  result = json.loads(out.read_text())
  [run] = result["runs"].values()
  assert run["step"] == 10 and result["m"] == config.task.m
  table = result["by_kind"][extrapolation_runs.kind_name(config.position)]
  assert set(table) == {"by_depth", "by_skipped", "by_skipped_at_trained_depths"}
  assert "closing-bracket accuracy by depth" in proc.stdout
  assert "positions at depth <= " in proc.stdout
  assert set(result["walk_back"]) == {"test_depth", "train"}
  assert result["walk_back"]["test_depth"]["0"]["median"] == 0.0  # at an open bracket itself
  assert "Tokens back to the innermost open bracket" in proc.stdout
  # runs scored one at a time, merged from their JSON: one table over both
  other = dict(result, runs={"elsewhere/seed9": dict(run, seed=9)})
  (tmp_path / "other.json").write_text(json.dumps(other))
  merged_out = tmp_path / "merged.json"
  merged = helpers.run_experiment("dyck_skips", f"--from_json={out},{tmp_path}/other.json",
                                 f"--out={merged_out}")
  assert merged.returncode == 0, merged.stderr[-2000:]
  both = json.loads(merged_out.read_text())
  assert len(both["runs"]) == 2 and both["split"] == result["split"]
  assert both["by_kind"][extrapolation_runs.kind_name(config.position)]["by_depth"]["1"]["n"] == 2
  assert both["walk_back"] == result["walk_back"]
  (tmp_path / "file.json").write_text(json.dumps(dict(other, split="k8_m20.test")))
  refused = helpers.run_experiment("dyck_skips", f"--from_json={out},{tmp_path}/file.json")
  assert refused.returncode == 2 and "Traceback" not in refused.stderr
  assert refused.stderr.strip().splitlines()[-1].startswith("error: --from_json=")
  assert "its split 'k8_m20.test' is not the first file's 'test_depth'" in refused.stderr
