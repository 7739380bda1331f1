"""Every config (shipped in `bifocal_jax/configs/`) and variant loads, has the
contract's keys and validates; a checkout's `configs/*.py` are the same configs."""

import pathlib

import numpy as np
import pytest

from bifocal_jax.training import config as config_lib
from bifocal_jax import cli, configs
from bifocal_jax import tasks

ROOT = pathlib.Path(__file__).resolve().parents[2]
# `_*.py` are shared pieces, not configs.
CONFIGS = sorted(pathlib.Path(configs.DIRECTORY).glob("[!_]*.py"))
CHECKOUT_CONFIGS = sorted((ROOT / "configs").glob("*.py"))
CONTRACT_KEYS = ("seed", "steps", "batch_size", "learning_rate", "checkpoint_every",
                 "position.kind", "mesh.data", "mesh.fsdp", "mesh.model")


def load(path, arg=None):
  return configs.load_file(path, arg)


def test_there_is_a_config_per_task():
  assert sorted(p.stem for p in CONFIGS) == sorted(tasks.TASK_NAMES) == list(configs.NAMES)


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


def test_listops_minmax_keeps_two_operators_and_validates():
  for name in ("listops", "listops_depth"):
    config = configs.get_config(name, "minmax")
    assert tuple(config.task.operators) == ("MIN", "MAX") and config.model.num_layers == 2
    config_lib.validate(config, num_devices=1)
    task = tasks.get_task(config.task)
    assert task.operators == ("MIN", "MAX")


CHOMSKY = [p for p in CONFIGS if "_chomsky.get_config" in p.read_text()]


@pytest.mark.parametrize("path", CHOMSKY, ids=lambda p: p.stem)
def test_chomsky_configs_draw_randomized_positions_as_the_source_and_fit_the_protocol(path):
  """Randomized kinds draw from `[0, 2048)`, the source's `noise_max_length`,
  and every split, up to the protocol's length 500, fits in it."""
  config = load(path)
  assert config.position.max_position == 2048
  config.position.kind = "randomized_alibi"
  config_lib.validate(config, num_devices=1)
  task = tasks.get_task(config.task)
  assert int(task.sequence_lengths("test_length", np.zeros(1, np.int64), 500)[0]) <= 2048


def test_docstrings_carry_the_command_that_runs_them():
  for path in CONFIGS:
    assert f"python -m bifocal_jax.train --config {path.stem}" in path.read_text(), path
  for path in CHECKOUT_CONFIGS:
    assert f"python train.py --config configs/{path.name}" in path.read_text(), path


def test_a_checkouts_configs_are_the_packaged_ones():
  assert [p.name for p in CHECKOUT_CONFIGS] == [p.name for p in CONFIGS]
  for path in CHECKOUT_CONFIGS:
    for arg in (None, "tiny"):
      assert load(path, arg).to_dict() == configs.get_config(path.stem, arg).to_dict(), path


def test_names_resolve_to_the_packaged_files_and_paths_stay():
  assert cli.resolve_config("dyck") == configs.path("dyck")
  assert cli.resolve_config("dyck:tiny") == configs.path("dyck") + ":tiny"
  checkout = str(ROOT / "configs" / "dyck.py") + ":tiny"
  assert cli.resolve_config(checkout) == checkout
  assert cli.resolve_config("no/such/file.py") == "no/such/file.py"  # the loader reports it
  with pytest.raises(ValueError, match="--config=dyk: no such file, nor a config of the package"):
    cli.resolve_config("dyk")
  assert cli.resolve_argv(["prog", "--config", "dyck:tiny", "--config.seed=3",
                               "--config=odds_first", "--", "--config", "dyck"]) == [
                                   "prog", "--config", configs.path("dyck") + ":tiny",
                                   "--config.seed=3", f"--config={configs.path('odds_first')}",
                                   "--", "--config", "dyck"]
  assert load("dyck", "tiny").to_dict() == load(configs.path("dyck"), "tiny").to_dict()
