"""Population training (issue #16, item 7) on the tiny Dyck config: members
compute their single runs, one compiled program trains them all, a member
that goes non-finite is frozen and reported while the others train on, runs
resume bit for bit, and each member is evaluated on its own."""

import json
import os
import shutil
import subprocess
import sys

import jax
import numpy as np
import pytest

import helpers
from bifocal_jax.evaluation import spectrum
from bifocal_jax.training import config as config_lib
from bifocal_jax.evaluation import evaluate
from bifocal_jax.training import population
from bifocal_jax.training import sharding as sharding_lib
from bifocal_jax.training import state as state_lib
from bifocal_jax.training import steps
from bifocal_jax import train
from bifocal_jax.training import workdir as workdir_lib
from bifocal_jax.tasks import pipeline

pytestmark = pytest.mark.usefixtures("persistent_compiles")

# 2 seeds x 2 learning rates; 1e30 sends a member's loss to inf within three steps
# (Adam's update is about the learning rate, whatever the gradient): members 1 and 3.
GOOD_RATE, BAD_RATE = 3e-3, 1e30
POPULATION = {"population.seeds": (0, 1), "population.learning_rates": (GOOD_RATE, BAD_RATE),
              "population.spectral_learning_rates": (0.05,), "spectral.freeze_steps": 0,
              "steps": 20, "log_every": 4}  # a preemption at 15 saves a window holding NaNs
GOOD, BAD = (0, 2), (1, 3)


def single_losses(config, member, num_steps, mesh, buckets) -> np.ndarray:
  """The per-step losses of `member`'s single run (the ordinary step and data)."""
  c = population.member_config(config, member)
  s, state = state_lib.setup(c, mesh)
  train_step = steps.make_train_step(s)
  data = iter(pipeline.train_dataset(s.task, batch_size_per_process=c.batch_size, seed=c.seed,
                                     buckets=buckets))
  out = []
  for _ in range(num_steps):
    state, metrics = train_step(state, steps.to_global_batch(next(data), mesh))
    out.append(float(metrics["loss"]))
  return np.array(out)


def test_members_compute_their_single_runs_in_one_compiled_program():
  """Every healthy member's losses are its single run's (each with its own
  seed, data order, learning rate and spectral learning rate); the non-finite
  ones are frozen; one compilation per batch width, not per member."""
  buckets = (16, 40)  # two widths: members' batches are padded to the widest
  config = helpers.tiny_config(POPULATION | {"buckets": buckets})
  mesh = sharding_lib.make_mesh(config.mesh)
  num_steps = 6
  with jax.set_mesh(mesh):
    pop = population.setup(config, mesh)
    state = population.initial_state(pop)
    train_step = population.make_train_step(pop)
    batches = population.train_batches(pop, pop.setup.task, buckets=buckets, start_step=0)
    losses, widths = [], set()
    for _ in range(num_steps):
      batch = next(batches)
      widths.add(batch["inputs"].shape[-1])
      state, metrics = train_step(state, population.to_global_batch(batch, mesh))
      losses.append(np.asarray(metrics["loss"]))
    losses = np.array(losses)  # [steps, members]
    assert losses.shape == (num_steps, 4)
    assert train_step._cache_size() == len(widths) < pop.size  # pylint: disable=protected-access
    for i in GOOD:
      expected = single_losses(config, pop.members[i], num_steps, mesh, buckets)
      np.testing.assert_allclose(losses[:, i], expected, rtol=0, atol=1e-5, err_msg=f"member {i}")
  frozen = population.nonfinite_members(state)
  assert set(frozen) == set(BAD) and all(what == "loss" for _, what in frozen.values())
  for i in BAD:  # frozen at the last good state: finite parameters
    params = population.member_tree(jax.device_get(state["params"]), i)
    assert all(np.isfinite(x).all() for x in jax.tree.leaves(params))


@pytest.fixture(scope="module")
def population_run(tmp_path_factory):
  """The population trained to the end in this process: `(workdir, config, summary)`."""
  workdir = str(tmp_path_factory.mktemp("population"))
  config = helpers.tiny_config(POPULATION)
  return workdir, config, train.train_and_evaluate(config, workdir)


@pytest.fixture(scope="module")
def single_run(tmp_path_factory):
  """Member 2's single run (seed 1, the good learning rate), trained to the end."""
  workdir = str(tmp_path_factory.mktemp("single"))
  config = helpers.tiny_config(POPULATION)
  config = population.member_config(config, population.members(config)[2])
  train.train_and_evaluate(config, workdir)
  return workdir, config


def test_member_logs_are_their_single_runs_and_the_frozen_are_reported(
    population_run, single_run):
  workdir, config, summary = population_run
  assert summary["step"] == 20 and summary["members_training"] == 2
  records = helpers.read_metrics(workdir)
  # every log_every=4 steps, and at the evaluations (eval_every=10)
  assert [r["step"] for r in records] == [4, 8, 10, 12, 16, 20]
  assert all(r["member_losses"][i] is None for r in records for i in BAD)
  assert all(r["members_training"] == 2 for r in records)
  # Member 2 logs what its single run logs (and has that run's config).
  member = population.member_dir(workdir, 2)
  with open(os.path.join(member, "config.json")) as f:
    assert json.load(f) == workdir_lib.config_to_json(single_run[1])
  got, expected = helpers.read_metrics(member), helpers.read_metrics(single_run[0])
  assert [r["step"] for r in got] == [r["step"] for r in expected]
  for key in ("loss", "accuracy", "learning_rate", "spectral_learning_rate",
              "valid_token_accuracy"):
    a = [r.get(key) for r in got]
    b = [r.get(key) for r in expected]
    assert [x is None for x in a] == [x is None for x in b], key
    np.testing.assert_allclose([x for x in a if x is not None], [x for x in b if x is not None],
                               rtol=1e-5, err_msg=key)
  # A frozen member: one `nonfinite` record (at the first log step after), then nothing.
  frozen = helpers.read_metrics(population.member_dir(workdir, 1))
  assert frozen == [dict(step=4, nonfinite="loss", nonfinite_step=3)]


def test_interrupted_population_resumes_bit_for_bit(population_run, tmp_path, capsys):
  reference, config, _ = population_run
  workdir = str(tmp_path)
  summary = train.train_and_evaluate(config, workdir, hooks=[helpers.SignalAfter(15, "INT")])
  assert summary["preempted_at"] == 15
  assert helpers.checkpoint_steps(workdir) == [10, 15]
  train.train_and_evaluate(config, workdir)
  assert "resuming" in capsys.readouterr().out
  assert helpers.read_metrics(workdir) == helpers.read_metrics(reference)
  for i in range(4):
    assert (helpers.read_metrics(population.member_dir(workdir, i))
            == helpers.read_metrics(population.member_dir(reference, i)))
  step, state, trajectory = helpers.latest_checkpoint(workdir)
  ref_step, ref_state, ref_trajectory = helpers.latest_checkpoint(reference)
  assert step == ref_step == 20
  for name, tree, ref in (("state", state, ref_state), ("trajectory", trajectory, ref_trajectory)):
    assert tree.keys() == ref.keys()
    for key in tree:
      np.testing.assert_array_equal(tree[key], ref[key], err_msg=f"{name} {key}")


def test_every_member_is_evaluated_on_its_own(population_run, single_run):
  workdir, _, _ = population_run
  runs, frozen = evaluate.load_members(workdir)
  assert [r.member for r in runs] == list(GOOD) and set(frozen) == set(BAD)
  results = evaluate.evaluate(runs[1], splits=("valid",), log=lambda _: None)
  path = os.path.join(population.member_dir(workdir, 2), "eval", "results.json")
  with open(path) as f:
    assert json.load(f)["member"] == 2
  single = evaluate.evaluate(single_run[0], splits=("valid",), log=lambda _: None)
  assert results["splits"]["valid"]["token_accuracy"] == pytest.approx(
      single["splits"]["valid"]["token_accuracy"], abs=1e-6)
  # Member 2's learned spectrum, from the population's trajectory.
  member_steps, frequencies = spectrum.load_trajectory(workdir, member=2)
  single_steps, single_frequencies = spectrum.load_trajectory(single_run[0])
  np.testing.assert_array_equal(member_steps, single_steps)
  np.testing.assert_allclose(frequencies, single_frequencies, rtol=1e-5)
  with pytest.raises(ValueError, match="holds a population of 4 members"):
    evaluate.load_run(workdir)
  with pytest.raises(ValueError, match=r"member=1: .* went non-finite \(loss\) at step 3"):
    evaluate.load_run(workdir, member=1)


def test_a_run_written_before_populations_existed_still_resumes():
  new = workdir_lib.config_to_json(helpers.tiny_config())
  old = {k: v for k, v in new.items() if k != "population"}
  assert workdir_lib.config_differences(old, new) == []
  grown = workdir_lib.config_to_json(helpers.tiny_config({"population.seeds": (0, 1)}))
  assert workdir_lib.config_differences(old, grown) == ["population.seeds: '<absent>' -> [0, 1]"]


def test_members_are_the_grid_and_a_single_config_is_no_population():
  config = helpers.tiny_config({"population.seeds": (3, 4), "population.learning_rates": (1e-3,)})
  assert [(m.seed, m.learning_rate) for m in population.members(config)] == [(3, 1e-3),
                                                                             (4, 1e-3)]
  assert not config_lib.is_population(helpers.tiny_config())
  member = population.member_config(config, population.members(config)[1])
  assert not config_lib.is_population(member) and member.seed == 4


@pytest.mark.slow
def test_worker_processes_make_the_same_batches():
  from absl import flags  # pylint: disable=g-import-not-at-top
  if not flags.FLAGS.is_parsed():  # grain's workers read absl flags (train.py parses them)
    flags.FLAGS.mark_as_parsed()
  config = helpers.tiny_config({"population.seeds": (0, 1), "population.data_workers": 2})
  mesh = sharding_lib.make_mesh(config.mesh)
  pop = population.setup(config, mesh)
  with_workers = population.train_batches(pop, pop.setup.task, buckets=(40,), start_step=3)
  config.population.data_workers = 0
  in_process = population.train_batches(pop, pop.setup.task, buckets=(40,), start_step=3)
  for _ in range(4):
    a, b = next(with_workers), next(in_process)
    for key in steps.TRAIN_FIELDS:
      np.testing.assert_array_equal(a[key], b[key])
  with_workers.close()


def test_eval_py_evaluates_every_member_and_reports_the_frozen(population_run, tmp_path,
                                                               compilation_cache_env):
  workdir = str(tmp_path / "copy")
  shutil.copytree(population_run[0], workdir)
  result = subprocess.run(
      [sys.executable, "eval.py", f"--workdir={workdir}", "--member=all", "--splits=valid",
       "--num_examples=16"], cwd=helpers.ROOT, text=True, capture_output=True, timeout=300,
      env=helpers.subprocess_env(**compilation_cache_env))
  assert result.returncode == 0, result.stdout + result.stderr
  for i in BAD:
    assert f"member {i} (seed" in result.stdout and "not evaluated" in result.stdout
  evaluated = [i for i in range(4)
               if os.path.exists(os.path.join(population.member_dir(workdir, i), "eval",
                                              "results.json"))]
  assert evaluated == list(GOOD)


SHARDED_POPULATION = """
import jax, numpy as np
import helpers
from bifocal_jax.training import population, sharding
out = dict()
for name, (devices, mesh) in {meshes}.items():
  config = helpers.tiny_config({overrides})
  config.mesh.update(mesh)
  mesh = sharding.make_mesh(config.mesh, devices=jax.devices()[:devices])
  with jax.set_mesh(mesh):
    pop = population.setup(config, mesh)
    state = population.initial_state(pop)
    train_step = population.make_train_step(pop)
    batches = population.train_batches(pop, pop.setup.task, buckets=(40,), start_step=0)
    losses = []
    for _ in range(3):
      state, metrics = train_step(state, population.to_global_batch(next(batches), mesh))
      losses.append(np.asarray(metrics["loss"]).tolist())
  out[name] = losses
np.testing.assert_allclose(out["data4_model2"], out["one"], rtol=1e-5)
np.testing.assert_allclose(out["fsdp8"], out["one"], rtol=1e-5)
print("ok")
"""


@pytest.mark.slow
def test_a_population_on_eight_devices_computes_what_one_device_does(compilation_cache_env):
  """Members unsharded, each member's parameters and rows sharded as a single run's."""
  meshes = {"one": (1, dict(data=1, fsdp=1, model=1)),
            "data4_model2": (8, dict(data=4, fsdp=1, model=2)),
            "fsdp8": (8, dict(data=1, fsdp=8, model=1))}
  code = SHARDED_POPULATION.format(meshes=meshes, overrides={"population.seeds": (0, 1)})
  assert helpers.run_python(code, devices=8, **compilation_cache_env).strip().endswith("ok")
