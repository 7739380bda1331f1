"""Position schemes: one module per family, one registry.

Every `position.kind` is a `Scheme` (`base.py`): its interface (`none`,
`absolute`, `rotary`, `bias`, `attention`), its source, whether it is defined
for the causal decoder and/or the bidirectional encoder, how the model draws
its positions, and builders for the modules it needs. The attention layer
(`attention.py`) and the model (`model.py`) call only these builders and the
module protocols that `base.py` documents.

Adding a scheme is one file and one registry entry:
  1. `bifocal_jax/nn/positions/<family>.py`: the scheme's maths as pure functions,
     a thin `nnx.Module` holding its parameters (if any; one with bounds as a
     `bounded.BoundedParam`, which the trainer keeps inside them) with the
     method its interface asks for (`bias_fn`, `attend`, `__call__` for an
     embedding),
     `SCHEMES = (base.Scheme(name, interface, source, ...),)`, and, for new
     config keys, `CONFIG_KEYS = {"key": default}` (defaults must be None,
     `ml_collections.config_dict.placeholder(type)`, meaning the source's
     default, so that the configs of existing runs stay comparable).
  2. this file: the module in `_FAMILIES`.
Then add its test, `tests/nn/test_positions_<family>.py`, and its row of docs/roster.md.
`POSITION_KINDS` (every base `position.kind`) is derived from the registry;
a mixed kind `a+b` of two of them (`mixed.py`: the heads split between two
schemes) is valid too: `is_valid_kind`, `parts`.
"""

from __future__ import annotations

import ml_collections

from bifocal_jax.nn.positions import absolute
from bifocal_jax.nn.positions import alibi
from bifocal_jax.nn.positions import base
from bifocal_jax.nn.positions import cope
from bifocal_jax.nn.positions import fire
from bifocal_jax.nn.positions import fope
from bifocal_jax.nn.positions import fox
from bifocal_jax.nn.positions import kerple
from bifocal_jax.nn.positions import mixed
from bifocal_jax.nn.positions import path
from bifocal_jax.nn.positions import path_fox
from bifocal_jax.nn.positions import relative
from bifocal_jax.nn.positions import rotary
from bifocal_jax.nn.positions import stickbreaking
from bifocal_jax.nn.positions import t5
from bifocal_jax.nn.positions.base import ABSOLUTE, ATTENTION, BIAS, MIXED, NONE, ROTARY, Scheme

_FAMILIES = (rotary, alibi, absolute, relative, t5, kerple, fire)
# Data-dependent attention (interface `attention`), and FoPE.
_FAMILIES += (cope, fox, stickbreaking, path, fope, path_fox)
# Mixed kinds `a+b` (no schemes of its own; its config key).
_FAMILIES += (mixed,)

SCHEMES: dict[str, Scheme] = {}
for _family in _FAMILIES:
  for _scheme in _family.SCHEMES:
    if _scheme.name in SCHEMES:
      raise ValueError(f"position kind {_scheme.name!r} registered twice")
    SCHEMES[_scheme.name] = _scheme

POSITION_KINDS = tuple(SCHEMES)


def get(kind: str) -> Scheme:
  """The scheme of `position.kind=kind` (a mixed `a+b` kind's has interface
  `mixed`), or a ValueError naming the kind and why it is not valid."""
  if mixed.is_mixed(kind):
    return mixed.scheme(kind, SCHEMES)
  if kind not in SCHEMES:
    raise ValueError(f"position.kind={kind!r}: must be one of {POSITION_KINDS} or a mixed kind "
                     f"'a+b' of two of them")
  return SCHEMES[kind]


def is_valid_kind(kind) -> bool:
  """Whether `kind` is a base kind or an accepted mixed kind `a+b`."""
  try:
    get(kind)
  except (ValueError, TypeError):
    return False
  return True


def parts(kind: str) -> tuple[Scheme, ...]:
  """The schemes of `kind`: its own, or a mixed kind's two (the first heads' first)."""
  if mixed.is_mixed(kind):
    return mixed.parse_kind(kind, SCHEMES)
  return (get(kind),)


# Kinds whose runs are named with a second config key: bifocal's split decides
# which eyes are spectral, so results, logs and docs name a bifocal run
# `bifocal_heads` or `bifocal_pairs`. Kind -> (key, its values).
_NAMED_WITH = {"bifocal": ("split", ("heads", "pairs"))}


def scheme_name(position) -> str:
  """The one name of `position`'s scheme in results, logs and docs: its kind,
  and for `bifocal` its split as well (`bifocal_heads`, `bifocal_pairs`)."""
  if position.kind in _NAMED_WITH:
    return f"{position.kind}_{position.get(_NAMED_WITH[position.kind][0])}"
  return position.kind


def scheme_names() -> tuple[str, ...]:
  """Every base scheme's name: the registry's kinds, a named kind by its values."""
  return tuple(name for kind in POSITION_KINDS for name in (
      [f"{kind}_{v}" for v in _NAMED_WITH[kind][1]] if kind in _NAMED_WITH else [kind]))


def scheme_overrides(name: str) -> dict:
  """`scheme_name` read backwards: the `position` config keys of a named
  scheme (`bifocal_pairs` -> kind `bifocal`, split `pairs`; a mixed `a+b` ->
  its kind), or a ValueError when `name` names none."""
  if not isinstance(name, str):
    raise ValueError(f"scheme {name!r}: a scheme is named by a string such as 'rope'")
  for kind, (key, values) in _NAMED_WITH.items():
    if name.startswith(f"{kind}_") and name.removeprefix(f"{kind}_") in values:
      return {"position.kind": kind, f"position.{key}": name.removeprefix(f"{kind}_")}
    if name == kind:
      named = ", ".join(f"{kind}_{v}" for v in values)
      raise ValueError(f"scheme {name!r}: a {kind} run is named by its {key}: {named}")
  if mixed.is_mixed(name):
    try:
      get(name)
    except ValueError as reason:  # the mix's own reason (e.g. a kind mixed with itself)
      raise ValueError(f"scheme {name!r}: {str(reason).split(': ', 1)[-1]}") from None
  elif not is_valid_kind(name):
    raise ValueError(f"scheme {name!r}: must be one of {scheme_names()} or a mixed kind 'a+b'")
  return {"position.kind": name}


def default_config_keys() -> dict:
  """The config keys the families add to `position` (see `attention.default_position_config`)."""
  keys = {}
  for family in _FAMILIES:
    for key, value in getattr(family, "CONFIG_KEYS", {}).items():
      if key in keys:
        raise ValueError(f"position.{key} defined by two families")
      # A placeholder is a FieldReference: each config gets its own, or
      # setting the key in one config would set it in every other.
      if isinstance(value, ml_collections.FieldReference):
        value = ml_collections.config_dict.placeholder(value.get_type())
      keys[key] = value
  return keys


def with_context_length(position, length: int):
  """`position` with the keys that default to the training context length
  (a family's `CONTEXT_KEYS`: CoPE's `cope_npos`, FoPE's `fope_max_length`)
  filled in where unset; `state.build_model` calls it with the task's
  longest training sequence. Returns a copy; set keys are kept."""
  resolved = position.copy_and_resolve_references()
  for family in _FAMILIES:
    for key, from_length in getattr(family, "CONTEXT_KEYS", {}).items():
      if resolved.get(key) is None:
        resolved[key] = from_length(int(length))
  return resolved


__all__ = [
    "ABSOLUTE", "ATTENTION", "BIAS", "MIXED", "NONE", "POSITION_KINDS", "ROTARY", "SCHEMES",
    "Scheme", "base", "default_config_keys", "get", "is_valid_kind", "mixed", "parts",
    "scheme_name", "scheme_names", "scheme_overrides", "with_context_length"
]
