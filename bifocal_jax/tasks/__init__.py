"""Tasks whose structure is recursive or periodic, split to test extrapolation.

`get_task(config)` builds a task from its config (`default_task_config(name)`
lists every key it accepts). Every task draws example `i` of split `s` from
`(seed, s, i)` alone; see `base` for the interface and the batch layout,
`dyck`, `listops` and `chomsky` (a package: the Chomsky-hierarchy tasks) for
the tasks, `external` for the published Dyck data, and `pipeline` (imported separately:
it needs grain) for the input pipelines.
"""

import ml_collections

from bifocal_jax.tasks import base, chomsky, dyck, external, listops
from bifocal_jax.tasks.base import Split, Task

_TASKS = {t.name: t for t in (dyck.Dyck, *listops.TASKS, *chomsky.TASKS)}
TASK_NAMES = tuple(_TASKS)


def default_task_config(name: str) -> ml_collections.ConfigDict:
  """Every key task `name` accepts, with its defaults."""
  if name == dyck.NAME:
    return dyck.default_config()
  if name in listops.NAMES:
    return listops.default_config(name)
  if name in _TASKS:
    return chomsky.default_config(name)
  raise ValueError(f"task name={name!r}: unknown, expected one of {TASK_NAMES}")


def get_task(config: ml_collections.ConfigDict) -> Task:
  """The task named by `config.name`, built from (and validating) `config`."""
  name = base.get_key(config, "name")
  if name not in _TASKS:
    raise ValueError(f"task.name={name!r}: unknown, expected one of {TASK_NAMES}")
  _check_keys(config, default_task_config(name), "task")
  return _TASKS[name](config)


def _check_keys(config, defaults, prefix: str):
  """A ValueError naming the first key of `config` (nested) that `defaults` lacks."""
  for key in config:
    if key not in defaults:
      raise ValueError(f"{prefix}.{key}: not a key of this task (keys: {sorted(defaults)})")
    if isinstance(defaults[key], ml_collections.ConfigDict):
      _check_keys(config[key], defaults[key], f"{prefix}.{key}")


__all__ = ["Split", "TASK_NAMES", "Task", "default_task_config", "external", "get_task"]
