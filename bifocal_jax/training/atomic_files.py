"""Files written whole or not at all: a crash leaves the old file, never a half.

Nothing here imports JAX, so that the sweep driver (`experiments/extrapolation/`), which runs
before and beside JAX processes, shares it with the trainer.
"""

from __future__ import annotations

import json
import os
import threading


def write_atomically(path: str, text: str) -> None:
  """Writes `text` to `path` through a temporary file in the same directory.

  The temporary name is unique to the process and thread, so that writers
  sharing a file (processes or threads side by side) never interleave their halves; a failed
  write removes it and leaves `path` as it was.
  """
  tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
  try:
    with open(tmp, "w") as f:
      f.write(text)
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.remove(tmp)
    raise


def write_json_atomically(path: str, value, **dump_kwargs) -> None:
  """`write_atomically` of `value` as JSON (indent 2, sorted keys unless given)."""
  write_atomically(path, json.dumps(value, **({"indent": 2, "sort_keys": True} | dump_kwargs)))
