"""The training configs, shipped with the package: one module per task (`NAMES`).

Each module's `get_config(arg=None)` returns an `ml_collections.ConfigDict`
(`arg`: the variant, `tiny` or `paper`); its docstring says what it trains
and the commands that run it. On the command line (`python -m
bifocal_jax.train`, `bifocal-train`, `python -m bifocal_jax.eval`, `python -m
bifocal_jax.tasks`) `--config NAME` or `--config NAME:VARIANT` (`dyck:tiny`)
names one of them, from any folder; a path to a config file (`--config
configs/dyck.py:tiny`, the thin re-exports of a checkout) works too.
"""

from __future__ import annotations

import importlib
import importlib.util
import os

import ml_collections

from bifocal_jax import cli

DIRECTORY = cli.CONFIG_DIRECTORY
NAMES = cli.CONFIG_NAMES
path = cli.config_path


def get_config(name: str, arg: str | None = None) -> ml_collections.ConfigDict:
  """`get_config(arg)` of packaged config `name` (what `--config name:arg` loads)."""
  path(name)  # a clear error for an unknown name
  return importlib.import_module(f"{__name__}.{name}").get_config(arg)


def load_file(path: str | os.PathLike, arg: str | None = None) -> ml_collections.ConfigDict:
  """`get_config(arg)` of the config file at `path`, or of the packaged config
  named `path` (`dyck`): what `--config path:arg` loads."""
  path = os.fspath(path)
  if path in NAMES and not os.path.isfile(path):
    return get_config(path, arg)
  path = os.path.abspath(path)
  name = os.path.splitext(os.path.basename(path))[0]
  spec = importlib.util.spec_from_file_location(f"config_file_{name}", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(arg)
