"""The trainer end to end on the tiny Dyck config (issue #4): the loss falls,
checkpoints and metrics appear, Spectral Evolution's trajectory starts at the
geometric spectrum, runs resume, and sharded runs on 8 fake CPU devices
reproduce the single-device run (and hand their checkpoints back to it)."""

import json
import os

import jax
import numpy as np
import pytest

import helpers
from bifocal_jax.evaluation import spectrum
from bifocal_jax import geometric_frequencies
from bifocal_jax.nn import model as model_lib
from bifocal_jax.training import state as state_lib
from bifocal_jax.training import steps
from bifocal_jax import train
from bifocal_jax.training import workdir as workdir_lib

pytestmark = pytest.mark.usefixtures("persistent_compiles")

REQUIRED_METRICS = ("step", "loss", "steps_per_sec", "tokens_per_sec", "learning_rate",
                    "spectral_learning_rate", "grad_norm", "spectral_grad_norm", "spectral_drift")


@pytest.fixture(scope="module")
def bifocal_run(tmp_path_factory):
  """The test config trained to the end in this process: `(workdir, config, summary)`."""
  workdir = str(tmp_path_factory.mktemp("bifocal"))
  config = helpers.tiny_config()
  return workdir, config, train.train_and_evaluate(config, workdir)


def losses(records, steps):
  by_step = {r["step"]: r["loss"] for r in records}
  return np.array([by_step[s] for s in steps])


def test_loss_falls_and_checkpoints_appear(bifocal_run):
  workdir, config, summary = bifocal_run
  records = helpers.read_metrics(workdir)
  assert [r["step"] for r in records] == list(range(1, config.steps + 1))
  loss = losses(records, range(1, config.steps + 1))
  assert np.all(np.isfinite(loss))
  assert loss[-5:].mean() < 0.6 * loss[:5].mean()
  assert helpers.checkpoint_steps(workdir) == [10, 20, 30]
  assert summary["step"] == 30 and summary["loss"] == records[-1]["loss"]


def test_workdir_keeps_the_resolved_config_the_metrics_and_tensorboard(bifocal_run):
  workdir, config, _ = bifocal_run
  with open(os.path.join(workdir, "config.json")) as f:
    assert json.load(f) == workdir_lib.config_to_json(config)
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    records = [json.loads(line) for line in f]
  for record in records:
    assert set(REQUIRED_METRICS) <= set(record), record
    assert record["tokens_per_sec"] > 0
  assert max(r["learning_rate"] for r in records) == pytest.approx(config.learning_rate)
  # Evaluated on `valid` every `eval_every` steps, and only then.
  evaluated = [r["step"] for r in records if "valid_token_accuracy" in r]
  assert evaluated == [10, 20, 30]
  assert 0 < records[-1]["valid_token_accuracy"] <= 1
  events = os.listdir(os.path.join(workdir, "tensorboard"))
  assert any(name.startswith("events.out.tfevents") for name in events)


def test_evaluates_every_eval_every_steps_where_log_every_does_not_divide_them(tmp_path):
  """eval_every=6 beside log_every=4: the valid evaluations come at 6 and 12,
  logged with the window since the last record (steps 5-6, 9-12)."""
  config = helpers.tiny_config({"steps": 12, "log_every": 4, "eval_every": 6,
                                "checkpoint_every": 12, "spectral.freeze_steps": 0})
  train.train_and_evaluate(config, str(tmp_path))
  records = helpers.read_metrics(str(tmp_path))
  assert [r["step"] for r in records] == [4, 6, 8, 12]
  assert [r["step"] for r in records if "valid_token_accuracy" in r] == [6, 12]


def test_trajectory_starts_geometric_stays_through_the_freeze_then_evolves(bifocal_run):
  workdir, config, _ = bifocal_run
  steps, frequencies = spectrum.load_trajectory(workdir)
  np.testing.assert_array_equal(steps, np.arange(0, 31, 5))
  _, heads, head_dim, _ = model_lib.resolved_dims(config.model)
  geometric = geometric_frequencies(head_dim, config.position.base)
  # Bifocal by heads: half of the heads are spectral eyes.
  assert frequencies.shape == (len(steps), config.model.num_layers, heads // 2, head_dim // 2)
  np.testing.assert_allclose(frequencies[0], np.broadcast_to(geometric, frequencies[0].shape),
                             rtol=1e-6)
  frozen = steps <= config.spectral.freeze_steps
  for record in frequencies[frozen]:
    np.testing.assert_array_equal(record, frequencies[0])
  for record in frequencies[~frozen]:
    assert np.abs(np.log(record / frequencies[0])).max() > 1e-3
  drift = {r["step"]: r["spectral_drift"] for r in helpers.read_metrics(workdir)}
  assert drift[10] == 0 and drift[11] > 0


@pytest.mark.parametrize("kind", ["spectral", "rope"])
def test_spectral_frequencies_evolve_and_fixed_rope_has_an_empty_trajectory(kind, tmp_path):
  overrides = {"position.kind": kind, "steps": 10, "spectral.freeze_steps": 0}
  train.train_and_evaluate(helpers.tiny_config(overrides), str(tmp_path))
  steps, frequencies = spectrum.load_trajectory(str(tmp_path))
  drift = [r["spectral_drift"] for r in helpers.read_metrics(tmp_path)]
  if kind == "rope":
    assert frequencies.size == 0
    assert not any(drift)
  else:
    np.testing.assert_array_equal(steps, [0, 5, 10])
    assert frequencies.shape[1:] == (1, 4, 4)  # [layers, heads, pairs]: one spectrum per head
    for record in frequencies[1:]:
      assert np.abs(np.log(record / frequencies[0])).max() > 1e-3
    assert all(d > 0 for d in drift)


def test_rerun_after_completion_resumes_instead_of_restarting(bifocal_run, capsys):
  workdir, config, _ = bifocal_run
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    metrics_before = f.read()
  summary = train.train_and_evaluate(config, workdir)
  assert summary["step"] == 30 and summary["loss"] == helpers.read_metrics(workdir)[-1]["loss"]
  out = capsys.readouterr().out
  assert out == (f"{workdir} already finished: it holds step 30 of 30, nothing to train; "
                 f"evaluate it with: python -m bifocal_jax.eval --workdir {workdir}\n")
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    assert f.read() == metrics_before
  assert helpers.checkpoint_steps(workdir) == [10, 20, 30]


def test_sigint_saves_the_step_and_rerunning_resumes_exactly(bifocal_run, tmp_path, capsys):
  _, config, _ = bifocal_run
  workdir = str(tmp_path)
  summary = train.train_and_evaluate(config, workdir, hooks=[helpers.SignalAfter(15, "INT")])
  assert summary["preempted_at"] == 15
  assert "preempted (SIGINT): saved step 15" in capsys.readouterr().out
  assert helpers.checkpoint_steps(workdir) == [10, 15]
  train.train_and_evaluate(config, workdir)
  assert "resuming" in capsys.readouterr().out
  # Same process, same compiled step: resuming changes nothing, bit for bit.
  assert helpers.read_metrics(workdir) == helpers.read_metrics(bifocal_run[0])


# ----------------------------------------------------------------------------
# 8 fake CPU devices.
# ----------------------------------------------------------------------------

MESHES = {"data4_model2": dict(data=4, fsdp=1, model=2), "fsdp8": dict(data=1, fsdp=8, model=1)}

SHARDED_RUNS = """
import os, sys
import helpers
from bifocal_jax.training import state as state_lib
from bifocal_jax.training import steps
from bifocal_jax import train
from bifocal_jax.training import workdir as workdir_lib
assert len(__import__("jax").devices()) == 8
stop = helpers.SignalAfter(20, "TERM")  # stop (checkpointed) after step 20
for name, mesh in {meshes}.items():
  config = helpers.tiny_config()
  config.mesh.update(mesh)
  summary = train.train_and_evaluate(config, os.path.join({base!r}, name), hooks=[stop])
  assert summary["preempted_at"] == 20
"""


@pytest.fixture(scope="module")
def sharded_runs(tmp_path_factory, compilation_cache_env):
  """The test config for 20 steps on 8 devices, once per mesh of `MESHES`."""
  base = str(tmp_path_factory.mktemp("sharded"))
  helpers.run_python(SHARDED_RUNS.format(meshes=MESHES, base=base), devices=8,
                     **compilation_cache_env)
  return base


@pytest.mark.slow
@pytest.mark.parametrize("mesh", sorted(MESHES))
def test_eight_devices_reproduce_the_single_device_losses(sharded_runs, bifocal_run, mesh):
  records = helpers.read_metrics(os.path.join(sharded_runs, mesh))[:20]
  assert [r["step"] for r in records] == list(range(1, 21))
  np.testing.assert_allclose(losses(records, range(1, 21)),
                             losses(helpers.read_metrics(bifocal_run[0]), range(1, 21)), rtol=1e-4)


@pytest.mark.slow
def test_checkpoint_of_eight_devices_resumes_on_one(sharded_runs, bifocal_run, capsys):
  """A topology change: written with (data=4, model=2), restored onto 1 device."""
  assert jax.device_count() == 1
  workdir = os.path.join(sharded_runs, "data4_model2")
  train.train_and_evaluate(helpers.tiny_config(), workdir)  # `mesh` may change between runs
  assert f"resuming {workdir} from step 20" in capsys.readouterr().out
  records = helpers.read_metrics(workdir)
  assert [r["step"] for r in records] == list(range(1, 31))
  np.testing.assert_allclose(losses(records, range(21, 31)),
                             losses(helpers.read_metrics(bifocal_run[0]), range(21, 31)), rtol=1e-4)


def test_loss_covers_loss_mask_and_accuracy_the_scored_positions():
  # stack_manipulation: their loss trains on the padding after END, their
  # accuracy does not score it; one length per batch of fresh examples.
  from bifocal_jax import configs  # pylint: disable=g-import-not-at-top
  from bifocal_jax.training import config as config_lib, sharding  # pylint: disable=g-import-not-at-top
  from bifocal_jax import tasks
  from bifocal_jax.tasks import pipeline  # pylint: disable=g-import-not-at-top
  config = configs.load_file(os.path.join(helpers.ROOT, "configs", "stack_manipulation.py"),
                                "tiny")
  config.data.examples, config.data.lengths = "fresh", "per_batch"
  config_lib.validate(config, num_devices=jax.device_count())
  task = tasks.get_task(config.task)
  mesh = sharding.make_mesh(config.mesh)
  batch = next(iter(pipeline.train_dataset(task, batch_size_per_process=config.batch_size,
                                           seed=0, buckets=(32,), examples="fresh",
                                           lengths="per_batch")))
  assert len(set(batch["length"].tolist())) == 1
  with jax.set_mesh(mesh):
    s, state = state_lib.setup(config, mesh, task=task)
    _, metrics = steps.make_train_step(s)(state, steps.to_global_batch(batch, mesh))
  assert float(metrics["loss_weight"]) == batch["loss_mask"].sum() > batch["mask"].sum()
  assert int(metrics["token_total"]) == batch["mask"].sum()
