"""The extrapolation benchmark: runs and arms, calibration, committed summaries, the report.

The bookkeeping and report tests build workdirs and summaries by hand (no
training); the end-to-end tests run the `smoke` preset once: calibration, the
sweep, then the report rebuilt from the summaries alone.
"""

import dataclasses
import datetime
import fcntl
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

import helpers

from experiments.extrapolation import leaderboard_report as leaderboard_lib
from experiments.extrapolation import presets as presets_lib
from experiments.extrapolation import probe_report
from experiments.extrapolation import report as report_lib
from experiments.extrapolation import run_summary
from experiments.extrapolation import runs as runs_lib
from experiments.extrapolation import sweep as ex
from experiments.extrapolation import training_time_report as training_time_lib

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TASK = ex.TaskSpec("odds_first", variant="tiny", overrides=(("batch_size", 8),))
PRESET = ex.Preset(tasks=(TASK,), kinds=("rope", "bifocal_heads"), seeds=(0, 1),
                   protocol_tasks=("odds_first",), sensitivity_task="odds_first",
                   sensitivity=(("bifocal_heads", "frozen_half",
                                 (("spectral.freeze_steps", runs_lib.OfSteps(0.5)),)),))


def test_runs_in_priority_order_with_their_arms():
  names = [r.name for r in PRESET.runs()]
  assert names == [
      "odds_first/scratch/rope/seed0", "odds_first/scratch/bifocal_heads/seed0",
      "odds_first/scratch/rope/seed1", "odds_first/scratch/bifocal_heads/seed1",
      "odds_first/surgery/bifocal_heads/seed0", "odds_first/continue/rope/seed0",
      "odds_first/surgery/bifocal_heads/seed1", "odds_first/continue/rope/seed1",
      "odds_first/sensitivity/bifocal_heads_frozen_half/seed0",
      "odds_first/sensitivity/bifocal_heads_frozen_half/seed1"]


def test_commands_carry_kind_arm_and_settings():
  scratch, bifocal = PRESET.runs()[:2]
  train = bifocal.train_command("/o", 400)
  assert "--config=configs/odds_first.py:tiny" in train
  assert "--workdir=/o/odds_first/scratch/bifocal_heads/seed0" in train
  for flag in ("--config.position.kind=bifocal", "--config.position.split=heads",
               "--config.seed=0", "--config.steps=400", "--config.batch_size=8"):
    assert flag in train, flag
  assert "--spectrum" in bifocal.eval_command("/o")
  assert "--spectrum" not in scratch.eval_command("/o")
  surgery = PRESET.runs()[4]
  assert surgery.source() == scratch
  train = surgery.train_command("/o", 400)
  assert "--config.init_from=/o/odds_first/scratch/rope/seed0" in train
  assert "--config.steps=200" in train  # half the budget, further
  che_task = ex.TaskSpec("odds_first", ("valid",), che=(5, 32))
  assert che_task.split_names == ("valid", "che")
  assert ex.Run(che_task, "rope", 0).eval_command("/o")[-3:] == [
      "--che", "--che_stride=5", "--che_per_length=32"]
  frozen = PRESET.runs()[-1]
  assert "--config.spectral.freeze_steps=200" in frozen.train_command("/o", 400)
  assert "--config.steps=400" in frozen.train_command("/o", 400)


def test_a_mixed_kind_runs_under_its_own_name():
  """A mixed `position.kind` (`rope+cope`) is a sweep kind as it is named:
  its runs' directories, commands and report rows carry the `+`."""
  preset = ex.Preset(tasks=(TASK,), kinds=("rope", "rope+cope", "spectral+alibi"), seeds=(0,),
                     protocol_tasks=())
  rope, mixed, spectral = preset.runs()
  assert mixed.name == "odds_first/scratch/rope+cope/seed0"
  train = mixed.train_command("/o", 400)
  assert "--workdir=/o/odds_first/scratch/rope+cope/seed0" in train
  assert "--config.position.kind=rope+cope" in train
  assert "--spectrum" not in mixed.eval_command("/o")
  assert "--spectrum" in spectral.eval_command("/o")
  with pytest.raises(ValueError, match=r"kind 'rope\+rope': not one of the sweep's"):
    ex.Run(TASK, "rope+rope", 0).train_command("/o", 400)


def test_report_rows_and_pairings_of_a_mixed_kind(tmp_path):
  results = str(tmp_path)
  rope = [0.50, 0.60, 0.55]
  _write(results, [_summary("rope", i, valid=0.9, test_length=a) for i, a in enumerate(rope)] +
         [_summary("rope+cope", i, valid=0.9, test_length=a + 0.05) for i, a in enumerate(rope)])
  assert os.path.isfile(os.path.join(results, "odds_first", "scratch", "rope+cope", "seed0.json"))
  preset = ex.Preset(tasks=(TASK,), kinds=("rope", "rope+cope"), seeds=(0, 1, 2),
                     protocol_tasks=())
  markdown = report_lib.report(preset, results)
  assert _rows(markdown, "rope+cope |")[0][1] == "3"
  assert _rows(markdown, "rope+cope (scratch) - rope (scratch)")[0][4].startswith("**+0.050 [")


def test_budget_checks_train_a_multiple_of_the_budget_and_count_their_steps(tmp_path):
  preset = ex.Preset(tasks=(TASK,), kinds=("rope", "bifocal_heads"), seeds=(0, 1),
                     protocol_tasks=("odds_first",),
                     budget_checks=(("odds_first", 2.0, ("rope", "bifocal_heads")),))
  checks = [r for r in preset.runs() if r.arm == "sensitivity"]
  assert [r.name for r in checks] == [
      f"odds_first/sensitivity/{kind}_2x_budget/seed{seed}"
      for seed in (0, 1) for kind in ("rope", "bifocal_heads")]
  train = checks[1].train_command("/o", 400)
  assert "--config.steps=800" in train and "--config.position.kind=bifocal" in train
  assert "init_from" not in " ".join(train)  # from scratch, not from the budget's checkpoint
  # The groups are ordered by the steps they really train: the 4 budget checks
  # (4 x 800 = 3,200) against 4 scratch runs and 4 protocol runs at half the
  # budget (4 x 400 + 4 x 200 = 2,400), which go first.
  results = str(tmp_path / "results")
  os.makedirs(results)
  with open(os.path.join(results, ex.BUDGETS_FILE), "w") as f:
    json.dump({"odds_first": {"budget": 400}}, f)
  sweep = ex.Sweep(preset, str(tmp_path / "out"), results, log=lambda m: None)
  assert [r.arm for r in sweep.pending()] == ["scratch"] * 4 + ["surgery", "continue"] * 2 + [
      "sensitivity"] * 4


def test_seed_extensions_add_scratch_seeds_of_some_kinds():
  preset = ex.Preset(tasks=(TASK,), kinds=("rope", "bifocal_heads", "alibi"), seeds=(0, 1),
                     seed_extensions=(("odds_first", (2, 3), ("rope", "bifocal_heads")),))
  runs = preset.runs()
  assert [r.name for r in runs[6:]] == [
      f"odds_first/scratch/{kind}/seed{seed}"
      for seed in (2, 3) for kind in ("rope", "bifocal_heads")]
  assert len({r.name for r in runs}) == len(runs) == 10
  assert "--config.seed=3" in runs[-1].train_command("/o", 400)


def fake_workdir(run, out, *, steps=10, accuracy=0.5, splits=None, curve=()):
  """A run directory as the trainer and eval.py leave it (final checkpoint dir included)."""
  workdir = run.workdir(out)
  os.makedirs(os.path.join(workdir, "eval"), exist_ok=True)
  os.makedirs(os.path.join(workdir, "checkpoints", str(steps)), exist_ok=True)
  with open(os.path.join(workdir, "config.json"), "w") as f:
    json.dump({"steps": steps}, f)
  with open(os.path.join(workdir, "metrics.jsonl"), "w") as f:
    for step, acc in curve:
      f.write(json.dumps({"step": step, "loss": 1.0, "valid_token_accuracy": acc}) + "\n")
    f.write(json.dumps({"step": steps, "loss": 0.25}) + "\n")
  split = dict(source="task", token_accuracy=accuracy, sequence_accuracy=accuracy / 2,
               examples=100, che_score=accuracy, by_length={"4": accuracy},
               by_depth={"0": accuracy},
               ci95=dict(token_accuracy=[accuracy - 0.01, accuracy + 0.01]))
  with open(os.path.join(workdir, "eval", "results.json"), "w") as f:
    json.dump(dict(step=steps, splits={n: split for n in (splits or run.task.split_names)}), f)
  return workdir


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


def test_an_in_order_preset_keeps_its_task_order_and_runs_the_protocol_last(tmp_path):
  first = ex.TaskSpec("dyck", variant="tiny")
  second = dataclasses.replace(first, name="dyck_big", config_name="dyck", kinds=("rope",))
  preset = ex.Preset(tasks=(first, second), kinds=("rope", "alibi"), seeds=(0,),
                     protocol_tasks=("dyck",), in_order=True)
  results = str(tmp_path / "results")
  os.makedirs(results)
  with open(os.path.join(results, ex.BUDGETS_FILE), "w") as f:
    json.dump({"dyck": {"budget": 400}, "dyck_big": {"budget": 4000}}, f)
  sweep = ex.Sweep(preset, str(tmp_path / "out"), results, log=lambda m: None)
  assert [r.name for r in sweep.pending()] == [
      "dyck/scratch/rope/seed0", "dyck/scratch/alibi/seed0", "dyck_big/scratch/rope/seed0",
      "dyck/surgery/bifocal_heads/seed0", "dyck/continue/rope/seed0"]
  assert "--config=configs/dyck.py:tiny" in sweep.pending()[2].train_command("/o", 4000)
  assert "--workdir=/o/dyck_big/scratch/rope/seed0" in sweep.pending()[2].train_command("/o", 10)


def test_later_kinds_run_after_every_tasks_kinds_and_protocol(tmp_path):
  first = ex.TaskSpec("dyck", variant="tiny", later_kinds=("fire",))
  # kerple_log as `extend` would add it: with the later kinds, after them
  second = dataclasses.replace(first, name="dyck_big", config_name="dyck", later_kinds=("t5",),
                               chosen_kinds=("kerple_log",))
  preset = ex.Preset(tasks=(first, second), kinds=("rope",), seeds=(0, 1),
                     protocol_tasks=("dyck",), in_order=True)
  results = str(tmp_path / "results")
  os.makedirs(results)
  with open(os.path.join(results, ex.BUDGETS_FILE), "w") as f:
    json.dump({"dyck": {"budget": 400}, "dyck_big": {"budget": 400}}, f)
  names = [r.name for r in ex.Sweep(preset, str(tmp_path / "out"), results,
                                    log=lambda m: None).pending()]
  assert names == [
      "dyck/scratch/rope/seed0", "dyck/scratch/rope/seed1", "dyck_big/scratch/rope/seed0",
      "dyck_big/scratch/rope/seed1", "dyck/surgery/bifocal_heads/seed0",
      "dyck/continue/rope/seed0", "dyck/surgery/bifocal_heads/seed1", "dyck/continue/rope/seed1",
      "dyck/scratch/fire/seed0", "dyck/scratch/fire/seed1", "dyck_big/scratch/t5/seed0",
      "dyck_big/scratch/kerple_log/seed0", "dyck_big/scratch/t5/seed1",
      "dyck_big/scratch/kerple_log/seed1"]


def test_a_preset_restricted_to_some_tasks_keeps_their_arms_only():
  preset = ex.PRESETS["cpu"].only(["dyck", "stack_manipulation"])
  assert [t.name for t in preset.tasks] == ["dyck", "stack_manipulation"]
  assert preset.protocol_tasks == ("dyck",) and preset.sensitivity
  assert {r.task.name for r in preset.runs()} == {"dyck", "stack_manipulation"}
  assert not preset.budget_checks and preset.seed_extensions
  no_dyck = ex.PRESETS["cpu"].only(["odds_first"])
  assert not no_dyck.sensitivity and not no_dyck.protocol_tasks
  assert {r.task.name for r in no_dyck.runs()} == {"odds_first"}
  with pytest.raises(ValueError, match=r"tasks=\['dyk'\]: the preset's tasks are \['dyck'"):
    ex.PRESETS["cpu"].only(["dyk"])


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


@pytest.mark.parametrize("name", ["smoke", "converged", "converged_chomsky"])
def test_every_checkpoint_a_converged_run_is_evaluated_at_is_kept(name):
  """At the cap and at a budget short of it that checkpoint_every does not
  divide (converged_chomsky's bucket_sort: 875 of 1,000 steps, saves every 250,
  the evaluated 250 and 500 older than the newest 3 of the config's default),
  also when the run was stopped and resumed, each stop a save at its step
  (bucket_sort's seed 1 of `partial_rope` lost its step-250 checkpoint so)."""
  for task in ex.PRESETS[name].tasks:
    for budget in (task.max_steps, task.max_steps * 7 // 8 + 1):
      run = ex.Run(task, "rope", 0)
      o = run.overrides("/o", budget)
      every = o["checkpoint_every"]
      saved = sorted(set(range(every, o["steps"] + 1, every)) | {o["steps"]})
      # the newest stops there can be: just before the end
      stops = [t for t in range(o["steps"] - 1, 0, -1) if t % every][:runs_lib.STOP_SAVES]
      kept = set(sorted(set(saved) | set(stops))[-o["keep_checkpoints"]:])
      assert set(run.checkpoint_steps(budget)) <= kept, (task.name, budget)


def test_a_run_evaluated_at_a_step_no_checkpoint_is_saved_at_is_refused():
  task = ex.TaskSpec("dyck", overrides=(("checkpoint_every", 300),), at_steps=(500, 1000))
  with pytest.raises(ValueError, match=r"'dyck': no checkpoint at steps \[500, 1000\]"):
    ex.Run(task, "rope", 0).overrides("/o", 2000)
  assert "keep_checkpoints" not in ex.Run(dataclasses.replace(task, at_steps=()), "rope",
                                           0).overrides("/o", 2000)
  # A calibration run is evaluated as it trains, at its own interval, never afterwards.
  calibration = ex.Preset(tasks=(task,), kinds=("rope",), seeds=(0,)).calibration_runs()[0]
  assert calibration.checkpoint_steps(2000) == ()
  assert "keep_checkpoints" not in calibration.overrides("/o", 2000)


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


def test_checkpoint_steps_are_the_multiples_of_the_just_fit_budget_before_the_end():
  task = ex.TaskSpec("dyck", variant="tiny", at_multiples=(1, 2, 4, 8), just_fit=500)
  assert task.checkpoint_steps(4000) == (500, 1000, 2000)
  assert task.checkpoint_steps(1500) == (500, 1000)
  assert ex.TaskSpec("dyck").checkpoint_steps(4000) == ()
  preset = ex.Preset(tasks=(task,), kinds=("rope", "bifocal_heads"), seeds=(0,),
                     protocol_tasks=("dyck",))
  scratch, _, surgery, _ = preset.runs()
  assert scratch.checkpoint_steps(4000) == (500, 1000, 2000)
  assert surgery.checkpoint_steps(4000) == ()  # evaluated at its end only
  command = scratch.checkpoint_eval_command("/o", (500, 1000))
  assert "--steps=500,1000" in command and "--spectrum" not in command
  assert not any(a.startswith(("--out", "--step=")) for a in command)
  # where `eval.py --steps` writes each (`evaluate.results_path(workdir, step)`)
  assert ex.checkpoint_results_path("/o/w", 1000) == "/o/w/eval/results_step1000.json"
  with pytest.raises(ValueError, match="just_fit"):
    ex.TaskSpec("dyck", at_multiples=(1,)).checkpoint_steps(100)


def test_summary_carries_the_curve_at_steps_and_waits_for_every_checkpoint(tmp_path):
  out = str(tmp_path)
  task = ex.TaskSpec("odds_first", variant="tiny", at_multiples=(0.5, 1), just_fit=10,
                     overrides=(("checkpoint_every", 5),))
  run = ex.Run(task, "rope", 0)
  workdir = fake_workdir(run, out, steps=20, accuracy=0.9)
  assert run.checkpoint_steps(20) == (5, 10)
  assert run_summary.summary_of(run, out, 20, 1.0) is None  # no checkpoint evaluated yet
  def checkpoint_stages():
    return [c for stage, _, c in ex._stages(run, out, 20, evaluate=True)
            if stage == "eval" and any(a.startswith("--steps=") for a in c)]

  assert [[a for a in c if a.startswith("--steps=")] for c in checkpoint_stages()] == [
      ["--steps=5,10"]]  # one process for every pending checkpoint
  for step, accuracy in ((5, 0.6), (10, 0.8)):
    with open(ex.checkpoint_results_path(workdir, step), "w") as f:
      split = dict(token_accuracy=accuracy, sequence_accuracy=0.1, examples=16, by_length={},
                   by_depth={}, ci95=dict(token_accuracy=[accuracy - 0.05, accuracy + 0.05]))
      json.dump(dict(step=step, splits={n: split for n in task.split_names}), f)
    if step == 5:  # only the checkpoints still pending are evaluated
      assert [[a for a in c if a.startswith("--steps=")] for c in checkpoint_stages()] == [
          ["--steps=10"]]
  assert len(ex._stages(run, out, 20, evaluate=True)) == 1  # only the final evaluation left
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
  with open(ex.checkpoint_results_path(workdir, 5), "w") as f:
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


def test_pending_waits_for_budgets_and_skips_summarised_runs(tmp_path):
  results = str(tmp_path / "results")
  sweep = ex.Sweep(PRESET, str(tmp_path / "out"), results, log=lambda m: None)
  assert sweep.pending() == []  # not calibrated
  os.makedirs(results)
  with open(os.path.join(results, ex.BUDGETS_FILE), "w") as f:
    json.dump({"odds_first": {"budget": None}}, f)
  assert sweep.pending() == []  # not learned
  with open(os.path.join(results, ex.BUDGETS_FILE), "w") as f:
    json.dump({"odds_first": {"budget": 400}}, f)
  first = PRESET.runs()[0]
  path = run_summary.summary_path(results, first)
  os.makedirs(os.path.dirname(path))
  with open(path, "w") as f:
    f.write("{}")
  # The smaller group first: the sensitivity arm (2 runs) before the task's
  # scratch and protocol runs (7 left), each group in the preset's order.
  runs = PRESET.runs()
  assert sweep.pending() == runs[-2:] + runs[1:-2]


def test_pending_takes_the_group_with_fewest_steps_left_first(tmp_path):
  cheap, dear = (ex.TaskSpec(name, variant="tiny") for name in ("bucket_sort", "reverse_string"))
  preset = ex.Preset(tasks=(dear, cheap), kinds=("rope", "bifocal_heads"), seeds=(0, 1),
                     protocol_tasks=("reverse_string",), sensitivity_task="reverse_string",
                     sensitivity=(("bifocal_heads", "lr1e-3",
                                   (("spectral.learning_rate", 1e-3),)),))
  results = str(tmp_path / "results")
  os.makedirs(results)
  with open(os.path.join(results, ex.BUDGETS_FILE), "w") as f:
    json.dump({"bucket_sort": {"budget": 250}, "reverse_string": {"budget": 2500}}, f)
  sweep = ex.Sweep(preset, str(tmp_path / "out"), results, log=lambda m: None)
  names = [r.name for r in sweep.pending()]
  assert names == [  # 4 x 250, then 2 x 2500 (sensitivity), then 8 x 2500 (scratch, protocol)
      "bucket_sort/scratch/rope/seed0", "bucket_sort/scratch/bifocal_heads/seed0",
      "bucket_sort/scratch/rope/seed1", "bucket_sort/scratch/bifocal_heads/seed1",
      "reverse_string/sensitivity/bifocal_heads_lr1e-3/seed0",
      "reverse_string/sensitivity/bifocal_heads_lr1e-3/seed1",
      "reverse_string/scratch/rope/seed0", "reverse_string/scratch/bifocal_heads/seed0",
      "reverse_string/scratch/rope/seed1", "reverse_string/scratch/bifocal_heads/seed1",
      "reverse_string/surgery/bifocal_heads/seed0", "reverse_string/continue/rope/seed0",
      "reverse_string/surgery/bifocal_heads/seed1", "reverse_string/continue/rope/seed1"]
  # Runs already summarised shrink their group: reverse_string's scratch and
  # protocol group, 1 run left (2,500 steps), now goes before its sensitivity arm.
  for run in preset.runs()[:7]:
    path = run_summary.summary_path(results, run)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
      f.write("{}")
  assert [r.name for r in sweep.pending()] == names[:4] + [
      "reverse_string/continue/rope/seed1"] + names[4:6]


def _summary(group, seed, arm="scratch", loss_offset=0.0, **accuracy):
  kind = group.split("_frozen")[0]
  splits = {name: dict(accuracy=a, ci95=[a - 0.01, a + 0.01], by_length={"50": a},
                       by_depth={"0": a}) for name, a in accuracy.items()}
  out = dict(task="odds_first", kind=kind, arm=arm, group=group, seed=seed, steps=400, budget=400,
             config="configs/odds_first.py", final_train_loss=0.1 * (seed + 1) + loss_offset, splits=splits,
             seconds=60.0, date=f"2026-11-30 1{seed}:00 UTC")
  if kind == "bifocal_heads":
    out["spectrum"] = dict(drift=0.1, harmonic_score=0.2 + 0.01 * seed, fraction_explained=0.5,
                           geometric_score=0.1, final=[[1.0, 0.1]])
  return out


def _write(results, summaries):
  for s in summaries:
    path = os.path.join(results, s["task"], s["arm"], s["group"], f"seed{s['seed']}.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
      json.dump(s, f)


def _rows(markdown, first_cell):
  return [[c.strip() for c in line.split("|")[1:-1]] for line in markdown.splitlines()
          if line.startswith(f"| {first_cell}")]


def test_report_intervals_paired_verdicts_and_plots(tmp_path):
  results = str(tmp_path)
  rope = [0.50, 0.60, 0.55, 0.65, 0.58]
  _write(results, [_summary("rope", i, valid=0.9, test_length=a) for i, a in enumerate(rope)]
         # bifocal: +0.05 on every seed on test_length (decided), noise on valid (not).
         # Its final training loss 0.05 lower on every seed (decided).
         + [_summary("bifocal_heads", i, valid=0.9 + (-1) ** i * 0.01, test_length=a + 0.05,
                     loss_offset=-0.05) for i, a in enumerate(rope)]
         + [_summary("bifocal_heads", i, "surgery", valid=0.9, test_length=0.6) for i in range(3)]
         + [_summary("rope", i, "continue", valid=0.9, test_length=0.6) for i in range(3)])
  with open(os.path.join(results, "budgets.json"), "w") as f:
    json.dump({"odds_first": {"budget": 400, "max_steps": 3000, "curve": [[400, 0.93]]}}, f)
  markdown = report_lib.report(PRESET, results)
  assert "Runs summarised: 16 (of the 10 the preset makes" in markdown  # seeds beyond its two
  assert _rows(markdown, "odds_first")[0][1:] == ["400", "0.930", "3000"]
  rope_row = _rows(markdown, "rope |")[0]
  assert rope_row[1:3] == ["5", "5/5"] and rope_row[5].startswith("0.576 [")
  assert _rows(markdown, "bifocal_heads |")[0][2] == "3/5"  # seeds at valid 0.89 did not fit
  # The other arms' own accuracies, each cell labelled with its arm.
  surgery_row = _rows(markdown, "bifocal_heads (surgery) |")[0]
  assert surgery_row[1:3] == ["3", "3/3"] and surgery_row[5].startswith("0.600")
  assert _rows(markdown, "rope (continue) |")[0][1] == "3"
  bifocal_vs_rope = _rows(markdown, "bifocal_heads (scratch) - rope (scratch)")[0]
  assert bifocal_vs_rope[1] == "5"
  assert bifocal_vs_rope[2].startswith("**-0.050 [")    # final train loss: decided
  assert not bifocal_vs_rope[3].startswith("**")        # valid: within noise
  assert bifocal_vs_rope[4].startswith("**+0.050 [")    # test_length: decided
  protocol = _rows(markdown, "bifocal_heads (surgery) - rope (continue)")[0]
  assert protocol[1] == "3" and protocol[4] == "+0.000 [+0.000, +0.000]"
  assert "Learned spectra" in markdown and "bifocal_heads (scratch)" in markdown
  assert os.path.getsize(os.path.join(results, "plots", "extrapolation_odds_first.png")) > 5000


def test_report_reads_the_protocol_in_closing_bracket_accuracy_too(tmp_path):
  """Dyck-like summaries (with `close_accuracy`): the protocol's paired table
  comes twice, token accuracy (loss first) and closing-bracket accuracy."""
  results = str(tmp_path)
  summaries = []
  for seed in range(3):
    for group, arm, token, close in (("bifocal_heads", "surgery", 0.80, 0.70 + 0.01 * seed),
                                     ("rope", "continue", 0.80, 0.60)):
      s = _summary(group, seed, arm, valid=0.9, test_length=token)
      s["splits"]["valid"]["close_accuracy"] = 0.9
      s["splits"]["test_length"]["close_accuracy"] = close
      summaries.append(s)
  _write(results, summaries)
  markdown = report_lib.report(PRESET, results)
  token, close = _rows(markdown, "bifocal_heads (surgery) - rope (continue)")
  assert token[1] == "3" and token[4] == "+0.000 [+0.000, +0.000]"  # loss, valid, test_length
  assert len(close) == 4 and close[2] == "+0.000 [+0.000, +0.000]"  # valid, test_length
  assert close[3].startswith("**+0.110 [")
  assert (markdown.index("The paper's protocol:") < markdown.index("| bifocal_heads (surgery) -")
          < markdown.index("The same, closing-bracket accuracy:"))


def test_report_compares_rankings_of_one_task_at_two_model_sizes(tmp_path):
  """Tasks sharing a config file (`dyck`, `dyck_5layer`): each kind's mean and
  rank at both sizes, the ranks' correlation, and each size's paired
  difference from rope; a preset with one size has no such section."""
  results = str(tmp_path)
  small, large = ex.TaskSpec("dyck"), ex.TaskSpec("dyck_5layer", config_name="dyck")
  # test_length means: small alibi 0.9 > nope 0.8 > rope 0.7; large rope 0.95 > alibi > nope.
  means = {"dyck": {"rope": 0.7, "alibi": 0.9, "nope": 0.8},
           "dyck_5layer": {"rope": 0.95, "alibi": 0.9, "nope": 0.6}}
  summaries = []
  for task, by_kind in means.items():
    for kind, mean in by_kind.items():
      for seed in range(3):
        noise = 0.01 * (seed - 1) if kind == "nope" else 0.0  # nope - rope: not decided
        s = _summary(kind, seed, valid=0.99, test_length=mean + noise * (task == "dyck") * 10)
        s.update(task=task, config="configs/dyck.py", steps=4000 if task == "dyck" else 2000,
                 overrides={"model.num_layers": 2 if task == "dyck" else 5})
        summaries.append(s)
  _write(results, summaries)
  preset = ex.Preset(tasks=(small, large), kinds=("rope", "alibi", "nope"), seeds=(0, 1, 2))
  markdown = report_lib.report(preset, results)
  section = markdown.split("### Model size", 1)[1]
  assert "`dyck` (2 layers, 4,000 steps) against `dyck_5layer` (5 layers, 2,000 steps)" in section
  ranking, differences = section.split("Minus `rope` on each side", 1)
  rows = {r[0]: r[1:] for r in _rows(ranking, "") if r[0] not in ("position", "---")}
  assert rows["rope"][:2] == ["3 / 3", "0.700 (3) / 0.950 (1)"]
  assert rows["alibi"][1] == "0.900 (1) / 0.900 (2)"
  assert rows["nope"][1] == "0.800 (2) / 0.600 (3)"
  assert rows["rank correlation (Spearman)"][1] == "-0.50"
  diff_rows = {r[0]: r[1] for r in _rows(differences, "") if r[0] in ("alibi", "nope")}
  assert diff_rows == {"alibi": "**+0.200** / **-0.050**", "nope": "+0.100 / **-0.350**"}
  only_small = ex.Preset(tasks=(small,), kinds=("rope", "alibi", "nope"), seeds=(0, 1, 2))
  assert "### Model size" not in report_lib.report(only_small, results)


def test_report_sets_the_rankings_of_two_tasks_side_by_side_each_in_its_metric(tmp_path):
  """`Preset.cross_task`: each kind's mean and rank on both tasks, Dyck's in
  closing-bracket accuracy and ListOps' in token accuracy, the ranks'
  correlation and its permutation p; no pair named, no section."""
  results = str(tmp_path)
  dyck, listops = ex.TaskSpec("dyck"), ex.TaskSpec("listops_depth")
  # test_depth: dyck close accuracy nope > alibi > rope > fire (token accuracy
  # the reverse, unread); listops alibi > rope > fire > nope.
  close = {"rope": 0.8, "alibi": 0.9, "nope": 0.95, "fire": 0.7}
  listops_means = {"rope": 0.8, "alibi": 0.85, "nope": 0.6, "fire": 0.7}
  summaries = []
  for kind in close:
    for seed in range(3):
      s = _summary(kind, seed, valid=0.99, test_depth=1.0 - close[kind])
      s["splits"]["test_depth"]["close_accuracy"] = close[kind] + 0.01 * (seed - 1)
      s.update(task="dyck", config="configs/dyck.py")
      o = _summary(kind, seed, valid=0.99, test_depth=listops_means[kind])
      o.update(task="listops_depth", config="configs/listops_depth.py")
      summaries += [s, o]
  _write(results, summaries)
  preset = ex.Preset(tasks=(dyck, listops), kinds=tuple(close), seeds=(0, 1, 2),
                     cross_task=(("dyck", "listops_depth"),))
  section = report_lib.report(preset, results, link_base=str(tmp_path)).split(
      "### Across tasks", 1)[1]
  assert ("`dyck` (closing-bracket accuracy) against `listops_depth` (token accuracy)"
          in section)
  assert "![dyck against listops_depth](plots/across_dyck_listops_depth.png)" in section
  assert os.path.getsize(tmp_path / "plots" / "across_dyck_listops_depth.png") > 0
  ranking, differences = section.split("Minus `rope` on each side", 1)
  rows = {r[0]: r[1:] for r in _rows(ranking, "") if r[0] not in ("position", "---")}
  assert list(rows)[:4] == ["alibi", "rope", "fire", "nope"]  # by listops_depth's mean
  assert rows["nope"] == ["3 / 3", "0.950 (1) / 0.600 (4)"]
  assert rows["alibi"][1] == "0.900 (2) / 0.850 (1)"
  # Ranks (1, 2, 3, 4) against (4, 1, 2, 3): sum of squared rank differences
  # 12, rho = 1 - 12 / 10 = -0.2. Of the 24 orders of 4, 22 have |rho| >= 0.2
  # (sum <= 8 or >= 12: 11 each), so the exact p is 22 / 24.
  assert rows["rank correlation (Spearman)"][1] == "-0.20"
  assert rows["its permutation p (two-sided)"][1] == "0.92"
  diff_rows = {r[0]: r[1] for r in _rows(differences, "") if r[0] in ("alibi", "nope")}
  assert diff_rows["nope"] == "**+0.150** / **-0.200**"
  plain = dataclasses.replace(preset, cross_task=())
  assert "### Across tasks" not in report_lib.report(plain, results)


def test_report_pairs_randomized_encodings_with_their_bases_and_across_tasks(tmp_path):
  """Each `randomized_<kind>` against `<kind>` in its task's paired tables, and
  across the tasks scored by the Chomsky-hierarchy protocol: the paired mean of
  `che_score` per (task, pair), their best seeds, and the mean over the rows."""
  results = str(tmp_path)
  summaries = []
  # odds_first: randomized_rope +0.10 on every seed (decided), best 0.75 against 0.60;
  # bucket_sort: randomized_alibi -0.02 .. +0.02 (not decided), best 0.92 against 0.90.
  for task, base, randomized in (("odds_first", "rope", (0.10, 0.10, 0.10)),
                                 ("bucket_sort", "alibi", (-0.02, 0.0, 0.02))):
    for seed in range(3):
      for kind, score in ((base, 0.5 + 0.05 * seed + 0.3 * (task == "bucket_sort")),
                          (f"randomized_{base}", None)):
        value = score if score is not None else (0.5 + 0.05 * seed + 0.3 * (task == "bucket_sort")
                                                 + randomized[seed])
        s = _summary(kind, seed, valid=0.9, che=value)
        s["task"] = task
        s["splits"]["che"]["che_score"] = value
        summaries.append(s)
  summaries.append(_summary("randomized_learnt", 0, valid=0.9, che=0.7))  # no `learnt`: unpaired
  _write(results, summaries)
  preset = ex.Preset(tasks=(ex.TaskSpec("odds_first", ("valid",)),
                            ex.TaskSpec("bucket_sort", ("valid",))),
                     kinds=("rope", "alibi"), seeds=(0, 1, 2))
  markdown = report_lib.report(preset, results)
  in_task = _rows(markdown, "randomized_rope (scratch) - rope (scratch)")[0]
  assert in_task[1] == "3" and in_task[4].startswith("**+0.100 [")  # loss, valid, che
  assert "randomized_learnt (scratch) - learnt" not in markdown
  section = markdown.split("### Randomization", 1)[1]
  rows = {(r[0], r[1]): r[2:] for r in _rows(section, "") if r[0] not in ("task", "---")}
  assert rows[("odds_first", "randomized_rope - rope")][:2] == ["3", "**+0.100 [+0.100, +0.100]**"]
  assert rows[("odds_first", "randomized_rope - rope")][2] == "0.700 / 0.600 (+0.100)"
  bucket = rows[("bucket_sort", "randomized_alibi - alibi")]
  assert bucket[1].startswith("+0.000 [") and not bucket[1].startswith("**")
  assert bucket[2] == "0.920 / 0.900 (+0.020)"
  assert rows[("mean over the 2 rows", "")][1:] == ["+0.050", "(+0.060)"]
  without = ex.Preset(tasks=(ex.TaskSpec("odds_first", ("valid",)),), kinds=("rope",),
                      seeds=(0,))
  _write(str(tmp_path / "plain"), [_summary("rope", 0, valid=0.9, che=0.5)])
  assert "### Randomization" not in report_lib.report(without, str(tmp_path / "plain"))


def test_report_pairs_a_mixed_kind_with_each_of_its_kinds(tmp_path):
  """`rope+alibi` against `rope` and against `alibi`, token and closing-bracket
  accuracy; a mix whose second kind never ran is paired with the first only;
  `spectral+alibi` also against `rope+alibi` (other eyes beside the same heads)."""
  results = str(tmp_path)
  summaries = []
  # valid: rope 0.5, alibi 0.7, rope+alibi 0.6 on every seed; closing brackets
  # rope+alibi 0.05 above alibi on every seed
  for seed in range(3):
    for kind, valid in (("rope", 0.5), ("alibi", 0.7), ("rope+alibi", 0.6),
                        ("rope+fire", 0.55), ("spectral+alibi", 0.62)):
      s = _summary(kind, seed, valid=valid + 0.01 * seed)
      s["splits"]["valid"]["close_accuracy"] = valid + 0.01 * seed + 0.15 * (kind == "rope+alibi")
      summaries.append(s)
  _write(results, summaries)
  preset = ex.Preset(tasks=(ex.TaskSpec("odds_first", ("valid",)),),
                     kinds=("rope", "alibi", "rope+alibi", "rope+fire", "spectral+alibi"),
                     seeds=(0, 1, 2))
  section = report_lib.report(preset, results).split("Mixed-scheme heads", 1)[1]
  token, closing = section.split("The same, closing-bracket accuracy", 1)
  token = token.split("\n\n", 2)[1]
  rows = {r[0]: r[1:] for r in _rows(token, "rope+")}
  assert rows["rope+alibi (scratch) - alibi (scratch)"][2] == "**-0.100 [-0.100, -0.100]**"
  assert rows["rope+alibi (scratch) - rope (scratch)"][2] == "**+0.100 [+0.100, +0.100]**"
  assert list(rows) == ["rope+alibi (scratch) - rope (scratch)",
                        "rope+alibi (scratch) - alibi (scratch)",
                        "rope+fire (scratch) - rope (scratch)"]  # no fire run to pair with
  spectral = {r[0]: r[1:] for r in _rows(token, "spectral+alibi")}
  assert list(spectral) == ["spectral+alibi (scratch) - alibi (scratch)",
                            "spectral+alibi (scratch) - rope+alibi (scratch)"]  # no spectral run
  assert spectral["spectral+alibi (scratch) - rope+alibi (scratch)"][2] == (
      "**+0.020 [+0.020, +0.020]**")
  close_rows = {r[0]: r[1:] for r in _rows(closing, "rope+alibi")}
  assert close_rows["rope+alibi (scratch) - alibi (scratch)"][1] == "**+0.050 [+0.050, +0.050]**"


def test_report_probe_table_means_per_cell_scratch_arms_first(tmp_path):
  results = str(tmp_path)
  summaries = []
  for group, arm, depth, eyes in (("rope", "continue", 0.3, {"geometric": 0.02}),
                                  ("rope", "scratch", 0.2, {"geometric": 0.04}),
                                  ("bifocal_heads", "surgery", 0.4,
                                   {"geometric": 0.01, "spectral": 0.03})):
    for seed in range(2):
      s = _summary(group, seed, arm, valid=0.9)
      s["probe"] = dict(
          depth={"valid": dict(accuracy=[0.5, 0.9]),
                 "test_depth": dict(accuracy=[0.1, depth + 0.1 * seed],
                                    unseen_accuracy=[0.0, None])},
          by_eye={"test_depth": dict(match_mass=eyes)}, uniform_mass={"test_depth": 0.05})
      summaries.append(s)
  _write(results, summaries)
  markdown = report_lib.report(PRESET, results)
  table = markdown.split("Mechanism probes", 1)[1]
  rows = [row for row in _rows(table, "") if row[0].endswith(")")][1:4]
  assert [row[0] for row in rows] == ["rope (scratch)", "rope (continue)",
                                      "bifocal_heads (surgery)"]
  assert rows[0][1] == "2" and rows[0][2] == "0.900 [0.900, 0.900]"
  assert rows[0][3].startswith("0.250 [") and rows[2][3].startswith("0.450 [")
  assert rows[0][4] == "-"  # no seed had an unseen depth
  assert rows[2][5] == "geometric 0.010, spectral 0.030" and rows[2][6] == "0.050"


def test_report_leaderboards_rank_the_kinds_and_count_the_seeds_at_the_target(tmp_path):
  results = str(tmp_path)
  rope = [0.50, 0.60, 0.55]
  _write(results, [_summary("rope", i, valid=0.9, test_length=a) for i, a in enumerate(rope)]
         + [_summary("alibi", i, valid=0.9, test_length=a + 0.3) for i, a in enumerate(rope)]
         + [_summary("nope", i, valid=0.9, test_length=a + (-1) ** i * 0.02)
            for i, a in enumerate(rope)]
         # t5: +0.01, -0.03, +0.01 against alibi seed by seed: not told apart
         + [_summary("t5", i, valid=0.9, test_length=a + 0.29 + (-1) ** i * 0.02)
            for i, a in enumerate(rope)])
  with open(os.path.join(results, "budgets.json"), "w") as f:
    json.dump({"odds_first": {"budget": 400, "max_steps": 3000, "curve": [[400, 0.93]]}}, f)
  preset = ex.Preset(tasks=(TASK,), kinds=("rope", "alibi", "nope", "t5"), seeds=(0, 1, 2),
                     leaderboards=True, targets=(("odds_first", "test_length", 0.85),
                                                 ("dyck", "test_length", 0.5)))
  markdown = report_lib.report(preset, results)
  board = [row for row in _rows(markdown, "") if row[0] in ("1", "2", "3", "4")]
  # test_length only: valid is not ranked
  assert [row[1] for row in board] == ["alibi", "t5", "nope", "rope"]
  alibi, t5, nope, rope_row = board
  assert alibi[3].startswith("0.850 [") and alibi[4].startswith("**+0.300 [")
  assert not nope[4].startswith("**") and rope_row[4] == "-"
  # minus the first: alibi itself none; t5 undecided; nope and rope decidedly behind
  assert alibi[5] == "-" and t5[5].startswith("-0.003 [") and not t5[5].startswith("**")
  assert nope[5].startswith("**-0.293 [") and rope_row[5].startswith("**-0.300 [")
  assert ("Not told apart from the first, alibi (the paired interval includes zero): t5."
          in markdown)
  # alibi's seeds: 0.80, 0.90, 0.85 against the target 0.85 (this task's, not dyck's)
  assert [row[6] for row in board] == ["2/3", "2/3", "0/3", "0/3"]
  assert "Reaching 0.85 on `test_length` (any seed): alibi (2/3), t5 (2/3)." in markdown
  assert "Leaderboards" not in report_lib.report(dataclasses.replace(preset, leaderboards=False),
                                                 results)


def test_leaderboard_ranks_each_seeds_mean_over_the_held_out_splits(tmp_path):
  results = str(tmp_path)
  # alibi leads test_length, nope test_depth; over both, nope (0.75) ahead of alibi (0.70).
  # rope's seed 2 lacks test_depth: its mean counts seeds 0-1 only.
  scores = {"rope": ((0.5, 0.5), (0.6, 0.5), (0.55, None)),
            "alibi": ((0.9, 0.5), (0.9, 0.5), (0.9, 0.5)),
            "nope": ((0.6, 0.9), (0.6, 0.9), (0.6, 0.9))}
  _write(results, [_summary(kind, i, valid=0.9, test_length=a,
                            **({} if b is None else {"test_depth": b}))
                   for kind, seeds in scores.items() for i, (a, b) in enumerate(seeds)])
  groups = run_summary.cells(run_summary.load_summaries(results))["odds_first"]
  board = leaderboard_lib.leaderboard(groups, ["valid", "test_length", "test_depth"], {})
  overall = board.split("The mean over the held-out splits (`test_length`, `test_depth`;", 1)[1]
  rows = [row for row in _rows(overall, "") if row[0] in ("1", "2", "3")]
  assert [(row[1], row[2], row[3].split(" ")[0]) for row in rows] == [
      ("nope", "3", "0.750"), ("alibi", "3", "0.700"), ("rope", "2", "0.525")]
  assert rows[1][5].startswith("**-0.050 [")  # alibi minus nope, the same each seed
  # rope: -0.25 and -0.20 over two seeds, too few to call
  assert "Not told apart from the first, nope (the paired interval includes zero): rope." in (
      overall)
  # one held-out split: no mean board
  assert "The mean over" not in leaderboard_lib.leaderboard(groups, ["valid", "test_length"], {})


def test_report_plots_every_kind_against_two_targets(tmp_path):
  results = str(tmp_path / "runs")
  _write(results, [_summary(kind, i, valid=0.9, test_length=a + 0.01 * i, test_depth=b)
                   for kind, a, b in (("rope", 0.5, 0.6), ("alibi", 0.8, 0.7)) for i in range(3)])
  with open(os.path.join(results, "budgets.json"), "w") as f:
    json.dump({"odds_first": {"budget": 400, "max_steps": 3000, "curve": [[400, 0.93]]}}, f)
  preset = ex.Preset(tasks=(TASK,), kinds=("rope", "alibi"), seeds=(0, 1, 2), leaderboards=True,
                     targets=(("odds_first", "test_length", 0.85),
                              ("odds_first", "test_depth", 0.9)))
  markdown = report_lib.report(preset, results, link_base=str(tmp_path))
  assert "![odds_first: every kind against both targets](runs/plots/targets_odds_first.png)" in (
      markdown)
  assert os.path.getsize(tmp_path / "runs" / "plots" / "targets_odds_first.png") > 0
  # One target: the leaderboards, no plot.
  one = dataclasses.replace(preset, targets=preset.targets[:1])
  assert "every kind against both targets" not in report_lib.report(one, results)
  groups = run_summary.cells(run_summary.load_summaries(results))["odds_first"]
  assert leaderboard_lib.targets_plot("odds_first", groups, {"test_length": 0.85, "che": 0.5},
                                      str(tmp_path / "none.png")) is None  # no kind has `che`


def test_leaderboard_step_time_column_from_the_step_benchmark(tmp_path):
  results = str(tmp_path / "runs")
  _write(results, [_summary(kind, i, valid=0.9, test_length=a + 0.1 * i)
                   for kind, a in (("rope", 0.5), ("alibi", 0.8), ("bifocal_heads", 0.6),
                                   ("nope", 0.7)) for i in range(2)])
  step_file = str(tmp_path / "step_all_kinds.json")
  with open(step_file, "w") as f:
    json.dump({"results": [
        {"config": "default", "bifocal_over_rope": 1.2, "kinds_over_rope": {"alibi": 0.99}},
        {"config": "large", "bifocal_over_rope": 1.1, "kinds_over_rope": {"alibi": 1.5}}]}, f)
  costs = leaderboard_lib.step_costs(step_file)
  assert costs == (("default", "large"),
                   {"rope": [1.0, 1.0], "bifocal": [1.2, 1.1], "alibi": [0.99, 1.5]})
  groups = run_summary.cells(run_summary.load_summaries(results))["odds_first"]
  board = leaderboard_lib.leaderboard(groups, ["valid", "test_length"], {}, costs)
  assert "step time / rope (default / large)" in board
  last = {row[1]: row[-1] for row in _rows(board, "") if row[0] in "1234"}
  # bifocal_heads is position.kind bifocal; nope was not measured
  assert last == {"alibi": "0.99x / 1.50x", "nope": "-", "bifocal_heads": "1.20x / 1.10x",
                  "rope": "1.00x / 1.00x"}
  assert "step time" not in leaderboard_lib.leaderboard(groups, ["test_length"], {})
  assert leaderboard_lib.step_costs(str(tmp_path / "absent.json")) == ((), {})
  # a later file adds the kinds the first did not measure, against its own RoPE
  later = str(tmp_path / "step_mixed.json")
  with open(later, "w") as f:
    json.dump({"results": [
        {"config": "default", "bifocal_over_rope": 9.0, "kinds_over_rope": {"alibi": 9.0,
                                                                            "rope+alibi": 1.3}},
        {"config": "large", "bifocal_over_rope": 9.0, "kinds_over_rope": {"alibi": 9.0,
                                                                          "rope+alibi": 1.4}}]}, f)
  both = leaderboard_lib.step_costs(f"{step_file},{tmp_path / 'absent.json'},{later}")
  assert both == (("default", "large"), {**costs[1], "rope+alibi": [1.3, 1.4]})
  with open(later, "w") as f:
    json.dump({"results": [{"config": "default", "bifocal_over_rope": 1.0,
                            "kinds_over_rope": {"rope+alibi": 1.3}}]}, f)
  with pytest.raises(ValueError, match=r"step_mixed.json: its configs \['default'\] are not "
                     r"the first file's \['default', 'large'\]"):
    leaderboard_lib.step_costs(f"{step_file},{later}")
  with open(step_file, "w") as f:
    json.dump({"results": [{"config": "default"}]}, f)
  with pytest.raises(ValueError, match="step_all_kinds.json: not a step_benchmark.py result"):
    leaderboard_lib.step_costs(step_file)


def test_report_training_time_table_plot_and_convergence_budgets(tmp_path):
  results = str(tmp_path)
  summaries = []
  for kind, late in (("rope", 0.7), ("alibi", 0.9)):
    for seed in range(3):
      s = _summary(kind, seed, valid=0.95, test_length=late)
      s["at_steps"] = {str(step): {name: dict(accuracy=a, ci95=[a - 0.01, a + 0.01], examples=16)
                                   for name, a in (("valid", 0.9), ("test_length", acc))}
                       for step, acc in ((100, 0.5), (200, 0.6), (400, late + 0.01 * seed))}
      summaries.append(s)
  _write(results, summaries)
  with open(os.path.join(results, "budgets.json"), "w") as f:
    json.dump({"odds_first": {"budget": 400, "max_steps": 800, "just_fit": 100, "interval": 50,
                              "curve": [[400, 0.95]]}}, f)
  # A task to calibrate whose just-fit budget is to be read off its own curve.
  later = ex.TaskSpec("listops_depth", ("valid",), interval=500)
  preset = ex.Preset(tasks=(dataclasses.replace(TASK, just_fit=100), later),
                     kinds=("rope", "alibi"), seeds=(0, 1, 2), converged=0.002)
  markdown = report_lib.report(preset, results)
  assert "gained less than 0.002 over the last quarter" in markdown
  assert _rows(markdown, "odds_first")[0][1:] == ["400", "0.950", "800", "50", "100"]
  assert _rows(markdown, "listops_depth")[0][1:] == ["not calibrated yet", "-", "-", "500", "-"]
  alibi = {row[1]: row for row in _rows(markdown, "alibi |") if len(row) == 4}
  assert list(alibi) == ["100", "200", "400"]
  assert alibi["400"][3].startswith("0.910 [") and alibi["100"][3].startswith("0.500")
  assert os.path.getsize(os.path.join(results, "plots", "training_time_odds_first.png")) > 5000


def test_report_ranks_kinds_at_each_step_and_correlates_first_with_last():
  def cell(*by_step):  # two seeds, equal values, at steps 100, 200, 400
    at = {str(s): {"test_length": dict(accuracy=a, ci95=None, examples=16)}
          for s, a in zip((100, 200, 400), by_step)}
    return {seed: {"at_steps": at} for seed in (0, 1)}

  # rope falls from first to last, alibi rises; nope and rope tie at step 200.
  scratch = {"rope": cell(0.9, 0.7, 0.5), "alibi": cell(0.5, 0.8, 0.95),
             "nope": cell(0.7, 0.7, 0.6)}
  table = training_time_lib.ranks_over_training_time(scratch, ["test_length"], "accuracy")
  rows = {row[0]: row[1] for row in _rows(table, "")}
  assert rows["position"] == "test_length (100, 200, 400)"
  assert rows["rope"] == "1 / 2 / 3" and rows["alibi"] == "3 / 1 / 1"
  assert rows["nope"] == "2 / 2 / 2"  # a tie shares the better rank
  assert rows["rank correlation, step 100 with 400"] == "-1.00"  # 1,2,3 -> 3,2,1
  ties = {k: cell(0.5, 0.5, v) for k, v in (("rope", 0.1), ("alibi", 0.2), ("nope", 0.3))}
  assert _rows(training_time_lib.ranks_over_training_time(ties, ["test_length"], "accuracy"),
               "rank correlation")[0][1] == "-"  # all tied at the first step
  assert training_time_lib.ranks_over_training_time({"rope": scratch["rope"]}, ["test_length"],
                                             "accuracy") == ""


def test_report_blocks_of_two_presets_live_side_by_side(tmp_path):
  path = str(tmp_path / "RESULTS.md")
  report_lib.replace_block(path, "cpu table")
  report_lib.replace_block(path, "converged table", "converged")
  report_lib.replace_block(path, "cpu table 2", "cpu")
  text = open(path).read()
  assert "cpu table 2" in text and "converged table" in text and "cpu table\n" not in text


def test_report_pairs_the_added_seeds_of_an_extension_alone(tmp_path):
  """Seeds 0-1 favour bifocal attention by 0.2, the added seeds 2-4 by 0.01 on
  every seed: the replication table shows the added seeds' difference only."""
  results = str(tmp_path)
  preset = ex.Preset(tasks=(TASK,), kinds=("rope", "bifocal_heads"), seeds=(0, 1),
                     seed_extensions=(("odds_first", (2, 3, 4), ("rope", "bifocal_heads")),))
  rope = [0.5, 0.6, 0.55, 0.65, 0.58]
  gain = [0.2, 0.2, 0.01, 0.01, 0.01]
  _write(results, [_summary("rope", i, valid=a) for i, a in enumerate(rope)]
         + [_summary("bifocal_heads", i, valid=a + g) for i, (a, g) in enumerate(zip(rope, gain))])
  markdown = report_lib.report(preset, results)
  rows = _rows(markdown, "bifocal_heads (scratch) - rope (scratch)")
  assert [r[1] for r in rows] == ["5", "3"]           # every seed, then the added ones
  assert rows[0][3].startswith("+0.086")               # (2 * 0.2 + 3 * 0.01) / 5
  assert rows[1][3].startswith("**+0.010 [")           # the added seeds alone: decided
  assert "Seeds 2, 3, 4 alone" in markdown
  assert [r[1] for r in _rows(markdown, "rope |")] == ["5", "3"]


def test_report_names_tasks_not_learned_and_not_calibrated(tmp_path):
  preset = ex.Preset(tasks=(TASK, ex.TaskSpec("parity_check")), kinds=("rope",), seeds=(0,))
  with open(os.path.join(tmp_path, "budgets.json"), "w") as f:
    json.dump({"odds_first": {"budget": None, "max_steps": 3000, "curve": [[3000, 0.6]]}}, f)
  markdown = report_lib.report(preset, str(tmp_path))
  assert _rows(markdown, "odds_first")[0][1:] == ["**not learned**", "best 0.600", "3000"]
  assert _rows(markdown, "parity_check")[0][1] == "not calibrated yet"
  assert "Runs summarised: 0 (of the 0 the preset makes" in markdown  # none learned


def test_replace_block_keeps_the_text_around_it(tmp_path):
  path = str(tmp_path / "RESULTS.md")
  report_lib.replace_block(path, "first")
  with open(path, "a") as f:
    f.write("\nverdict written by hand\n")
  with open(path) as f:
    text = f.read()
  with open(path, "w") as f:
    f.write("# title\n\n" + text)
  report_lib.replace_block(path, "second")
  with open(path) as f:
    text = f.read()
  assert "first" not in text and "second" in text
  assert text.startswith("# title") and "verdict written by hand" in text
  assert text.count(report_lib.BEGIN_MARK) == 1 and text.count(report_lib.END_MARK) == 1


def _git(repo, *args):
  return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True,
                        text=True).stdout


def _repo_with_other_work(tmp_path):
  """A repository with someone's staged and unstaged changes beside a results dir."""
  repo = tmp_path / "repo"
  (repo / "results").mkdir(parents=True)
  _git(repo, "init", "-q")
  _git(repo, "config", "user.email", "t@example.com")
  _git(repo, "config", "user.name", "t")
  (repo / "work.py").write_text("a = 1\n")
  _git(repo, "add", "work.py")
  _git(repo, "commit", "-q", "-m", "start")
  (repo / "work.py").write_text("a = 2\n")  # unstaged
  (repo / "staged.py").write_text("b = 1\n")
  _git(repo, "add", "staged.py")  # staged, not for the sweep to commit
  return repo


def test_commit_takes_only_the_summary_and_waits_for_the_index_lock(tmp_path):
  repo = _repo_with_other_work(tmp_path)
  summary = repo / "results" / "seed0.json"
  summary.write_text("{}")
  lock = repo / ".git" / "index.lock"
  lock.write_text("")  # another git command at work: released a moment later
  import threading  # pylint: disable=g-import-not-at-top
  threading.Timer(0.8, lock.unlink).start()
  logged = []
  assert ex.git_commit_paths([str(summary)], "sweep: seed0", log=logged.append)
  assert logged == []
  assert _git(repo, "show", "--name-only", "--format=%s", "HEAD").split() == [
      "sweep:", "seed0", "results/seed0.json"]
  status = _git(repo, "status", "--porcelain").splitlines()
  assert sorted(status) == [" M work.py", "A  staged.py"]  # left as they were


def test_commit_outside_a_repository_logs_one_line_and_keeps_the_file(tmp_path):
  summary = tmp_path / "seed0.json"
  summary.write_text("{}")
  logged = []
  assert not ex.git_commit_paths([str(summary)], "sweep: seed0", log=logged.append)
  assert len(logged) == 1 and logged[0].startswith("not committed (sweep: seed0)")
  assert summary.read_text() == "{}"


def test_sweep_commits_each_summary_it_writes(tmp_path, monkeypatch):
  repo = _repo_with_other_work(tmp_path)
  sweep = ex.Sweep(PRESET, str(tmp_path / "out"), str(repo / "results"),
                   log=lambda m: None,
                   on_written=lambda paths, message: ex.git_commit_paths(paths, message))
  run = ex.Run(TASK, "rope", 0)
  monkeypatch.setattr(ex, "execute", lambda *a, **k: "done")
  monkeypatch.setattr(ex, "summary_of", lambda r, *a: {"run": r.name})
  monkeypatch.setattr(sweep, "pending", lambda: [run])
  monkeypatch.setattr(sweep, "budget", lambda task: 10)
  assert sweep.run() == {run.name: "done"}
  committed = _git(repo, "show", "--name-only", "--format=%s", "HEAD").splitlines()
  assert committed[0] == f"sweep (results): {run.name}"
  assert committed[-1] == os.path.relpath(run_summary.summary_path(str(repo / "results"), run), repo)


def test_each_command_logs_its_duration_and_a_resumed_run_counts_every_segment(tmp_path):
  log_path = str(tmp_path / "train.log")
  with ex._Stop() as stop:
    for seconds in (0.3, 0.2):  # a run stopped, then resumed by a later sweep
      status, tail = ex._execute(
          [sys.executable, "-c", f"import time; time.sleep({seconds}); print('step')"],
          log_path, stop)
      assert status == 0 and "step" in tail
  (tmp_path / "eval.log").write_text(f"$ eval.py\n{run_summary.TOOK}2.0 s (exit status 0)\n")
  assert 2.5 <= run_summary.logged_seconds(str(tmp_path)) < 2.5 + 10  # both segments and the eval
  assert run_summary.logged_seconds(str(tmp_path / "missing")) == 0.0


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs CPU affinity (not macOS) and two CPUs to tell a share from all")
def test_a_pinned_command_runs_on_its_cores_only(tmp_path):
  mine = sorted(os.sched_getaffinity(0))
  code = "import os; print('CORES', sorted(os.sched_getaffinity(0)))"
  with ex._Stop() as stop:
    for cores, expected in ((frozenset(mine[:1]), mine[:1]), (None, mine)):
      status, tail = ex._execute([sys.executable, "-c", code], str(tmp_path / "log"), stop, cores)
      assert status == 0 and f"CORES {expected}" in tail, tail


def test_concurrent_jobs_hold_disjoint_core_shares(tmp_path, monkeypatch):
  sweep = ex.Sweep(PRESET, str(tmp_path / "out"), str(tmp_path / "results"), log=lambda m: None,
                   pin_cores=True)
  runs = [ex.Run(TASK, "rope", seed) for seed in range(6)]
  monkeypatch.setattr(ex.machine, "core_slots", lambda jobs: [frozenset({k}) for k in range(jobs)])
  lock, in_flight, seen, overlaps = threading.Lock(), [], [], []

  def execute(unit, *args, cores=None, **kwargs):
    with lock:
      overlaps.extend(cores & c for c in in_flight if cores & c)
      in_flight.append(cores)
      seen.append(cores)
    time.sleep(0.05)
    with lock:
      in_flight.remove(cores)
    return "done"

  monkeypatch.setattr(ex, "execute", execute)
  monkeypatch.setattr(ex, "summary_of", lambda r, *a: {"run": r.name})
  monkeypatch.setattr(sweep, "pending", lambda: runs)
  monkeypatch.setattr(sweep, "budget", lambda task: 10)
  assert set(sweep.run(jobs=2).values()) == {"done"}
  assert not overlaps and set(seen) == {frozenset({0}), frozenset({1})}, (overlaps, seen)


def test_summary_seconds_include_segments_of_earlier_sweeps(tmp_path, monkeypatch):
  sweep = ex.Sweep(PRESET, str(tmp_path / "out"), str(tmp_path / "results"), log=lambda m: None)
  run = ex.Run(TASK, "rope", 0)
  os.makedirs(run.workdir(sweep.out))
  with open(os.path.join(run.workdir(sweep.out), "train.log"), "w") as f:
    f.write(f"{run_summary.TOOK}500.0 s (exit status -2)\n{run_summary.TOOK}100.5 s (exit status 0)\n")
  seconds = []
  monkeypatch.setattr(ex, "execute", lambda *a, **k: "done")
  monkeypatch.setattr(ex, "summary_of", lambda r, out, budget, s: seconds.append(s) or {})
  monkeypatch.setattr(sweep, "pending", lambda: [run])
  monkeypatch.setattr(sweep, "budget", lambda task: 10)
  assert sweep.run() == {run.name: "done"}
  assert seconds == [600.5]


def test_sweep_takes_up_runs_that_became_pending_in_order_and_tries_each_once(
    tmp_path, monkeypatch):
  sweep = ex.Sweep(PRESET, str(tmp_path / "out"), str(tmp_path / "results"), log=lambda m: None)
  first, second, third = (ex.Run(TASK, "rope", seed) for seed in range(3))
  executed, done, calibrated = [], set(), []

  def pending():  # `third` is calibrated while `first` runs, and goes before `second`
    runs = [first] + ([third] if calibrated else []) + [second]
    return [r for r in runs if r.name not in done]

  def execute(unit, *args, **kwargs):
    executed.append(unit.name)
    calibrated.append(True)
    status = "done" if unit != second else "failed"  # a failed run stays pending
    if status == "done":
      done.add(unit.name)
    return status

  monkeypatch.setattr(ex, "execute", execute)
  monkeypatch.setattr(ex, "summary_of", lambda r, *a: {"run": r.name})
  monkeypatch.setattr(sweep, "pending", pending)
  monkeypatch.setattr(sweep, "budget", lambda task: 10)
  statuses = sweep.run()
  assert executed == [first.name, third.name, second.name]  # third asked for before second
  assert statuses == {first.name: "done", second.name: "failed", third.name: "done"}


def test_a_run_the_results_choose_starts_in_the_sweep_that_landed_them(tmp_path, monkeypatch):
  # The preset adds `alibi` once `rope` seed 0 has its summary (as
  # roster_choices adds the five best once Dyck's roster is complete).
  results = str(tmp_path / "results")

  def extend(preset, results_dir):
    if not os.path.exists(os.path.join(results_dir, "odds_first/scratch/rope/seed0.json")):
      return preset
    return dataclasses.replace(preset, tasks=(dataclasses.replace(TASK, later_kinds=("alibi",)),))

  preset = ex.Preset(tasks=(TASK,), kinds=("rope",), seeds=(0,), extend=extend)
  monkeypatch.setattr(ex, "execute", lambda *a, **k: "done")
  monkeypatch.setattr(ex, "summary_of", lambda r, *a: {"run": r.name})
  for resolve, expected in ((None, ["rope"]), (lambda: preset.resolved(results), ["rope", "alibi"])):
    shutil.rmtree(results, ignore_errors=True)
    sweep = ex.Sweep(preset.resolved(results), str(tmp_path / "out"), results,
                     log=lambda m: None, resolve=resolve)
    monkeypatch.setattr(sweep, "budget", lambda task: 10)
    statuses = sweep.run()
    assert [name.split("/")[2] for name in statuses] == expected  # without resolve: next sweep


def test_sweep_stopped_by_a_signal_starts_no_further_round(tmp_path, monkeypatch):
  sweep = ex.Sweep(PRESET, str(tmp_path / "out"), str(tmp_path / "results"), log=lambda m: None)
  first, second = (ex.Run(TASK, "rope", seed) for seed in range(2))
  executed = []
  pending_calls = iter([[first], [second]])
  monkeypatch.setattr(ex, "execute", lambda unit, *a, **k: executed.append(unit.name) or "stopped")
  monkeypatch.setattr(sweep, "pending", lambda: next(pending_calls))
  monkeypatch.setattr(sweep, "budget", lambda task: 10)
  assert sweep.run() == {first.name: "stopped"}
  assert executed == [first.name]


def test_sweep_limit_counts_across_rounds(tmp_path, monkeypatch):
  sweep = ex.Sweep(PRESET, str(tmp_path / "out"), str(tmp_path / "results"), log=lambda m: None)
  runs = [ex.Run(TASK, "rope", seed) for seed in range(3)]
  pending_calls = iter([runs[:1], runs[1:], runs[2:]])
  monkeypatch.setattr(ex, "execute", lambda *a, **k: "done")
  monkeypatch.setattr(ex, "summary_of", lambda r, *a: {"run": r.name})
  monkeypatch.setattr(sweep, "pending", lambda: next(pending_calls))
  monkeypatch.setattr(sweep, "budget", lambda task: 10)
  assert list(sweep.run(limit=2)) == [runs[0].name, runs[1].name]


def _finished(results_dir, run, seconds):
  path = run_summary.summary_path(results_dir, run)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w") as f:
    json.dump({"task": run.task.name, "kind": run.kind, "arm": run.arm, "group": run.group,
               "seed": run.seed, "seconds": seconds}, f)


def _step_costs_file(path, kinds_over_rope: list[dict]) -> str:
  with open(path, "w") as f:
    json.dump({"results": [{"config": f"c{i}", "bifocal_over_rope": 1.25, "kinds_over_rope": k}
                           for i, k in enumerate(kinds_over_rope)]}, f)
  return str(path)


def test_expected_seconds_from_finished_runs_like_it(tmp_path):
  results = str(tmp_path / "results")
  costs = _step_costs_file(tmp_path / "costs.json", [{"nope": 0.9, "cope": 3.0},
                                                      {"nope": 1.5, "cope": 2.0}])
  sweep = ex.Sweep(PRESET, str(tmp_path / "out"), results, log=lambda m: None,
                   step_costs_file=costs)
  for seed, seconds in enumerate((100, 300, 200)):
    _finished(results, ex.Run(TASK, "rope", seed), seconds)
  _finished(results, ex.Run(TASK, "bifocal_heads", 0), 1000)
  assert sweep.expected_seconds(ex.Run(TASK, "rope", 7)) == 200  # its kind's median
  assert sweep.expected_seconds(ex.Run(TASK, "bifocal_heads", 1)) == 1000
  # A kind not run yet: its slowest step-time reading (a mixed kind: its slower
  # part's) times the task's pace, the median over kinds of time over cost:
  # rope 200 / 1.0, bifocal 1000 / 1.25: 500.
  assert sweep.expected_seconds(ex.Run(TASK, "nope", 0)) == pytest.approx(1.5 * 500)
  assert sweep.expected_seconds(ex.Run(TASK, "nope+cope", 0)) == pytest.approx(3.0 * 500)
  assert sweep.expected_seconds(ex.Run(TASK, "rope", 0, arm="continue")) == pytest.approx(500)
  # A kind the benchmark has not timed: the task and arm's longest run.
  assert sweep.expected_seconds(ex.Run(TASK, "alibi", 0)) == 1000
  no_costs = ex.Sweep(PRESET, str(tmp_path / "out"), results, log=lambda m: None,
                      step_costs_file=str(tmp_path / "absent.json"))
  assert no_costs.expected_seconds(ex.Run(TASK, "nope", 0)) == 1000
  assert no_costs.expected_seconds(ex.Run(TASK, "rope", 0, arm="continue")) is None
  other = dataclasses.replace(TASK, name="dyck")
  assert sweep.expected_seconds(ex.Run(other, "rope", 0)) is None  # nothing landed there


def test_stop_by_passes_over_runs_expected_to_end_after_it_for_the_next_that_fits(
    tmp_path, monkeypatch):
  results = str(tmp_path / "results")
  logged = []
  sweep = ex.Sweep(PRESET, str(tmp_path / "out"), results, log=logged.append)
  _finished(results, ex.Run(TASK, "rope", 0), 50)
  _finished(results, ex.Run(TASK, "bifocal_heads", 0), 5000)
  short, long, later = (ex.Run(TASK, "rope", 1), ex.Run(TASK, "bifocal_heads", 1),
                        ex.Run(TASK, "rope", 2))
  executed = []
  monkeypatch.setattr(ex, "execute", lambda unit, *a, **k: executed.append(unit.name) or "done")
  monkeypatch.setattr(ex, "summary_of", lambda r, *a: {"run": r.name})
  monkeypatch.setattr(sweep, "pending",
                      lambda: [r for r in (short, long, later) if r.name not in executed])
  monkeypatch.setattr(sweep, "budget", lambda task: 10)
  assert sweep.run(stop_by=time.time() + 600) == {short.name: "done", later.name: "done"}
  assert executed == [short.name, later.name]  # `long` passed over, the order kept otherwise
  passed = [m for m in logged if "not starting" in m]
  assert len(passed) == 1 and f"{long.name} (expected to take 5000 s)" in passed[0], logged
  executed.clear()
  assert sweep.run(stop_by=time.time() - 1) == {}  # past it: nothing, known or not
  assert sweep.run(stop_by=time.time() + 10_000) == {short.name: "done", long.name: "done",
                                                     later.name: "done"}


def test_a_run_trained_part_way_is_expected_to_take_only_what_is_left(tmp_path):
  results, out = str(tmp_path / "results"), str(tmp_path / "out")
  sweep = ex.Sweep(PRESET, out, results, log=lambda m: None)
  _finished(results, ex.Run(TASK, "rope", 0), 800)
  run = ex.Run(TASK, "rope", 1)
  workdir = run.workdir(out)
  assert run_summary.trained_fraction(workdir) == 0.0  # nothing there yet
  os.makedirs(os.path.join(workdir, "checkpoints", "250"))
  assert run_summary.trained_fraction(workdir) == 0.0  # no config: no budget to count against
  with open(os.path.join(workdir, "config.json"), "w") as f:
    json.dump({"steps": 1000}, f)
  # a save in progress (Orbax's temporary name) does not count
  os.makedirs(os.path.join(workdir, "checkpoints", "750.orbax-checkpoint-tmp-1"))
  assert run_summary.trained_fraction(workdir) == 0.25
  assert sweep.expected_seconds(run) == pytest.approx(600)
  os.makedirs(os.path.join(workdir, "checkpoints", "1000"))
  assert run_summary.trained_fraction(workdir) == 1.0
  assert sweep.expected_seconds(run) == pytest.approx(0)


_WAITS_FOR_SIGTERM = """
import signal, sys, time
signals = []
signal.signal(signal.SIGTERM, lambda *a: signals.append(1))
print('ready', flush=True)
deadline = time.time() + 60
while not signals and time.time() < deadline:
  time.sleep(0.01)
print('got', flush=True)
time.sleep(1.0)  # a second signal would land here
print('signals', len(signals), flush=True)
"""


def test_until_stops_the_runs_in_flight_once_each_and_starts_none(tmp_path, monkeypatch):
  logged = []
  sweep = ex.Sweep(PRESET, str(tmp_path / "out"), str(tmp_path / "results"), log=logged.append)
  runs = [ex.Run(TASK, "rope", seed) for seed in range(3)]
  monkeypatch.setattr(sweep, "pending", lambda: runs)
  monkeypatch.setattr(sweep, "budget", lambda task: 10)
  monkeypatch.setattr(ex, "_stages", lambda run, out, budget, evaluate: [
      ("train", run, [sys.executable, "-c", _WAITS_FOR_SIGTERM])])
  start = time.time()
  statuses = sweep.run(jobs=2, until=start + 3)
  assert statuses == {runs[0].name: "stopped", runs[1].name: "stopped"}  # the third not started
  assert 3 <= time.time() - start < 50
  for run in runs[:2]:
    with open(os.path.join(run.workdir(sweep.out), "train.log")) as f:
      log = f.read()
    assert "ready" in log and "signals 1" in log, log  # one signal: the trainer saves
  assert not os.path.exists(runs[2].workdir(sweep.out))
  assert sum("until" in m and "stopping the runs in flight" in m for m in logged) == 1, logged
  assert not any(os.path.exists(os.path.join(r.workdir(sweep.out), ex.FAILED_FILE)) for r in runs)


def test_a_command_started_after_the_stop_gets_the_signal_at_once(tmp_path):
  with ex._Stop() as stop:
    stop.stop(signal.SIGTERM, once=True)
    stop.stop(signal.SIGTERM, once=True)  # once: no second signal for anyone
    start = time.time()
    status, tail = ex._execute([sys.executable, "-c", _WAITS_FOR_SIGTERM], str(tmp_path / "log"),
                               stop)
  # killed before its handler was set, or caught the signal: either way it ended at once
  assert status == -signal.SIGTERM or "signals 1" in tail, tail
  assert time.time() - start < 50


def test_a_second_signal_is_passed_on_to_stop_the_commands_at_once(tmp_path):
  """A user's second Ctrl-C reaches the trainers (which then stop without
  saving); only `until`'s stop is sent once."""
  log_path = str(tmp_path / "log")
  with ex._Stop() as stop:
    result = {}
    worker = threading.Thread(target=lambda: result.update(out=ex._execute(
        [sys.executable, "-c", _WAITS_FOR_SIGTERM], log_path, stop)))
    worker.start()
    def wait_for(line):  # a line the child printed (the command's text has them too)
      deadline = time.time() + 60
      while time.time() < deadline and not (
          os.path.exists(log_path) and f"\n{line}\n" in open(log_path).read()):
        time.sleep(0.05)

    wait_for("ready")
    stop.stop(signal.SIGTERM)
    wait_for("got")  # handled before the next: the kernel merges a pending one
    stop.stop(signal.SIGTERM)
    stop.stop(signal.SIGTERM, once=True)  # already stopped: not sent
    worker.join(60)
  status, tail = result["out"]
  assert status == 0 and "signals 2" in tail, tail


@pytest.mark.parametrize("kind", [*runs_lib.KINDS, "cope", "rope+cope"])
def test_a_runs_config_names_its_sweep_kind(kind):
  """`kind_name` reads `kind_overrides` backwards: the analyses label a
  workdir's run as the sweep does (bifocal's two splits are two kinds)."""
  config = runs_lib.load_config("configs/dyck.py", runs_lib.kind_overrides(kind))
  assert runs_lib.kind_name(config.position) == kind


def test_parse_deadline():
  now = datetime.datetime(2026, 12, 4, 8, 0).timestamp()
  assert ex.parse_deadline("90m", now) == now + 5400
  assert ex.parse_deadline(" 2.5h", now) == now + 9000
  assert ex.parse_deadline("09:30", now) == now + 5400  # later today
  assert ex.parse_deadline("07:30", now) == now + 86400 - 1800  # tomorrow's
  assert ex.parse_deadline("2026-12-05T08:00", now) == now + 86400
  for value in ("soon", "-5m", "0h", "25:00", "", "m", "2026-13-01T00:00"):
    with pytest.raises(ValueError, match=f"stop_by={value!r}: expected a duration"):
      ex.parse_deadline(value, now)
  with pytest.raises(ValueError, match="until='soon': expected a duration"):
    ex.parse_deadline("soon", now, flag="until")


def test_published_subset_keeps_name_and_spans_the_file(tmp_path, published_dir):
  path = ex.published_file(str(tmp_path), "k8_m20.test", 5)
  assert os.path.basename(path) == "k8_m20.test"
  with open(os.path.join(published_dir, "k8_m20.test")) as f:
    source = [line for line in f if line.strip()]
  with open(path) as f:
    subset = f.readlines()
  assert len(subset) == 5
  assert subset[0] == source[0] and subset[-1] == source[-1]
  assert all(line in source for line in subset)
  assert ex.published_file(str(tmp_path), "k8_m20.test", None).startswith(published_dir)
  with pytest.raises(ValueError, match="max_lines=0"):
    ex.published_file(str(tmp_path), "k8_m20.test", 0)


def test_a_sweep_without_the_published_files_stops_first_saying_how_to_get_them(tmp_path):
  env = dict(os.environ, BIFOCAL_DATA_DIR=str(tmp_path / "empty"))
  proc = _cli("--preset=smoke", f"--out={tmp_path / 'out'}", f"--results={tmp_path / 'r'}",
              env=env, timeout=120)
  assert proc.returncode == 2 and not os.path.exists(tmp_path / "out" / "dyck")
  (line,) = proc.stderr.splitlines()
  assert "published Dyck file 'k8_m10.test' is not in" in line
  assert "python -m bifocal_jax.tasks.external fetch" in line


def _cli(*args, env=None, timeout=900):
  return subprocess.run([sys.executable, "-m", "experiments.extrapolation", *args], cwd=REPO,
                        capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture(scope="module")
def smoke(tmp_path_factory, compilation_cache_env, published_dir):
  """The smoke preset through the command line: calibration, then the sweep
  (its runs' subprocesses share the session's compilation cache)."""
  base = tmp_path_factory.mktemp("extrapolation")
  out, results = str(base / "out"), str(base / "results")
  env = helpers.subprocess_env(**compilation_cache_env)
  # Two runs at a time (--jobs): each run's start-up (imports) keeps one core busy.
  for extra in (["--calibrate"], [f"--results_md={base / 'RESULTS.md'}", "--jobs=2"]):
    proc = _cli("--preset=smoke", f"--out={out}", f"--results={results}", *extra, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  return base, out, results


@pytest.mark.slow
def test_smoke_sweep_end_to_end_and_the_report_from_summaries_alone(smoke):
  base, out, results = smoke
  preset = ex.PRESETS["smoke"]
  assert ex.load_budgets(results)["dyck"]["budget"] == 10
  for run in preset.runs():
    with open(run_summary.summary_path(results, run)) as f:
      summary = json.load(f)
    assert set(run.task.split_names) == set(summary["splits"]), run.name
    assert summary["splits"]["k8_m10.test"]["examples"] == 4
    if run.source() is None:  # the curve: step 5 on the checkpoint subsets, then the end
      assert list(summary["at_steps"]) == ["5", "10"], run.name
      assert summary["at_steps"]["5"]["k8_m10.test"]["examples"] == 2
      assert summary["at_steps"]["5"]["valid"]["examples"] == 16
    else:
      assert "at_steps" not in summary, run.name
  text = (base / "RESULTS.md").read_text()
  assert "Closing-bracket accuracy" in text and "Learned spectra" in text
  assert "bifocal_heads (surgery) - rope (continue)" in text
  # Another machine: no workdirs, only the committed summaries.
  shutil.rmtree(out)
  proc = _cli("--preset=smoke", f"--out={out}", f"--results={results}", "--summarize_only")
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert not os.path.exists(os.path.join(out, "dyck"))
  assert "bifocal_heads (surgery) - rope (continue)" in proc.stdout
  proc = _cli("--preset=smoke", f"--out={out}", f"--results={results}", "--dry_run")
  assert "0 runs to do" in proc.stdout


@pytest.mark.slow
def test_failed_run_is_recorded_and_the_sweep_goes_on(smoke, tmp_path):
  _, _, results = smoke
  bad_task = ex.TaskSpec("dyck", ("valid",), variant="tiny", overrides=(("batch_size", -3),))
  good_task = ex.PRESETS["smoke"].tasks[0]
  preset = ex.Preset(tasks=(bad_task,), kinds=("rope",), seeds=(7,))
  os.makedirs(tmp_path / "results")
  shutil.copy(os.path.join(results, ex.BUDGETS_FILE), tmp_path / "results")
  sweep = ex.Sweep(preset, str(tmp_path / "out"), str(tmp_path / "results"), log=lambda m: None)
  assert sweep.run() == {"dyck/scratch/rope/seed7": "failed"}
  with open(os.path.join(tmp_path / "out", "dyck/scratch/rope/seed7", ex.FAILED_FILE)) as f:
    failed = f.read()
  assert "stage: train" in failed and "exit status 2" in failed and "batch_size" in failed
  assert good_task.name == bad_task.name  # the budget it used was the smoke task's


def test_sweep_refuses_bad_jobs_and_a_second_sweep_on_the_same_out(tmp_path):
  sweep = ex.Sweep(PRESET, str(tmp_path), str(tmp_path / "results"), log=lambda m: None)
  with pytest.raises(ValueError, match="jobs=0"):
    sweep.run(jobs=0)
  with open(os.path.join(tmp_path, "sweep.lock"), "w") as held:
    fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
    with pytest.raises(ValueError, match="another sweep is running"):
      sweep.run()
  assert sweep.run() == {}  # the lock is free again; nothing calibrated, nothing to do


# ----------------------------------------------------------------------------
# Populations (the accelerator preset): one training per (task, kind).
# ----------------------------------------------------------------------------

POPULATIONS = ex.Preset(tasks=(TASK,), kinds=("rope", "bifocal_heads"), seeds=(0, 1),
                        calibrated=False, learning_rates=(1e-3, 3e-4))


def test_population_members_are_ordinary_runs_of_their_arms():
  populations = POPULATIONS.populations()
  assert [p.name for p in populations] == ["odds_first/population/rope",
                                           "odds_first/population/bifocal_heads"]
  members = populations[0].members()
  assert [m.name for m in members] == [
      "odds_first/scratch/rope/seed0", "odds_first/sensitivity/rope_lr0.0003/seed0",
      "odds_first/scratch/rope/seed1", "odds_first/sensitivity/rope_lr0.0003/seed1"]
  assert POPULATIONS.runs()[:4] == members and len(POPULATIONS.runs()) == 8
  assert members[3].workdir("/o") == "/o/odds_first/population/rope/members/3"
  assert members[3].overrides("/o", 400)["learning_rate"] == 3e-4  # its single run's
  train = populations[1].train_command("/o", 400)
  for flag in ("--workdir=/o/odds_first/population/bifocal_heads", "--config.steps=400",
               "--config.population.seeds=(0, 1)",
               "--config.population.learning_rates=(0.001, 0.0003)",
               "--config.position.kind=bifocal"):
    assert flag in train, flag
  evaluate = populations[1].eval_command("/o")
  assert "--member=all" in evaluate and "--spectrum" in evaluate
  assert POPULATIONS.calibration_runs() == []


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
  assert _rows(markdown, "odds_first")[0][1:] == [str(TASK.max_steps)]


@pytest.mark.slow
def test_population_sweep_one_command_at_a_time(tmp_path, compilation_cache_env):
  """`--limit 1`: one population trained and evaluated, a summary per member."""
  out, results = str(tmp_path / "out"), str(tmp_path / "results")
  env = helpers.subprocess_env(**compilation_cache_env)
  proc = _cli("--preset=population_smoke", f"--out={out}", f"--results={results}", "--limit=1",
              env=env)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  preset = ex.PRESETS["population_smoke"]
  done, left = preset.populations()
  for run in done.members():
    with open(run_summary.summary_path(results, run)) as f:
      summary = json.load(f)
    assert set(summary["splits"]) == set(run.task.split_names)
    assert summary["overrides"]["learning_rate"] == dict(run.setting)["learning_rate"]
    assert summary["overrides"]["seed"] == run.seed and summary["steps"] == 12
  assert not any(os.path.exists(run_summary.summary_path(results, r)) for r in left.members())
  assert "rope_lr0.01 (sensitivity) - rope (scratch)" in proc.stdout
  proc = _cli("--preset=population_smoke", f"--out={out}", f"--results={results}", "--dry_run")
  assert "4 runs to do" in proc.stdout


# ----------------------------------------------------------------------------
# Shards (`--shard i/N`): one sweep over several machines.
# ----------------------------------------------------------------------------

SHARDED = ex.Preset(tasks=(TASK, ex.TaskSpec("reverse_string", variant="tiny")),
                    kinds=("rope", "bifocal_heads", "alibi"), seeds=(0, 1, 2, 3),
                    protocol_tasks=("odds_first", "reverse_string"),
                    sensitivity_task="odds_first", sensitivity=PRESET.sensitivity)


def _budgets(results, tasks, budget=10):
  os.makedirs(results, exist_ok=True)
  with open(os.path.join(results, ex.BUDGETS_FILE), "w") as f:
    json.dump({t.name: {"budget": budget} for t in tasks}, f)


@pytest.mark.parametrize("count", [1, 2, 3, 7])
def test_shards_split_every_run_into_exactly_one_with_the_protocol_beside_its_source(
    tmp_path, count):
  results = str(tmp_path / "results")
  _budgets(results, SHARDED.tasks)
  everything = [r.name for r in ex.Sweep(SHARDED, str(tmp_path), results).pending()]
  shards = [[r.name for r in ex.Sweep(SHARDED, str(tmp_path), results, shard=(i, count)).pending()]
            for i in range(count)]
  assert sorted(sum(shards, [])) == sorted(everything) and len(everything) == 44
  by_name = {r.name: r for r in SHARDED.runs()}
  for i, names in enumerate(shards):
    for name in names:
      source = by_name[name].source()
      if source is not None:  # its source is here (in no other shard), and comes first
        assert names.index(source.name) < names.index(name), (name, i)
  if count > 1:
    assert all(shards), "a shard with no runs: the hash does not spread them"


def test_a_runs_shard_is_a_stable_hash_of_its_name_unchanged_by_edits_of_the_preset():
  smaller = dataclasses.replace(SHARDED, kinds=("rope",), seeds=(3,), sensitivity=())
  shard_in = {r.name: ex.shard_of(r, 5) for r in SHARDED.runs()}
  for run in smaller.runs():
    assert ex.shard_of(run, 5) == shard_in[run.name], run.name
  run = SHARDED.runs()[0]
  digest = hashlib.sha256(run.name.encode()).digest()
  assert ex.shard_of(run, 5) == int.from_bytes(digest[:8], "big") % 5
  members = POPULATIONS.runs()
  assert len({ex.shard_of(m, 5) for m in members if m.population == members[0].population}) == 1


def test_calibration_runs_are_sharded_too(tmp_path, monkeypatch):
  calibrated = []
  monkeypatch.setattr(ex, "execute", lambda run, *a, **k: calibrated.append(run.name) or "done")
  for i in range(3):
    ex.Sweep(SHARDED, str(tmp_path / f"out{i}"), str(tmp_path / "results"),
             log=lambda m: None, shard=(i, 3)).calibrate()
  assert sorted(calibrated) == sorted(r.name for r in SHARDED.calibration_runs())


@pytest.mark.parametrize("value, message", [
    ("1/0", "needs 0 <= i < N"), ("3/3", "needs 0 <= i < N"), ("-1/3", "needs 0 <= i < N"),
    ("1", "expected i/N"), ("a/b", "expected i/N"), ("1/2/3", "expected i/N")])
def test_bad_shards_are_one_clear_error(value, message):
  with pytest.raises(ValueError, match=f"shard={value!r}: {message}"):
    ex.parse_shard(value)
  assert ex.parse_shard("2/5") == (2, 5)


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
  monkeypatch.setattr(ex, "execute", lambda *a, **k: pytest.fail("a run started"))
  with pytest.raises(ValueError, match=f"{budgets}: not readable as JSON"):
    sweep.calibrate()
  with pytest.raises(ValueError, match=f"{budgets}: not readable as JSON"):
    sweep.pending()
  assert budgets.read_text() == '{"odds_first": {"budget": 4'
  assert ex.load_budgets(str(tmp_path / "none")) == {}  # absent: not calibrated yet


def test_dry_run_lists_the_shards_runs(tmp_path):
  names = []
  for shard in ("0/2", "1/2", None):
    proc = _cli("--preset=population_smoke", f"--out={tmp_path / 'out'}",
                f"--results={tmp_path / 'r'}", "--dry_run",
                *([f"--shard={shard}"] if shard else []), timeout=120)
    assert proc.returncode == 0, proc.stderr
    names.append(proc.stdout.splitlines()[:-1])
  assert sorted(names[0] + names[1]) == sorted(names[2]) and len(names[2]) == 8
  assert not set(names[0]) & set(names[1])
  bad = _cli("--preset=population_smoke", "--shard=2/2", "--dry_run", timeout=120)
  assert bad.returncode == 2 and "shard='2/2': needs 0 <= i < N" in bad.stderr
  bad = _cli("--preset=population_smoke", "--stop_by=soon", "--dry_run", timeout=120)
  assert bad.returncode == 2 and "stop_by='soon': expected a duration" in bad.stderr
  bad = _cli("--preset=population_smoke", "--until=25:00", "--dry_run", timeout=120)
  assert bad.returncode == 2 and "until='25:00': expected a duration" in bad.stderr
  broken = tmp_path / "broken"
  broken.mkdir()
  (broken / "budgets.json").write_text("{")
  bad = _cli("--preset=smoke", f"--results={broken}", f"--out={tmp_path / 'o'}", "--dry_run",
             timeout=120)
  assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
      f"error: {broken / 'budgets.json'}: not readable as JSON (Expecting property name enclosed "
      "in double quotes: line 1 column 2 (char 1)); fix it or restore it (git checkout) before the "
      "sweep or its report reads it"], bad.stderr


def test_the_converged_sweep_runs_the_roster_after_the_verdicts_seeds():
  """Every position kind of the registry that the decoder takes is a Dyck
  kind of the converged sweep (issue 31's roster), after all seeds of the
  verdict's kinds; the cpu sweep keeps its kinds."""
  from bifocal_jax.nn import positions
  runs = [r for r in ex.PRESETS["converged"].runs() if r.task.name == "dyck" and r.arm == "scratch"]
  kinds = {r.kind for r in runs}
  decoder = {k for k in positions.POSITION_KINDS if positions.get(k).decoder} - {"bifocal"}
  assert decoder | {"bifocal_heads", "bifocal_pairs"} == kinds
  assert "randomized_relative" not in kinds  # encoder only
  first_roster = min(i for i, r in enumerate(runs) if r.kind in runs_lib.ROSTER_KINDS)
  assert {(r.kind, r.seed) for r in runs[:first_roster]} == {
      (k, s) for k in runs_lib.VERDICT_KINDS for s in ex.PRESETS["converged"].seeds}
  assert {r.kind for r in ex.PRESETS["cpu"].runs()} <= set(runs_lib.VERDICT_KINDS)
  assert all(runs_lib.kind_overrides(k) == {"position.kind": k} for k in runs_lib.ROSTER_KINDS)


def test_the_converged_sweep_runs_the_protocol_model_on_both_depth_tasks_before_the_roster():
  """Issue 30 item 3: the Chomsky-hierarchy protocol's 5-layer model (width 64,
  8 heads, batch 128) on Dyck and on listops_depth, each sharing its 2-layer
  task's config (so the report sets the two sizes side by side), the six kinds
  x 5 seeds, every one of its runs before the first roster run."""
  preset = ex.PRESETS["converged"]
  by_name = {t.name: t for t in preset.tasks}
  for small, large in (("dyck", "dyck_5layer"), ("listops_depth", "listops_depth_5layer")):
    assert by_name[small].config == by_name[large].config
    model = dict(by_name[large].overrides)
    assert {k: model[k] for k in ("model.num_layers", "model.d_model", "model.num_heads",
                                  "batch_size")} == {"model.num_layers": 5, "model.d_model": 64,
                                                     "model.num_heads": 8, "batch_size": 128}
    assert dict(by_name[small].overrides)["model.num_layers"] == 2
  runs = [r for r in preset.runs() if r.arm == "scratch"]
  first_roster = min(i for i, r in enumerate(runs) if r.kind in runs_lib.ROSTER_KINDS)
  assert {(r.kind, r.seed) for r in runs[:first_roster] if r.task.name == "listops_depth_5layer"
          } == {(k, s) for k in ("nope", "rope", "alibi", "spectral", "bifocal_heads",
                                 "bifocal_pairs") for s in range(5)}
  assert not [r for r in runs[first_roster:] if r.task.name.endswith("5layer")
              and r.kind not in runs_lib.ROSTER_KINDS]
  # Its time axis: 1x, 2x, 4x its own just-fit budget (500 steps), 8x the cap (kept checkpoints:
  # test_every_checkpoint_a_converged_run_is_evaluated_at_is_kept).
  large = by_name["listops_depth_5layer"]
  assert large.max_steps == 4000 and large.checkpoint_steps(4000) == (500, 1000, 2000)


def test_the_converged_chomsky_sweep_runs_every_encoder_kind():
  from bifocal_jax.nn import positions
  preset = ex.PRESETS["converged_chomsky"]
  kinds = {r.kind for r in preset.runs()}
  encoder = {k for k in positions.POSITION_KINDS if positions.get(k).encoder} - {"bifocal"}
  assert kinds == encoder | {"bifocal_heads", "bifocal_pairs"}
  assert "fire" not in kinds and "kerple_log" not in kinds  # causal in their sources
  assert {r.task.name for r in preset.calibration_runs()} == set(presets_lib._CHOMSKY_JUST_FIT)
  # The verdict's kinds (issue 30) for every seed of every task before the roster (issue 31).
  runs = preset.runs()
  first_roster = min(i for i, r in enumerate(runs) if r.kind in runs_lib.ROSTER_KINDS)
  assert {(r.task.name, r.kind, r.seed) for r in runs[:first_roster]} == {
      (t, k, s) for t in presets_lib._CHOMSKY_JUST_FIT for k in runs_lib.VERDICT_KINDS
      for s in preset.seeds}
