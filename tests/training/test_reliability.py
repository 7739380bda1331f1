"""Runs survive what kills research runs (issue #8): preemption, `kill -9` at
any point, damaged checkpoints, non-finite values and workdir mix-ups. Each
test is one guarantee of docs/reliability.md."""

import json
import os
import shutil

import jax
import numpy as np
import pytest

import helpers
from bifocal_jax.training import checkpoint as checkpoint_lib
from bifocal_jax import train
from bifocal_jax.training import sharding as sharding_lib
from bifocal_jax.training import state as state_lib
from bifocal_jax.training import steps
from bifocal_jax.training import workdir as workdir_lib

pytestmark = pytest.mark.usefixtures("persistent_compiles")

# Metrics every 4 steps: checkpoints (every 10 steps, or at a signal) then fall
# inside a logging window, whose partial sums a resumed run must pick up.
OVERRIDES = {"log_every": 4}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, compilation_cache_env):
  """`train.py` on the test config, start to end: the reference run."""
  workdir = tmp_path_factory.mktemp("uninterrupted")
  result = helpers.run_train(workdir, OVERRIDES, **compilation_cache_env)
  assert result.returncode == 0, result.stdout + result.stderr
  return workdir


def assert_same_run(workdir, reference):
  """Parameters, optimizer state, trajectory and every metric (but timings) bitwise equal."""
  step, state, trajectory = helpers.latest_checkpoint(workdir)
  ref_step, ref_state, ref_trajectory = helpers.latest_checkpoint(reference)
  assert step == ref_step == 30
  assert state.keys() == ref_state.keys()
  assert any("opt_state" in k for k in state) and any("params" in k for k in state)
  for key in ref_state:
    np.testing.assert_array_equal(state[key], ref_state[key], err_msg=key)
  for key in ref_trajectory:
    np.testing.assert_array_equal(trajectory[key], ref_trajectory[key], err_msg=key)
  assert helpers.read_metrics(workdir) == helpers.read_metrics(reference)


@pytest.mark.slow
def test_sigterm_then_kill9_at_three_points_ends_bitwise_identical(uninterrupted, tmp_path,
                                                                   compilation_cache_env):
  """The same command, re-run after each death, ends where an uninterrupted run
  ends. `signal_after="STEP:NAME"` makes train.py signal itself after STEP."""
  workdir = tmp_path / "run"

  def run(signal=None):
    return helpers.run_train(workdir, OVERRIDES, signal_after=signal, **compilation_cache_env)

  # Preemption: the current step is saved, then a clean exit with a message.
  result = run("7:TERM")
  assert result.returncode == 0, result.stderr
  assert "preempted (SIGTERM): saved step 7" in result.stdout
  assert helpers.checkpoint_steps(workdir) == [7]
  # kill -9 between checkpoints: resumes from the newest (7), then dies after 13.
  result = run("13:KILL")
  assert result.returncode == -9 and "resuming" in result.stdout and "from step 7" in result.stdout
  assert helpers.checkpoint_steps(workdir) == [7, 10]
  # kill -9 while step 20 is being saved asynchronously: that save never finishes.
  result = run("20:KILL")
  assert result.returncode == -9 and "from step 10" in result.stdout
  assert helpers.checkpoint_steps(workdir) == [7, 10]
  assert any(p.name.startswith("20.") for p in (workdir / "checkpoints").iterdir())
  result = run("25:KILL")
  assert result.returncode == -9 and "from step 10" in result.stdout
  assert helpers.checkpoint_steps(workdir) == [7, 10, 20]
  result = run()
  assert result.returncode == 0 and "from step 20" in result.stdout
  assert_same_run(workdir, uninterrupted)


# Reading a damaged checkpoint leaves Orbax's other pending reads to fail when
# they are garbage-collected: expected, and not worth a warning per test.
abandoned_reads = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


def array_data_file(checkpoint):
  """The largest of the files holding the train state's arrays (Orbax's OCDBT store)."""
  return max((checkpoint / "state" / "ocdbt.process_0" / "d").iterdir(),
             key=lambda p: p.stat().st_size)


def damage_checkpoint(workdir, step: int, how: str) -> None:
  checkpoint = workdir / "checkpoints" / str(step)
  if how == "truncated array data":
    victim = array_data_file(checkpoint)
    os.truncate(victim, victim.stat().st_size // 2)
  elif how == "missing array data":
    array_data_file(checkpoint).unlink()
  else:  # "missing metadata": the step, process count and metrics window
    (checkpoint / "meta" / "metadata").unlink()


@abandoned_reads
@pytest.mark.parametrize("how", ["truncated array data", "missing array data", "missing metadata"])
def test_damaged_newest_checkpoint_falls_back_to_an_intact_one(uninterrupted, tmp_path, how,
                                                                capsys):
  workdir = tmp_path / "run"
  shutil.copytree(uninterrupted, workdir)
  damage_checkpoint(workdir, 30, how)
  config = helpers.tiny_config()
  mesh = sharding_lib.make_mesh(config.mesh)
  with jax.set_mesh(mesh):
    s, _ = state_lib.setup(config, mesh)
    with checkpoint_lib.Checkpointer(str(workdir), save_every=10, keep=3) as ckpt:
      step, _, _ = ckpt.restore_latest(s.abstract_state)
  assert step == 20
  warning = capsys.readouterr().out
  assert f"checkpoint {workdir}/checkpoints/30 is damaged" in warning
  assert "falling back" in warning and "Error" in warning  # names what went wrong
  # Set aside, out of the way of step 30's new save.
  assert helpers.checkpoint_steps(workdir) == [10, 20]
  assert (workdir / "damaged_checkpoints" / "30" / "state").is_dir()


@abandoned_reads
def test_resume_past_a_damaged_checkpoint_ends_like_the_uninterrupted_run(uninterrupted, tmp_path,
                                                                         capsys):
  workdir = tmp_path / "run"
  shutil.copytree(uninterrupted, workdir)
  damage_checkpoint(workdir, 30, "truncated array data")
  train.train_and_evaluate(helpers.tiny_config(OVERRIDES), str(workdir))
  out = capsys.readouterr().out
  assert "checkpoints/30 is damaged" in out and "from step 20" in out
  assert_same_run(workdir, uninterrupted)


@abandoned_reads
def test_every_checkpoint_damaged_is_an_error_not_a_fresh_start(uninterrupted, tmp_path):
  workdir = tmp_path / "run"
  shutil.copytree(uninterrupted, workdir)
  for step in (10, 20, 30):
    damage_checkpoint(workdir, step, "missing array data")
  config = helpers.tiny_config()
  mesh = sharding_lib.make_mesh(config.mesh)
  with jax.set_mesh(mesh):
    s, _ = state_lib.setup(config, mesh)
    with checkpoint_lib.Checkpointer(str(workdir), save_every=10, keep=3) as ckpt:
      with pytest.raises(checkpoint_lib.CheckpointError, match="every checkpoint .* is damaged"):
        ckpt.restore_latest(s.abstract_state)


# ----------------------------------------------------------------------------
# Non-finite values.
# ----------------------------------------------------------------------------


def poison_training_batch(monkeypatch, step: int):
  """Makes the loss of training step `step` NaN (a NaN in its loss mask)."""
  calls = []
  to_global_batch = steps.to_global_batch

  def poisoned(batch, mesh, fields=steps.TRAIN_FIELDS):
    if fields == steps.TRAIN_FIELDS:  # not an evaluation batch
      calls.append(None)
      if len(calls) == step:
        batch = dict(batch, loss_mask=np.full_like(batch["loss_mask"], np.nan))
    return to_global_batch(batch, mesh, fields)

  monkeypatch.setattr(steps, "to_global_batch", poisoned)


def test_nan_loss_stops_naming_the_step_and_keeps_the_last_good_checkpoint(tmp_path, monkeypatch,
                                                                           capsys):
  poison_training_batch(monkeypatch, 13)
  workdir = tmp_path / "run"
  with pytest.raises(SystemExit) as exit_info:
    train.run_training(helpers.tiny_config(), str(workdir))
  assert exit_info.value.code == 1
  err = capsys.readouterr().err.strip()
  assert err.startswith("error: non-finite loss at step 13") and "\n" not in err
  assert helpers.checkpoint_steps(workdir) == [10]  # nothing of the bad state was saved


def test_nan_policy_skip_drops_the_bad_update_and_goes_on(tmp_path, monkeypatch):
  poison_training_batch(monkeypatch, 13)
  workdir = tmp_path / "run"
  summary = train.train_and_evaluate(helpers.tiny_config({"nan_policy": "skip"}), str(workdir))
  assert summary["step"] == 30
  skipped = {r["step"]: r["skipped_steps"] for r in helpers.read_metrics(workdir)}
  assert skipped[13] == 1 and sum(skipped.values()) == 1
  _, state, _ = helpers.latest_checkpoint(workdir)
  assert all(np.all(np.isfinite(v)) for k, v in state.items() if "params" in k)


# ----------------------------------------------------------------------------
# Workdir conflicts.
# ----------------------------------------------------------------------------


def test_workdir_of_another_config_is_refused_listing_the_keys(uninterrupted, tmp_path, capsys):
  workdir = tmp_path / "run"
  shutil.copytree(uninterrupted, workdir)
  before = sorted(str(p) for p in workdir.rglob("*"))
  config = helpers.tiny_config({"learning_rate": 1e-3, "model.num_layers": 2})
  with pytest.raises(SystemExit) as exit_info:
    train.run_training(config, str(workdir))
  assert exit_info.value.code == 2
  err = capsys.readouterr().err.strip()
  assert "\n" not in err and "--overwrite" in err
  reference = helpers.tiny_config()
  assert f"learning_rate: {reference.learning_rate!r} -> 0.001" in err
  assert f"model.num_layers: {reference.model.num_layers} -> 2" in err
  assert sorted(str(p) for p in workdir.rglob("*")) == before


def test_runtime_keys_may_change_and_overwrite_clears_the_old_run(uninterrupted, tmp_path):
  workdir = tmp_path / "run"
  shutil.copytree(uninterrupted, workdir)
  runtime = helpers.tiny_config({"log_every": 5, "mesh.data": 1, "keep_checkpoints": 1})
  workdir_lib.check_config(str(workdir), runtime, overwrite=False)  # no error
  other = helpers.tiny_config({"seed": 1})
  with pytest.raises(workdir_lib.WorkdirConflictError, match="seed: 0 -> 1"):
    workdir_lib.check_config(str(workdir), other, overwrite=False)
  workdir_lib.check_config(str(workdir), other, overwrite=True)
  assert sorted(p.name for p in workdir.iterdir()) == []
  with open(uninterrupted / "config.json") as f:
    assert json.load(f)["seed"] == 0  # the reference is untouched
