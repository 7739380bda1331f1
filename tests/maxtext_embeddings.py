"""MaxText's real rotary modules (maxtext 0.2.5, `maxtext/layers/embeddings.py`), loaded light.

That file imports MaxText's config, initializer, logging and sharding utilities, which
pull in aqt, pathwaysutils, fastapi, pydantic and opentelemetry; its rotary classes use
none of them on the default (`ShardMode.AUTO`) path. `load()` runs the installed file
itself with those five imports answered by the small stand-ins below, so the rotary
arithmetic under test is MaxText's own. Returns None where maxtext is not installed.
"""

import enum
import importlib.util
import os
import sys
import types
from typing import Any

import jax.numpy as jnp

NAME = "maxtext.layers.embeddings"


def _module(name: str, **attributes) -> types.ModuleType:
  module = types.ModuleType(name)
  module.__dict__.update(attributes)
  return module


class ShardMode(enum.Enum):
  AUTO = "auto"
  EXPLICIT = "explicit"


def _unused(*args, **kwargs):
  raise NotImplementedError("a MaxText utility outside the rotary path was called")


def load():
  if NAME in sys.modules:
    return sys.modules[NAME]
  spec = importlib.util.find_spec("maxtext")
  if spec is None:
    return None
  root = spec.submodule_search_locations[0]
  stand_ins = {
      "maxtext": _module("maxtext", __path__=[root]),
      "maxtext.common": _module("maxtext.common", __path__=[]),
      "maxtext.common.common_types": _module(
          "maxtext.common.common_types", ShardMode=ShardMode, MODEL_MODE_PREFILL="prefill",
          MODEL_MODE_TRAIN="train", Array=jnp.ndarray, Config=Any, DType=jnp.dtype,
          get_weight_dtype=_unused),
      "maxtext.layers": _module("maxtext.layers", __path__=[]),
      "maxtext.layers.initializers": _module(
          "maxtext.layers.initializers", Initializer=Any, default_embed_init=None),
      "maxtext.utils": _module("maxtext.utils", __path__=[]),
      "maxtext.utils.max_logging": _module("maxtext.utils.max_logging", log=print),
      "maxtext.utils.max_utils": _module("maxtext.utils.max_utils", device_space=_unused),
      "maxtext.utils.sharding": _module(
          "maxtext.utils.sharding", logical_to_mesh_axes=_unused, create_sharding=_unused,
          truncate_out_sharding=_unused),
  }
  saved = {name: sys.modules.get(name) for name in stand_ins}
  sys.modules.update(stand_ins)
  try:
    file_spec = importlib.util.spec_from_file_location(
        NAME, os.path.join(root, "layers", "embeddings.py"))
    module = importlib.util.module_from_spec(file_spec)
    file_spec.loader.exec_module(module)
  finally:
    for name, old in saved.items():
      if old is None:
        sys.modules.pop(name, None)
      else:
        sys.modules[name] = old
  sys.modules[NAME] = module
  return module
