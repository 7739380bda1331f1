"""What a finished run leaves behind (experiments/extrapolation/run_summary.py):
a calibration's step budget, a run's summary and when it is complete, a
population's members' summaries, and results files that are malformed.
Workdirs are built by hand (no training)."""

import dataclasses
import json
import os
import shutil

import pytest

from extrapolation_helpers import POPULATIONS, PRESET, TASK, fake_workdir, table_rows
from fake_cluster import FakeCluster

from experiments.extrapolation import execute
from experiments.extrapolation import probe_report
from experiments.extrapolation import report as report_lib
from experiments.extrapolation import run_summary
from experiments.extrapolation import runs
from experiments.extrapolation import sweep as ex

def test_calibration_budget_is_the_first_evaluated_step_that_learned(tmp_path):
  run = PRESET.calibration_runs()[0]
  assert run.name == "odds_first/calibration/rope_3000steps/seed0"
  workdir = fake_workdir(run, str(tmp_path), steps=3000,
                         curve=[(250, 0.4), (500, 0.85), (750, 0.93), (1000, 0.89)])
  record = run_summary.calibration_record(TASK, workdir)
  assert record["budget"] == 750 and record["curve"][1] == [500, 0.85]
  workdir = fake_workdir(run, str(tmp_path / "b"), steps=3000, curve=[(250, 0.4), (3000, 0.7)])
  assert run_summary.calibration_record(TASK, workdir)["budget"] is None
  shutil.rmtree(os.path.join(workdir, "checkpoints"))
  assert run_summary.calibration_record(TASK, workdir) is None  # not finished


def test_a_task_without_a_just_fit_budget_reads_it_off_its_calibration(tmp_path):
  """`listops_depth` of the converged sweep: checkpoints at fixed steps, and
  its just-fit budget (which bounds convergence from below) from the curve."""
  task = ex.PRESETS["converged"].tasks[1]
  assert task.name == "listops_depth" and task.just_fit is None
  assert task.checkpoint_steps(8000) == (1000, 2000, 4000)
  assert task.checkpoint_steps(3000) == (1000, 2000)
  workdir = str(tmp_path / "calibration")
  os.makedirs(os.path.join(workdir, "checkpoints", "8000"))
  with open(os.path.join(workdir, "config.json"), "w") as f:
    json.dump({"steps": 8000}, f)
  curve = [(1000, 0.84), (1500, 0.86), (2000, 0.86), (3000, 0.90), (4000, 0.94),
           (6000, 0.955), (8000, 0.956)]
  with open(os.path.join(workdir, "metrics.jsonl"), "w") as f:
    for step, accuracy in curve:
      f.write(json.dumps({"step": step, "valid_token_accuracy": accuracy}) + "\n")
  record = run_summary.calibration_record(task, workdir, converged=0.002)
  # The plateau at 2,000 is not convergence: that is at least twice 3,000.
  assert record["just_fit"] == 3000 and record["budget"] == 8000
  assert "config=configs/listops_depth.py:minmax" in " ".join(
      ex.Run(task, "rope", 0).train_command("/o", 8000))


def test_convergence_budget_is_the_first_step_whose_last_quarter_gained_little():
  curve = [(250, 0.80), (500, 0.90), (750, 0.95), (1000, 0.96), (1500, 0.97), (2000, 0.975),
           (3000, 0.9765)]
  # 1000 gained 0.01 over 750 (the last evaluation <= 0.75 * 1000), 1500 0.01 over
  # 1000, 2000 0.005 over 1500, 3000 only 0.0015 over 2000.
  assert run_summary.convergence_budget(curve, 4000, 0.002) == 3000
  assert run_summary.convergence_budget(curve, 4000, 0.01) == 2000
  assert run_summary.convergence_budget(curve, 4000, 0.0001) == 4000  # never: the cap
  assert run_summary.convergence_budget([(250, 0.5), (500, 0.5), (1000, 0.6)], 4000, 0.002) == 500
  assert run_summary.convergence_budget([(250, 0.5), (500, 0.5), (1000, 0.6)], 4000, 0.002,
                               min_steps=1000) == 4000  # an early plateau is not convergence


def test_converged_calibration_records_its_criterion_and_the_just_fit_budget(tmp_path):
  task = ex.TaskSpec("odds_first", variant="tiny", max_steps=3000, just_fit=250)
  run = ex.Preset(tasks=(task,), kinds=("rope",), seeds=(0,)).calibration_runs()[0]
  workdir = fake_workdir(run, str(tmp_path), steps=3000,
                         curve=[(250, 0.8), (500, 0.9), (750, 0.95), (1000, 0.9505)])
  record = run_summary.calibration_record(task, workdir, converged=0.002)
  assert record["budget"] == 1000 and record["just_fit"] == 250
  assert "0.002" in record["criterion"] and "3000 steps" in record["criterion"]


def test_summary_carries_the_curve_at_steps_and_waits_for_every_checkpoint(tmp_path):
  out = str(tmp_path)
  task = ex.TaskSpec("odds_first", variant="tiny", at_multiples=(0.5, 1), just_fit=10,
                     overrides=(("checkpoint_every", 5),))
  run = ex.Run(task, "rope", 0)
  workdir = fake_workdir(run, out, steps=20, accuracy=0.9)
  assert run.checkpoint_steps(20) == (5, 10)
  assert run_summary.summary_of(run, out, 20, 1.0) is None  # no checkpoint evaluated yet
  def checkpoint_stages():
    return [c for stage, _, c in execute.stages(run, out, 20, evaluate=True)
            if stage == "eval" and any(a.startswith("--steps=") for a in c)]

  assert [[a for a in c if a.startswith("--steps=")] for c in checkpoint_stages()] == [
      ["--steps=5,10"]]  # one process for every pending checkpoint
  for step, accuracy in ((5, 0.6), (10, 0.8)):
    with open(runs.checkpoint_results_path(workdir, step), "w") as f:
      split = dict(token_accuracy=accuracy, sequence_accuracy=0.1, examples=16, by_length={},
                   by_depth={}, ci95=dict(token_accuracy=[accuracy - 0.05, accuracy + 0.05]))
      json.dump(dict(step=step, splits={n: split for n in task.split_names}), f)
    if step == 5:  # only the checkpoints still pending are evaluated
      assert [[a for a in c if a.startswith("--steps=")] for c in checkpoint_stages()] == [
          ["--steps=10"]]
  assert len(execute.stages(run, out, 20, evaluate=True)) == 1  # only the final evaluation left
  s = run_summary.summary_of(run, out, 20, 1.0)
  assert list(s["at_steps"]) == ["5", "10", "20"]
  assert s["at_steps"]["5"]["test_length"]["accuracy"] == 0.6
  assert s["at_steps"]["20"]["test_length"]["accuracy"] == 0.9
  assert "by_length" not in s["at_steps"]["10"]["valid"]


def test_summary_needs_the_final_step_and_every_split(tmp_path):
  out = str(tmp_path)
  run = PRESET.runs()[1]
  fake_workdir(run, out, splits=("valid",))
  assert run_summary.summary_of(run, out, 10, 1.0) is None
  fake_workdir(run, out, accuracy=0.75)
  s = run_summary.summary_of(run, out, 10, 12.0)
  assert (s["task"], s["kind"], s["arm"], s["seed"], s["steps"]) == (
      "odds_first", "bifocal_heads", "scratch", 0, 10)
  assert s["overrides"]["position.split"] == "heads" and s["final_train_loss"] == 0.25
  assert s["splits"]["test_length"]["accuracy"] == 0.75
  assert s["splits"]["test_length"]["ci95"] == [0.74, 0.76]


def test_a_randomized_runs_summary_says_whether_it_drew_per_layer(tmp_path):
  out = str(tmp_path)
  run = ex.Run(TASK, "rope", 0)
  workdir = fake_workdir(run, out)
  assert "draws_per_layer" not in run_summary.summary_of(run, out, 10, 1.0)  # no position in config.json
  for kind, value, expected in (("randomized_alibi", None, True), ("randomized_rope", None, True),
                                ("randomized_rope", False, False), ("alibi", None, None)):
    with open(os.path.join(workdir, "config.json"), "w") as f:
      json.dump({"steps": 10, "position": {"kind": kind, "draw_per_layer": value}}, f)
    assert run_summary.summary_of(run, out, 10, 1.0).get("draws_per_layer") == expected, (kind, value)
  # A config from before the key: nothing claimed (those runs drew once for all layers).
  assert run_summary.position_draws_per_layer({"kind": "randomized_alibi"}) is None
  assert run_summary.position_draws_per_layer({"kind": "rope+alibi", "draw_per_layer": None}) is None


def test_a_probed_task_probes_at_its_end_and_its_summary_waits_for_the_probe(tmp_path):
  out = str(tmp_path)
  task = ex.TaskSpec("dyck", variant="tiny", probe=True, at_multiples=(0.5,), just_fit=10,
                     overrides=(("checkpoint_every", 5),))
  run = ex.Run(task, "rope", 0)
  assert "--probe" in run.eval_command(out)
  assert "--probe" not in run.checkpoint_eval_command(out, (5,))
  assert "--probe" not in ex.Run(dataclasses.replace(task, probe=False), "rope", 0).eval_command(
      out)
  workdir = fake_workdir(run, out, steps=10)
  assert run_summary.summary_of(run, out, 10, 1.0) is None  # no checkpoint at 5, no probe
  with open(runs.checkpoint_results_path(workdir, 5), "w") as f:
    split = dict(token_accuracy=0.5, sequence_accuracy=0.1, examples=16, by_length={},
                 by_depth={}, ci95={})
    json.dump(dict(step=5, splits={n: split for n in task.split_names}), f)
  assert run_summary.summary_of(run, out, 10, 1.0) is None  # still no probe
  results_path = os.path.join(workdir, "eval", "results.json")
  with open(results_path) as f:
    results = json.load(f)
  layer = dict(accuracy=0.9, unseen_accuracy=0.1)
  results["probe"] = dict(
      layers=["embedding", "block 1"], fitted_max_depth=5,
      depth={"valid": [layer, layer], "test_depth": [layer, dict(layer, accuracy=0.4)]},
      attention=dict(by_eye={"test_depth": {"match_mass": {"geometric": 0.2}}},
                     uniform_mass={"test_depth": 0.05}, match_mass={"test_depth": [[0.2]]},
                     top_mass={"test_depth": [[0.3]]}, eyes=[["geometric"]]))
  with open(results_path, "w") as f:
    json.dump(results, f)
  s = run_summary.summary_of(run, out, 10, 1.0)
  assert s["probe"]["depth"]["test_depth"]["accuracy"] == [0.9, 0.4]
  assert s["probe"]["by_eye"]["test_depth"]["match_mass"] == {"geometric": 0.2}
  assert s["probe"]["eyes"] == [["geometric"]]  # which heads the masses are, for the pairing
  assert s["probe"]["top_mass"] == {"test_depth": [[0.3]]}
  table = probe_report.probe_table({("scratch", "rope"): {0: s}})
  assert "| rope (scratch) | 1 | 0.900 (n=1) | 0.400 (n=1) | 0.100 (n=1) | geometric 0.200 | 0.050 |" in (
      table)


def test_population_summaries_one_per_member_and_fixed_budgets(tmp_path):
  out, results = str(tmp_path / "out"), str(tmp_path / "results")
  sweep = ex.Sweep(POPULATIONS, out, results, log=lambda m: None)
  assert sweep.budget(TASK) == TASK.max_steps  # not calibrated: fixed
  assert len(sweep.pending()) == 8
  member = POPULATIONS.runs()[1]
  fake_workdir(member, out, steps=TASK.max_steps, accuracy=0.7)
  s = run_summary.summary_of(member, out, TASK.max_steps, 5.0)
  assert (s["arm"], s["group"], s["seed"]) == ("sensitivity", "rope_lr0.0003", 0)
  assert s["overrides"]["learning_rate"] == 3e-4
  markdown = report_lib.report(POPULATIONS, results)
  assert table_rows(markdown, "odds_first")[0][1:] == [str(TASK.max_steps)]


def test_malformed_results_files_are_named_and_left_as_they_are(tmp_path, monkeypatch):
  results = tmp_path / "results"
  summary = results / "odds_first" / "scratch" / "rope" / "seed0.json"
  summary.parent.mkdir(parents=True)
  summary.write_text('{"task": "odds_first", "arm"')  # cut off
  with pytest.raises(ValueError, match=f"{summary}: not readable as JSON"):
    run_summary.load_summaries(str(results))
  summary.write_text('{"task": "odds_first", "arm": "scratch"}')
  with pytest.raises(ValueError, match=f"{summary}: not a run summary \\(no group, seed, splits\\)"):
    run_summary.load_summaries(str(results))
  summary.write_text("[1, 2]")
  with pytest.raises(ValueError, match="a JSON list, not an object"):
    run_summary.load_summaries(str(results))
  # A malformed budgets file: calibration stops before any run, the file untouched.
  budgets = results / ex.BUDGETS_FILE
  budgets.write_text('{"odds_first": {"budget": 4')
  sweep = ex.Sweep(PRESET, str(tmp_path / "out"), str(results), log=lambda m: None)
  monkeypatch.setattr(execute, "execute", lambda *a, **k: pytest.fail("a run started"))
  with pytest.raises(ValueError, match=f"{budgets}: not readable as JSON"):
    sweep.calibrate(FakeCluster())
  with pytest.raises(ValueError, match=f"{budgets}: not readable as JSON"):
    sweep.pending()
  assert budgets.read_text() == '{"odds_first": {"budget": 4'
  assert ex.load_budgets(str(tmp_path / "none")) == {}  # absent: not calibrated yet
