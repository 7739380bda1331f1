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
import os
from collections.abc import Sequence

import ml_collections

DIRECTORY = os.path.dirname(os.path.abspath(__file__))
NAMES = tuple(
    sorted(f[:-3] for f in os.listdir(DIRECTORY) if f.endswith(".py") and f[0] not in "_."))


def path(name: str) -> str:
  """The file of packaged config `name`."""
  if name not in NAMES:
    raise ValueError(f"config {name!r}: not a config of the package (one of {', '.join(NAMES)})")
  return os.path.join(DIRECTORY, f"{name}.py")


def get_config(name: str, arg: str | None = None) -> ml_collections.ConfigDict:
  """`get_config(arg)` of packaged config `name` (what `--config name:arg` loads)."""
  path(name)  # a clear error for an unknown name
  return importlib.import_module(f"{__name__}.{name}").get_config(arg)


def resolve(value: str) -> str:
  """`--config`'s value with a packaged config's name (`dyck`, `dyck:tiny`)
  replaced by its file's path; a path to a file is kept as it is.

  A value that is neither a file nor a name (and does not look like a path,
  which the config loader reports itself) is a ValueError naming the configs.
  """
  spec, sep, arg = value.partition(":")
  if os.path.isfile(spec):
    return value
  if spec in NAMES:
    return path(spec) + sep + arg
  if os.sep in spec or spec.endswith(".py"):
    return value
  raise ValueError(f"--config={value}: no such file, nor a config of the package "
                   f"(one of {', '.join(NAMES)})")


def resolve_argv(argv: Sequence[str], flag: str = "config") -> list[str]:
  """`argv` with the value of `--flag=VALUE` / `--flag VALUE` put through `resolve`."""
  out, argv = [], list(argv)
  i = 0
  while i < len(argv):
    arg = argv[i]
    if arg == "--":
      out += argv[i:]
      break
    if arg.startswith(f"--{flag}="):
      arg = f"--{flag}=" + resolve(arg[len(flag) + 3:])
    elif arg == f"--{flag}" and i + 1 < len(argv):
      out.append(arg)
      i += 1
      arg = resolve(argv[i])
    out.append(arg)
    i += 1
  return out
