"""Configs are validated before any work (issue #8): a bad one is one clear
line naming the key and the value, exit status 2, no traceback, and nothing
written, not even the workdir."""

import subprocess

import jax
import pytest

import helpers
from bifocal_jax.training import config as config_lib
from bifocal_jax import train

# (overrides of the test config, text the message must hold: the key and its value).
# Validation sees 8 devices (`eight_devices`), so mesh and batch checks have something to split.
BAD_CONFIGS = {
    "unknown position kind": ({"position.kind": "spiral"}, "position.kind='spiral'"),
    "unknown task": ({"task.name": "dyk"}, "task.name='dyk'"),
    "zero steps": ({"steps": 0}, "steps=0"),
    "negative steps": ({"steps": -5}, "steps=-5"),
    "zero batch size": ({"batch_size": 0}, "batch_size=0"),
    "zero learning rate": ({"learning_rate": 0.0}, "learning_rate=0.0"),
    "negative learning rate": ({"learning_rate": -1e-3}, "learning_rate=-0.001"),
    "zero spectral learning rate": ({"spectral.learning_rate": 0.0}, "spectral.learning_rate=0.0"),
    "zero checkpoint interval": ({"checkpoint_every": 0}, "checkpoint_every=0"),
    "negative prefetch": ({"prefetch": -1}, "prefetch=-1"),
    "batch the data-parallel devices cannot split": ({"batch_size": 12}, "batch_size=12"),
    "mesh product is not the device count": (
        {"mesh.data": 3, "mesh.model": 2}, "mesh={'data': 3, 'fsdp': 1, 'model': 2}"),
    "heads not divisible by the model axis": (
        {"mesh.data": 1, "mesh.model": 8}, "model.num_heads=4"),
    "more spectral heads than heads": ({"position.spectral_heads": 5},
                                       "position.spectral_heads=5"),
    "freeze_steps beyond steps": ({"spectral.freeze_steps": 31}, "spectral.freeze_steps=31"),
    "inverted length range": ({"task.train.min_length": 50}, "task.train.max_length=40"),
    "inverted depth range": ({"task.test_depth.min_depth": 11}, "task.test_depth.max_depth=10"),
    "odd head dimension": ({"model.d_model": 12},  # 3 channels per head
                           "model.head_dim must be a positive even integer, got 3"),
    "unknown nan_policy": ({"nan_policy": "ignore"}, "nan_policy='ignore'"),
    "unknown compute dtype": ({"model.dtype": "float16"}, "model.dtype='float16'"),
    "more eval examples than the split": ({"eval_examples": 10**6}, "eval_examples=1000000"),
    "buckets shorter than the data": ({"buckets": (16, 32)}, "buckets=(16, 32)"),
    "unknown training examples": ({"data.examples": "new"}, "data.examples='new'"),
    "one length per batch of Dyck": ({"data.lengths": "per_batch"}, "data.lengths='per_batch'"),
    "zero length groups": ({"data.length_groups": 0}, "data.length_groups=0: must be a positive"),
    "length groups that do not divide the batch": ({"data.length_groups": 3},
                                                   "data.length_groups=3: must divide"),
    "length groups the data-parallel devices cannot split": (
        {"data.length_groups": 2}, "data.length_groups=2: must leave groups of rows divisible"),
    "length groups of a population": (
        {"data.length_groups": 2, "batch_size": 16, "population.seeds": (0, 1)},
        "data.length_groups=2: not supported for a population"),
    "negative population seed": ({"population.seeds": (0, -1)}, "population.seeds=(0, -1)"),
    "repeated population seed": ({"population.seeds": (1, 1)}, "population.seeds=(1, 1)"),
    "zero population learning rate": ({"population.learning_rates": (1e-3, 0.0)},
                                      "population.learning_rates=(0.001, 0.0)"),
    "negative population spectral learning rate": (
        {"population.spectral_learning_rates": (-0.1,)},
        "population.spectral_learning_rates=(-0.1,)"),
    "negative data workers": ({"population.data_workers": -2}, "population.data_workers=-2"),
    "population from a trained run": ({"population.seeds": (0, 1), "init_from": "/tmp/rope"},
                                      "init_from='/tmp/rope'"),
}


@pytest.fixture
def eight_devices(monkeypatch):
  monkeypatch.setattr(jax, "device_count", lambda: 8)


@pytest.mark.parametrize("name", sorted(BAD_CONFIGS))
def test_bad_config_is_one_line_naming_key_and_value_exit_2_nothing_written(
    name, tmp_path, capsys, eight_devices):
  del eight_devices
  overrides, names_it = BAD_CONFIGS[name]
  workdir = tmp_path / "run"
  with pytest.raises(SystemExit) as exit_info:
    train.run_training(helpers.tiny_config(overrides), str(workdir))
  assert exit_info.value.code == 2
  out, err = capsys.readouterr()
  assert err.startswith("error: config.") and err.count("\n") == 1, err
  assert names_it in err
  assert "Traceback" not in out + err
  assert list(tmp_path.iterdir()) == []  # not even the workdir


def test_good_test_config_passes_with_eight_devices(tmp_path):
  config_lib.validate(helpers.tiny_config(), num_devices=8, workdir=str(tmp_path / "run"))


def test_unwritable_workdir(tmp_path, capsys):
  (tmp_path / "a_file").write_text("")
  with pytest.raises(SystemExit) as exit_info:
    train.run_training(helpers.tiny_config(), str(tmp_path / "a_file" / "run"))
  assert exit_info.value.code == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and "--workdir=" in err and "not a writable directory" in err
  assert [p.name for p in tmp_path.iterdir()] == ["a_file"]


def test_mistyped_key_on_the_command_line_is_one_line_and_exit_2(tmp_path):
  """`train.py` itself: flag parsing fails like validation does."""
  result = subprocess.run(helpers.train_command(tmp_path / "run", None, "--config.stpes=3"),
                          cwd=helpers.ROOT, text=True, capture_output=True, timeout=120,
                          env=helpers.subprocess_env())
  assert result.returncode == 2
  assert result.stderr == 'error: --config.stpes: no such config key (Did you mean "steps" ' \
                          'instead of "stpes"?); --print_config lists the keys\n'
  assert list(tmp_path.iterdir()) == []
