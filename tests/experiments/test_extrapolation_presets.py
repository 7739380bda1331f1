"""The extrapolation sweep's presets and runs (experiments/extrapolation/runs.py,
presets.py): each run's name, arm and commands, the order a preset runs them in,
the checkpoints a run keeps, populations' members, and the converged presets'
run lists."""

import dataclasses
import json
import os

import pytest

from extrapolation_helpers import POPULATIONS, PRESET, TASK

from experiments.extrapolation import presets as presets_lib
from experiments.extrapolation import runs as runs_lib
from experiments.extrapolation import sweep as ex

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
  with pytest.raises(ValueError, match=r"scheme 'rope\+rope': mixes 'rope' with itself"):
    ex.Run(TASK, "rope+rope", 0).train_command("/o", 400)


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
  assert runs_lib.checkpoint_results_path("/o/w", 1000) == "/o/w/eval/results_step1000.json"
  with pytest.raises(ValueError, match="just_fit"):
    ex.TaskSpec("dyck", at_multiples=(1,)).checkpoint_steps(100)


@pytest.mark.parametrize("kind", [*runs_lib.VERDICT_KINDS, "cope", "rope+cope"])
def test_a_runs_config_names_its_sweep_kind(kind):
  """`kind_name` reads `kind_overrides` backwards: the analyses label a
  workdir's run as the sweep does (bifocal's two splits are two kinds)."""
  config = runs_lib.load_config("configs/dyck.py", runs_lib.kind_overrides(kind))
  assert runs_lib.kind_name(config.position) == kind


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


def test_the_converged_sweep_runs_the_roster_after_the_verdicts_seeds():
  """Every position kind of the registry that the decoder takes, but a later
  question's (`QUESTION_KINDS`), is a Dyck kind of the converged sweep (the
  roster), after all seeds of the verdict's kinds; the cpu sweep keeps its kinds."""
  from bifocal_jax.nn import positions
  runs = [r for r in ex.PRESETS["converged"].runs() if r.task.name == "dyck" and r.arm == "scratch"]
  kinds = {r.kind for r in runs}
  decoder = {k for k in positions.POSITION_KINDS if positions.get(k).decoder} - {"bifocal"}
  assert decoder - set(runs_lib.QUESTION_KINDS) | {"bifocal_heads", "bifocal_pairs"} == kinds
  assert not kinds & set(runs_lib.QUESTION_KINDS)
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
