"""Workdir bookkeeping: which run a directory holds.

A workdir's `config.json` names its experiment. Re-running with the same
config resumes; a different one is refused with the differing keys listed,
unless `overwrite` (then process 0 clears the old run's outputs). Keys that do
not change the experiment (`config.RUNTIME_KEYS`: intervals, mesh, ...) may
differ. Every file the trainer rewrites is written atomically: a crash leaves
the old file, never a truncated one.
"""

from __future__ import annotations

import json
import os
import shutil

import jax
import ml_collections

from bifocal_jax.training import atomic_files
from bifocal_jax.training import config as config_lib
from bifocal_jax.training import sharding as sharding_lib

CONFIG_FILE = "config.json"
METRICS_FILE = "metrics.jsonl"
# What `overwrite` removes: everything a run writes into its workdir.
RUN_OUTPUTS = ("checkpoints", "damaged_checkpoints", METRICS_FILE, "tensorboard", "eval",
               CONFIG_FILE)


class WorkdirConflictError(ValueError):
  pass


def config_to_json(config: ml_collections.ConfigDict) -> dict:
  return json.loads(config.to_json_best_effort())


def _flatten(d: dict, prefix: str = "") -> dict:
  out = {}
  for k, v in d.items():
    if isinstance(v, dict):
      out.update(_flatten(v, f"{prefix}{k}."))
    else:
      out[f"{prefix}{k}"] = v
  return out


# A key absent from one side and empty (its default) on the other is no
# difference: a run written before the key existed (`population.*`) resumes.
_EMPTY = ([], (), "", None)


def config_differences(old: dict, new: dict) -> list[str]:
  """`key: old -> new` for each dotted key whose value differs, ignoring
  `config.RUNTIME_KEYS` (top-level names, or dotted keys)."""
  a, b = _flatten(old), _flatten(new)
  diffs = []
  for key in sorted(set(a) | set(b)):
    if key.split(".")[0] in config_lib.RUNTIME_KEYS or key in config_lib.RUNTIME_KEYS:
      continue
    if (key not in a and b[key] in _EMPTY) or (key not in b and a[key] in _EMPTY):
      continue
    if a.get(key, "<absent>") != b.get(key, "<absent>"):
      diffs.append(f"{key}: {a.get(key, '<absent>')!r} -> {b.get(key, '<absent>')!r}")
  return diffs


def check_config(workdir: str, config, *, overwrite: bool) -> None:
  """Refuses a workdir holding a different experiment; with `overwrite`,
  process 0 deletes that run's outputs instead."""
  path = os.path.join(workdir, CONFIG_FILE)
  if not os.path.exists(path):
    return
  try:
    with open(path) as f:
      old = json.load(f)
  except (OSError, json.JSONDecodeError) as e:
    raise WorkdirConflictError(
        f"{path} is unreadable ({e}); pass --overwrite to start over") from None
  diffs = config_differences(old, config_to_json(config))
  if not diffs:
    return
  if not overwrite:
    raise WorkdirConflictError(
        f"{workdir} holds a run with a different config ({'; '.join(diffs)}); "
        "use another --workdir, or pass --overwrite to replace it")
  if jax.process_index() == 0:
    for name in RUN_OUTPUTS:
      target = os.path.join(workdir, name)
      if os.path.isdir(target):
        shutil.rmtree(target)
      elif os.path.exists(target):
        os.remove(target)


def claim(workdir: str, config, *, overwrite: bool) -> None:
  """Makes `workdir` this run's: checks (or clears) what it holds, then writes
  `config.json`. Every process returns once process 0 has done so."""
  check_config(workdir, config, overwrite=overwrite)
  if jax.process_index() == 0:
    os.makedirs(workdir, exist_ok=True)
    atomic_files.write_json_atomically(os.path.join(workdir, CONFIG_FILE), config_to_json(config))
  sharding_lib.barrier("workdir ready")


def load_config(workdir: str) -> ml_collections.ConfigDict:
  """The config of the run in `workdir`, or a ValueError naming the directory."""
  path = os.path.join(workdir, CONFIG_FILE)
  if not os.path.isfile(path):
    what = (f"no {CONFIG_FILE} (not a training run directory)"
            if os.path.isdir(workdir) else "no such directory")
    raise ValueError(f"workdir={workdir!r}: {what}; name a run's directory, as trained by "
                     "`python -m bifocal_jax.train --config NAME --workdir DIR`")
  with open(path) as f:
    return ml_collections.ConfigDict(json.load(f))


def truncate_metrics(workdir: str, last_step: int) -> None:
  """Drops metric records past `last_step` (steps redone after a resume)."""
  path = os.path.join(workdir, METRICS_FILE)
  if not os.path.exists(path):
    return
  with open(path) as f:
    lines = [line for line in f if line.strip()]
  kept = []
  for line in lines:
    try:
      if json.loads(line)["step"] <= last_step:
        kept.append(line)
    except (json.JSONDecodeError, KeyError):
      continue  # a line cut by a crash
  if len(kept) != len(lines):
    atomic_files.write_atomically(path, "".join(kept))
