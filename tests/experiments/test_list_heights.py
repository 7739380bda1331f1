"""ListOps answers by list height and level: labels of hand-written and
generated expressions, and a run's counts against the evaluation's own."""

import json

import helpers
import numpy as np
import pytest

from bifocal_jax import tasks
from bifocal_jax.evaluation import probe
from experiments.extrapolation import list_heights
from experiments.extrapolation import runs as extrapolation_runs

def listops_depth():
  return tasks.get_task(tasks.default_task_config("listops_depth"))


def labels_of(task, *texts):
  width = max(len(t.split()) for t in texts)
  ids = np.zeros((len(texts), width), np.int64)
  for row, text in enumerate(texts):
    ids[row, :len(text.split())] = [task.token_ids[t] for t in text.split()]
  return list_heights.close_labels(ids, ids > 0, probe.brackets(task))


def closes(labels, row):
  at = labels["height"][row] >= 0
  return list(zip(*(labels[k][row][at].tolist() for k in ("height", "level", "sibling"))))


def parsed_closes(tokens):
  """(height, level, sibling) at each `]`, left to right, by recursive descent
  over the tokens: the test's own reading of the definitions, without arrays."""
  out, at = [], 0

  def parse(level, sibling):  # tokens[at] opens a list; returns its height
    nonlocal at
    at += 1
    highest = 0  # the highest list closed so far inside this one
    while tokens[at] != "]":
      if tokens[at].startswith("["):
        highest = max(highest, parse(level + 1, highest))
      else:
        at += 1
    at += 1
    out.append((highest + 1, level, sibling))
    return highest + 1

  parse(0, -1)
  return out


def test_heights_levels_and_siblings_of_written_expressions():
  task = listops_depth()
  labels = labels_of(task, "[MAX 2 [MIN 4 [SM 1 2 ] ] 0 ]",
                     "[MIN [MAX 1 [MIN 2 3 ] ] [SM 4 5 ] 7 ]", "[MED 1 2 ]")
  # (height, level, sibling) at each `]`, left to right
  assert closes(labels, 0) == [(1, 2, 0), (2, 1, 0), (3, 0, -1)]
  # a sibling list starts from nothing: SM's height is its own, not MAX's;
  # SM comes after MAX (height 2) inside the same list
  assert closes(labels, 1) == [(1, 2, 0), (2, 1, 0), (1, 1, 2), (3, 0, -1)]
  assert closes(labels, 2) == [(1, 0, -1)]
  assert (labels["height"][2, 4:] == -1).all()  # padding


def test_generated_expressions_agree_with_the_task_and_the_probes_stack():
  task = listops_depth()
  batch = task.batch("test_depth", np.arange(48), task.max_sequence_length("test_depth"))
  labels = list_heights.close_labels(batch["inputs"], batch["valid"], probe.brackets(task))
  at_close = labels["height"] >= 0
  np.testing.assert_array_equal(at_close, batch["mask"] > 0)  # every `]` is scored
  # the outermost list is the whole expression: its height is the expression's depth
  outermost = labels["level"] == 0
  assert (outermost.sum(1) == 1).all()
  np.testing.assert_array_equal(labels["height"][outermost], batch["depth"])
  # a list's level: the lists still open after its `]`, counted without a stack
  is_close = batch["inputs"] == task.token_ids["]"]
  opened = np.cumsum(np.isin(batch["inputs"], probe.brackets(task).open_ids), axis=1)
  np.testing.assert_array_equal(labels["level"][at_close],
                                (opened - np.cumsum(is_close, axis=1))[at_close])
  # a list is higher than every list inside it, and at most its level below the top
  assert (labels["height"][at_close] + labels["level"][at_close] <= np.repeat(
      batch["depth"], at_close.sum(1))).all()
  # all three labels as a recursive descent over the tokens reads them
  for row in range(len(batch["inputs"])):
    tokens = [task.vocab[i] for i in batch["inputs"][row][batch["valid"][row]]]
    assert closes(labels, row) == parsed_closes(tokens)
  # siblings as high as d_train, which no training string has (its lists under the
  # outermost are at most d_train - 1 high), occur
  assert (labels["sibling"][at_close] >= task.config.d_train).any()


def test_a_list_closed_before_it_opened_is_an_error():
  task = listops_depth()
  with pytest.raises(ValueError, match="string 0 closes a bracket at position 1"):
    labels_of(task, "3 ] [MIN 1 2 ]")


def test_tables_average_each_runs_accuracy():
  runs = {
      "a0": dict(kind="a", counts={"1,1,0": dict(correct=1, total=2),
                                   "1,1,3": dict(correct=0, total=2),
                                   "2,0,-1": dict(correct=1, total=1)}),
      "a1": dict(kind="a", counts={"1,1,0": dict(correct=2, total=2),
                                   "1,1,3": dict(correct=1, total=2)}),
  }
  table = list_heights.tables(runs, d_train=2)["a"]
  assert table["by_height"][1]["mean"] == pytest.approx((1 / 4 + 3 / 4) / 2)
  assert table["by_height"][2]["n"] == 1 and table["by_height"][2]["mean"] == 1.0
  assert table["trained_heights_by_sibling"][1][0]["mean"] == pytest.approx((1 / 2 + 1) / 2)
  assert table["trained_heights_by_sibling"][1][3]["mean"] == pytest.approx((0 + 1 / 2) / 2)
  assert -1 not in table["trained_heights_by_sibling"][1]  # the outermost list has no sibling
  assert table["trained_heights_by_sibling"][2][0] is None  # no such list in any run
  assert table["trained_heights_by_level"][2][0]["mean"] == 1.0


def test_counts_of_a_run_are_the_evaluations():
  """Every `]` counted once, and as many correct as the evaluation scores."""
  run = helpers.untrained_run("listops_depth.py")
  counts = list_heights.score_run(run, "test_depth", num_examples=32)
  split = run.evaluator.split(run.params, "test_depth", num_examples=32)
  assert sum(v["total"] for v in counts.values()) == split["tokens"]
  assert sum(v["correct"] for v in counts.values()) == round(
      split["token_accuracy"] * split["tokens"])
  heights = {int(k.split(",")[0]) for k in counts}
  assert max(heights) > run.config.task.d_train  # the split holds lists higher than trained


def test_other_tasks_are_refused():
  run = helpers.untrained_run("listops.py")
  with pytest.raises(ValueError, match="task 'listops' scores no list but the last"):
    list_heights.score_run(run, "test_depth", num_examples=8)


@pytest.mark.slow
def test_the_benchmark_reports_a_trained_run_and_skips_one_in_flight(tmp_path):
  config, workdir, in_flight = helpers.finished_and_in_flight_runs(tmp_path,
                                                                   "listops_depth.py")
  out = tmp_path / "heights.json"
  proc = helpers.run_experiment("list_heights", f"--workdirs={tmp_path}/run*", "--examples=16",
                               f"--out={out}")
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert f"{in_flight}: skipped, its last checkpoint is step 5 of 10" in proc.stderr
  result = json.loads(out.read_text())
  [run] = result["runs"].values()
  assert run["step"] == 10 and sum(v["total"] for v in run["counts"].values()) > 0
  table = result["by_kind"][extrapolation_runs.kind_name(config.position)]
  assert table["by_height"]["1"]["n"] == 1  # one run: its own accuracy, no interval
  trained = {str(h) for h in range(1, config.task.d_train + 1)}
  assert set(table["trained_heights_by_level"]) == set(table["trained_heights_by_sibling"]) == trained
  assert "by their sibling" in proc.stdout
  assert "accuracy at `]` by the closed list's height" in proc.stdout
  # without the checkpoints: the same tables from the JSON, and the figure
  png = tmp_path / "heights.png"
  again = helpers.run_experiment("list_heights", f"--from_json={out}", f"--plot={png}")
  assert again.returncode == 0, again.stderr[-2000:]
  tables_of = lambda stdout: stdout.split("wrote ")[0].rstrip()
  assert tables_of(again.stdout) == tables_of(proc.stdout)
  assert png.stat().st_size > 0
  result["runs"][workdir]["counts"] = {"1,2": dict(correct=1, total=1)}  # (height, level) only
  bad = tmp_path / "old.json"
  bad.write_text(json.dumps(result))
  refused = helpers.run_experiment("list_heights", f"--from_json={bad}")
  assert refused.returncode == 2 and "Traceback" not in refused.stderr
  assert refused.stderr.strip().splitlines()[-1].startswith(f"error: --from_json='{bad}': not a")
