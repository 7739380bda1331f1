"""Mixed-scheme heads: `position.kind="a+b"` gives the first
`position.mixed_heads` heads of every layer scheme `a` and the rest scheme `b`
(bifocal attention's two kinds of eyes in one layer, generalised to any two
schemes, e.g. `rope+cope`, `rope+fire`, `spectral+alibi`).

The QKV and output projections stay shared by all heads; each head group
rotates, biases or attends with its own scheme, built for its own number of
heads (`attention.Attention` holds the groups at `block.attn.groups[kind]`,
and the model the shared modules of T5/Kerple at
`model.position.by_kind[kind]`).

Refused, in one line naming the kind: a kind mixed with itself, more than two
kinds (no nesting), `absolute` kinds (an embedding added at the input cannot
belong to some heads only), randomized kinds (the model draws one set of
positions for all heads, so the other group would see them too), `bifocal`
(already a mix of eyes: mix `rope+spectral` instead), and kinds undefined for
the task's direction.
"""

from __future__ import annotations

import functools

import ml_collections
from flax import nnx

from bifocal_jax.nn.positions import base

SEPARATOR = "+"

# No schemes of its own: a mixed kind is parsed from its name (`scheme`).
SCHEMES = ()

CONFIG_KEYS = {
    # Heads of the first kind of a mixed `a+b` kind (None or -1: half, rounded down).
    "mixed_heads": ml_collections.config_dict.placeholder(int),
}


def is_mixed(kind: str) -> bool:
  return isinstance(kind, str) and SEPARATOR in kind


def parse_kind(kind: str, schemes: dict[str, base.Scheme]) -> tuple[base.Scheme, base.Scheme]:
  """The two schemes of a mixed `kind` ("a+b"), or a ValueError naming it."""
  names = kind.split(SEPARATOR)
  if len(names) != 2:
    raise ValueError(f"position.kind={kind!r}: a mixed kind is exactly two kinds 'a+b' "
                     f"(no nesting)")
  if names[0] == names[1]:
    raise ValueError(f"position.kind={kind!r}: mixes {names[0]!r} with itself; use "
                     f"position.kind={names[0]!r}")
  mix = []
  for name in names:
    if name not in schemes:
      raise ValueError(f"position.kind={kind!r}: {name!r} is not a position kind "
                       f"(one of {tuple(schemes)})")
    scheme = schemes[name]
    if scheme.interface == base.ABSOLUTE:
      raise ValueError(f"position.kind={kind!r}: {name!r} is an absolute embedding added at "
                       f"the input, which cannot belong to some heads only")
    if scheme.randomized:
      raise ValueError(f"position.kind={kind!r}: {name!r} randomizes the positions, which the "
                       f"model draws once for all heads; mix in-order kinds only")
    if name == "bifocal":
      raise ValueError(f"position.kind={kind!r}: 'bifocal' is already a mix of eyes; mix "
                       f"'rope+spectral' instead")
    mix.append(scheme)
  return mix[0], mix[1]


def head_split(position: ml_collections.ConfigDict, *, num_heads: int) -> tuple[int, int]:
  """`(heads of a, heads of b)` of a mixed kind: `position.mixed_heads` (None
  or -1: half) and the rest; a ValueError naming the key when it does not fit."""
  n = position.get("mixed_heads")
  first = num_heads // 2 if n is None or n == -1 else n
  # bool is an int to Python (and to ml_collections): `True` is not a head count
  if isinstance(first, bool) or not isinstance(first, int) or not 1 <= first <= num_heads - 1:
    raise ValueError(f"position.mixed_heads={n!r}: must be -1 (half) or in "
                     f"[1, model.num_heads - 1 = {num_heads - 1}] (position.kind="
                     f"{position.kind!r} needs heads for both kinds)")
  return first, num_heads - first


class Shared(nnx.Module):
  """The model's modules shared by all layers (T5, Kerple), per mixed kind's
  side: `shared.get(kind)` (at `by_kind[kind]`), only for the sides that have one."""

  def __init__(self, modules: dict[str, nnx.Module]):
    self.by_kind = nnx.Dict(modules)

  def get(self, kind: str) -> nnx.Module | None:
    return self.by_kind[kind] if kind in self.by_kind else None


def _check(first: base.Scheme, second: base.Scheme, position, *, num_heads: int, head_dim: int):
  for scheme, heads in zip((first, second), head_split(position, num_heads=num_heads)):
    if scheme.check is not None:
      scheme.check(position, num_heads=heads, head_dim=head_dim)


def _shared(first: base.Scheme, second: base.Scheme, position, *, num_heads: int, **dims):
  modules = {}
  for scheme, heads in zip((first, second), head_split(position, num_heads=num_heads)):
    if scheme.shared is not None:
      module = scheme.shared(position, num_heads=heads, **dims)
      if module is not None:
        modules[scheme.name] = module
  return Shared(modules) if modules else None


@functools.lru_cache(maxsize=None)
def _scheme(kind: str, first: base.Scheme, second: base.Scheme) -> base.Scheme:
  # A mix is undefined for a direction where one of its kinds is: name that one.
  why = "; ".join(f"{s.name}: {s.why_not or s.source}" for s in (first, second)
                  if not (s.encoder and s.decoder))
  source = f"heads split between {first.name} ({first.source}) and {second.name} ({second.source})"
  shared = functools.partial(_shared, first, second) if first.shared or second.shared else None
  return base.Scheme(kind, base.MIXED, source, encoder=first.encoder and second.encoder,
                     decoder=first.decoder and second.decoder, shared=shared,
                     check=functools.partial(_check, first, second), why_not=why)


def scheme(kind: str, schemes: dict[str, base.Scheme]) -> base.Scheme:
  """The `Scheme` of a mixed `kind` (interface `mixed`); its `parts` are
  `parse_kind(kind)`. A ValueError naming the kind where it is refused."""
  first, second = parse_kind(kind, schemes)
  return _scheme(kind, first, second)
