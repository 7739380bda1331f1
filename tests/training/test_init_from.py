"""Fine-tuning by surgery: `--config.init_from=WORKDIR` converts a trained `rope` run."""

import json
import pathlib

import jax
import ml_collections
import numpy as np
import pytest

from bifocal_jax.evaluation import spectrum
from bifocal_jax.training import checkpoint as checkpoint_lib
from bifocal_jax.training import config as config_lib
from bifocal_jax import configs
from bifocal_jax import geometric_frequencies
from bifocal_jax.training import init_from
from bifocal_jax.nn import model as model_lib
from bifocal_jax.training import sharding as sharding_lib
from bifocal_jax.training import state as state_lib
from bifocal_jax import tasks
from bifocal_jax import train
from bifocal_jax.training import workdir as workdir_lib
from bifocal_jax.tasks import pipeline

DYCK_CONFIG = pathlib.Path(__file__).resolve().parents[2] / "configs" / "dyck.py"
HEAD_DIM = 8  # configs/dyck.py:tiny: d_model 32, 4 heads


def _tiny(kind, **position):
  """`configs/dyck.py:tiny` with `position.kind=kind` (and other position keys)."""
  config = configs.load_file(DYCK_CONFIG, "tiny")
  config.position.kind = kind
  config.position.update(position)
  config.async_checkpointing = False
  return config


def _short(config, steps=10):
  config.steps, config.checkpoint_every, config.eval_every = steps, steps, steps
  return config


@pytest.fixture(scope="module")
def rope_run(tmp_path_factory):
  """A trained tiny `rope` run, longer than the runs it seeds (other trajectory sizes)."""
  workdir = str(tmp_path_factory.mktemp("rope"))
  train.train_and_evaluate(_short(_tiny("rope"), steps=15), workdir)
  return workdir


@pytest.fixture(scope="module")
def rope_outputs(rope_run):
  """`(tokens, valid, logits)`: validation inputs and the trained rope model's logits."""
  task = tasks.get_task(_tiny("rope").task)
  batch = next(iter(pipeline.eval_batches(task, "valid", batch_size=8, num_examples=8)))
  tokens, valid = batch["inputs"], batch["valid"]
  return tokens, valid, np.asarray(_rope_model(rope_run)(tokens, valid))


def _restored_model(config, params_of):
  """The model of `config` with the params `params_of(setup)` returns."""
  mesh = sharding_lib.make_mesh(config.mesh)
  with jax.set_mesh(mesh):
    s, _ = state_lib.setup(config, mesh)
    return s.model(params_of(s, mesh))


def _rope_model(rope_dir):
  """The trained rope model, from its own config and latest checkpoint."""
  with open(pathlib.Path(rope_dir) / "config.json") as f:
    config = ml_collections.ConfigDict(json.load(f))

  def params_of(s, mesh):
    del mesh
    with checkpoint_lib.Checkpointer.read_only(rope_dir) as ckpt:
      return ckpt.restore_latest(s.abstract_state)[1]["params"]
  return _restored_model(config, params_of)


def _converted_model(config):
  """The model a run of `config` (with `init_from`) starts from."""
  source = init_from.source_config(config, tasks.get_task(config.task))
  return _restored_model(config, lambda s, mesh: init_from.load_params(config, source, mesh))


@pytest.mark.slow
@pytest.mark.parametrize("kind, position, spectral_shape", [
    ("spectral", {}, (1, 4, HEAD_DIM // 2)),                                 # every head
    ("bifocal", dict(split="heads", spectral_heads=1), (1, 1, HEAD_DIM // 2)),  # 1 head
    ("bifocal", dict(split="pairs", spectral_pairs=1), (1, 4, 1)),              # 1 pair per head
])
def test_converted_model_computes_the_rope_models_function(rope_run, rope_outputs, kind, position,
                                                           spectral_shape):
  config = _tiny(kind, **position)
  config.init_from = rope_run
  tokens, valid, rope_logits = rope_outputs
  converted = _converted_model(config)
  np.testing.assert_allclose(converted(tokens, valid), rope_logits, atol=1e-5, rtol=1e-5)
  # Its spectral eyes are the geometric spectrum (the lowest frequencies for split="pairs").
  frequencies = np.asarray(model_lib.spectral_frequencies(converted))
  assert frequencies.shape == spectral_shape
  geometric = np.asarray(geometric_frequencies(HEAD_DIM))[-spectral_shape[-1]:]
  np.testing.assert_allclose(frequencies, np.broadcast_to(geometric, spectral_shape), rtol=1e-6)


def test_rope_target_continues_the_same_parameters(rope_run, rope_outputs):
  """The protocol's control arm: `init_from` into `rope` is a plain continuation."""
  config = _tiny("rope")
  config.init_from = rope_run
  tokens, valid, rope_logits = rope_outputs
  np.testing.assert_array_equal(_converted_model(config)(tokens, valid), rope_logits)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["spectral", "bifocal"])
def test_fine_tuning_starts_at_the_geometric_spectrum_and_evolves(rope_run, tmp_path, kind):
  config = _short(_tiny(kind))
  config.init_from = rope_run
  summary = train.train_and_evaluate(config, str(tmp_path))
  assert summary["step"] == 10 and np.isfinite(summary["loss"])
  steps, frequencies = spectrum.load_trajectory(str(tmp_path))
  assert steps.tolist() == [0, 5, 10]
  geometric = np.asarray(geometric_frequencies(HEAD_DIM))
  np.testing.assert_allclose(frequencies[0], np.broadcast_to(geometric, frequencies.shape[1:]),
                             rtol=1e-6)
  assert np.abs(np.log(frequencies[-1] / frequencies[0])).max() > 1e-3  # Spectral Evolution


def _write_source(directory, config):
  directory.mkdir()
  (directory / "config.json").write_text(json.dumps(workdir_lib.config_to_json(config)))
  return str(directory)


def _set(config, key, value):
  *parents, leaf = key.split(".")
  for parent in parents:
    config = config[parent]
  config[leaf] = value


@pytest.mark.parametrize("source_key, target_key, value, match", [
    (None, None, None, "no config.json there"),
    ("position.kind", None, "bifocal", r"the source run has position.kind='bifocal'"),
    (None, "position.kind", "nope", r"needs position.kind in \('rope', 'spectral', 'bifocal'\)"),
    (None, "model.d_model", 64, r"model.d_model=64 \(source 32\), model.head_dim=16 \(source 8\)"),
    (None, "model.num_layers", 2, r"model.num_layers=2 \(source 1\)"),
    (None, "position.base", 500.0, r"position.base=500.0 differs from the source run's 10000.0"),
    (None, "task.k", 4, r"task 'dyck' \(vocab \d+, causal=True\) does not fit"),
    (None, None, "config only", "no checkpoint in"),
])
def test_init_from_errors_name_the_mismatch_before_touching_the_workdir(
    tmp_path, source_key, target_key, value, match):
  source = _tiny("rope")
  target = _tiny("spectral")
  if source_key:
    _set(source, source_key, value)
  if target_key:
    _set(target, target_key, value)
  wrote_source = source_key or target_key or value == "config only"
  target.init_from = (_write_source(tmp_path / "source", source) if wrote_source
                      else str(tmp_path / "nowhere"))
  workdir = tmp_path / "target"
  with pytest.raises(config_lib.ConfigError, match=r"config\.init_from='[^']*': .*" + match):
    train.train_and_evaluate(target, str(workdir))
  assert not workdir.exists()
