"""Every config file and variant loads, has the contract's keys, and validates."""

import pathlib

import pytest

from bifocal_jax import config as config_lib
from bifocal_jax import tasks

# `configs/_*.py` are shared pieces, not configs.
CONFIGS = sorted((pathlib.Path(__file__).resolve().parent.parent / "configs").glob("[!_]*.py"))
CONTRACT_KEYS = ("seed", "steps", "batch_size", "learning_rate", "checkpoint_every",
                 "position.kind", "mesh.data", "mesh.fsdp", "mesh.model")


def load(path, arg=None):
  return config_lib.load_file(path, arg)


def test_there_is_a_config_per_task():
  assert sorted(p.stem for p in CONFIGS) == sorted(tasks.TASK_NAMES)


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
@pytest.mark.parametrize("arg", [None, "tiny", "paper"])
def test_config_has_contract_keys_and_validates(path, arg):
  config = load(path, arg)
  for key in CONTRACT_KEYS:
    node = config
    for part in key.split("."):
      node = node[part]
  assert config.task.name == path.stem
  config_lib.validate(config, num_devices=1)


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_unknown_variant_is_a_clear_error(path):
  with pytest.raises(ValueError, match="unknown variant 'huge'"):
    load(path, "huge")


def test_docstrings_carry_the_command_that_runs_them():
  for path in CONFIGS:
    assert f"python train.py --config configs/{path.name}" in path.read_text(), path
