"""Surgical Integration: swap a model's fixed RoPE for trainable spectral eyes.

`spectralize(model)` finds every fixed rotary module inside an NNX model
(`flax.nnx.RoPE`, and this project's `GeometricRoPE`) and replaces it, in
place, with a spectral module initialised to the same geometric spectrum, so
the model computes the same function (to float32 rounding) and its
frequencies can then be fine-tuned with `optim.spectral_evolution`.

Ropes are found wherever NNX keeps modules (attributes, `nnx.List`,
`nnx.Dict`, lists and dicts held as data) and inside
`functools.partial(..., rope=...)` attention functions, the way the Flax
documentation builds `nnx.MultiHeadAttention` with RoPE. Such a partial is a
static attribute, invisible to `nnx.state`; it is replaced by
`RotaryAttention`, a module holding the new rope as graph state, so
`nnx.state`, `nnx.jit`, `nnx.grad` and `nnx.Optimizer` see and train it.

Every place a rope is held gets its own spectral module (frequencies are per
layer), even where several places share one fixed rope object.

Models whose attention calls a rotary *function* instead are converted by the
per-library adapters beside this file: `tunix_models` (tunix's Gemma 3,
Llama 3, Qwen 3, found and converted by `spectralize` itself),
`gemma_linen` (the `gemma` library's Linen models, a wrapper) and
`maxtext_rope` (MaxText's rotary modules, found and converted by
`spectralize` too). `peft` (imported on its own: it needs tunix's trainer code)
fine-tunes converted tunix models with tunix's own `PeftTrainer`, checkpoints
and merged export, keeping the spectra.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Literal

import jax.numpy as jnp
from flax import nnx

from bifocal_jax.nn import attention as attention_lib
from bifocal_jax.nn.rope import BifocalRoPE, GeometricRoPE, SpectralRoPE, apply_rope
from bifocal_jax.surgery import maxtext_rope, tunix_models

FIXED_ROPES = (nnx.RoPE, GeometricRoPE)


class RotaryAttention(nnx.Module):
  """`partial(nnx.dot_product_attention_with_rope, rope=...)` as a module.

  Same call as the partial (it is the `attention_fn` of
  `nnx.MultiHeadAttention`), but the rope is graph state. Rotates queries and
  keys by `rope.frequencies()` (shared `[pairs]`, or per head `[heads,
  pairs]`) on `[..., seq, heads, head_dim]` directly, then calls `func` with
  the remaining keywords: `nnx.dot_product_attention` for the documented
  partial. Any other `func` receives the rope as its `rope=` keyword.
  """

  def __init__(self, rope: nnx.Module, func=nnx.dot_product_attention_with_rope,
               keywords: dict[str, Any] | None = None):
    self.rope = rope
    self.func = func
    self.keywords = dict(keywords or {})

  def __call__(self, query, key, value, **kwargs):
    kwargs = self.keywords | kwargs
    if self.func is not nnx.dot_product_attention_with_rope:
      return self.func(query, key, value, rope=self.rope, **kwargs)
    input_positions = kwargs.pop("input_positions", None)
    query = self._rotate(query, input_positions)
    key = self._rotate(key, input_positions)
    return nnx.dot_product_attention(query, key, value, **kwargs)

  def _rotate(self, x, input_positions):
    positions = (jnp.arange(x.shape[-3], dtype=jnp.int32)
                 if input_positions is None else input_positions)
    return apply_rope(x, positions, self.rope.frequencies(), layout=self.rope.layout)


# ----------------------------------------------------------------------------
# Finding ropes.
# ----------------------------------------------------------------------------


def _children(node):
  """`(key, child)` for the direct children of a graph node."""
  if isinstance(node, (nnx.List, list)):
    return list(enumerate(node))
  if isinstance(node, (nnx.Dict, dict)):
    return list(node.items())
  if isinstance(node, nnx.Module):
    return [(k, v) for k, v in vars(node).items() if not k.startswith("_pytree__")]
  if isinstance(node, tuple):
    return list(enumerate(node))
  return []


def _rope_partial(value) -> bool:
  return (isinstance(value, functools.partial) and
          isinstance(value.keywords.get("rope"), FIXED_ROPES))


def _sites(model):
  """`(parent, key, path, value)` for every fixed rope and rope partial in `model`.

  `nnx.iter_graph` visits each node once, so edges are read from each unique
  parent: a rope shared by several parents is found at each of them.
  """
  for path, node in nnx.iter_graph(model):
    for key, child in _children(node):
      if isinstance(child, FIXED_ROPES) or (isinstance(node, nnx.Module) and _rope_partial(child)):
        yield node, key, path + (key,), child


def _known_embedding_size(rope) -> int | None:
  if isinstance(rope, GeometricRoPE):
    return rope.embedding_size
  if rope.cached_sin is not None:
    return 2 * rope.cached_sin.shape[-1]
  return None


# ----------------------------------------------------------------------------
# Building replacements.
# ----------------------------------------------------------------------------


def _spectral_rope(rope, *, where: str, embedding_size: int | None, num_heads: int | None,
                   per_head: bool, split: str | None, spectral_heads, spectral_pairs):
  """A spectral module with `rope`'s spectrum (`embedding_size` where the rope lacks it)."""
  size = _known_embedding_size(rope)
  if size is None:
    size = embedding_size
  if size is None:
    raise ValueError(
        f"the nnx.RoPE at {where} does not store its size (built without embedding_size and "
        f"max_seq_len): pass spectralize(..., embedding_size=HEAD_DIM)")
  spectrum = dict(theta=rope.theta, embedding_size=size,
                  rotary_fraction=getattr(rope, "rotary_dim", size) / size,
                  layout=getattr(rope, "layout", "half"))
  rope_proportion = getattr(rope, "rope_proportion", None)
  if rope_proportion is not None:
    if split is not None:
      raise ValueError(f"the p-RoPE module at {where} (rope_proportion={rope_proportion}): "
                       f"split={split!r} is not available for it; convert it with per_head")
    spectrum["rope_proportion"] = rope_proportion
  if split is not None:
    return BifocalRoPE(**spectrum, num_heads=num_heads, split=split, spectral_heads=spectral_heads,
                       spectral_pairs=spectral_pairs)
  return SpectralRoPE(**spectrum, num_heads=num_heads if per_head else None)


def _convert_host_layers(model, predicate, *, split, per_head, num_heads, spectrum,
                         stacked_layers) -> int:
  """Converts the tunix attention layers and MaxText rotary modules in `model`; how many."""
  converted = 0
  if tunix_models.sites(model):
    if split is not None:
      raise ValueError(f"split={split!r} is not available for tunix models; use spectrum=")
    converted = tunix_models.convert(model, spectrum=spectrum or
                                     ("heads" if per_head else "kv_heads"), predicate=predicate)
  elif spectrum is not None:
    raise ValueError(f"spectrum={spectrum!r} applies to tunix models only; use per_head/split")
  if maxtext_rope.sites(model):
    if split is not None:
      raise ValueError(f"split={split!r} is not available for MaxText rotary modules")
    if per_head and num_heads is None:
      raise ValueError("per_head for MaxText rotary modules needs num_heads= (they do not know it)")
    converted += maxtext_rope.convert(model, num_heads=num_heads if per_head else None,
                                      stacked_layers=stacked_layers, predicate=predicate)
  elif stacked_layers is not None:
    raise ValueError(f"stacked_layers={stacked_layers!r} applies to MaxText rotary modules only")
  return converted


def spectralize(
    model: nnx.Module,
    *,
    filter: Any = None,
    per_head: bool = False,
    num_heads: int | None = None,
    split: Literal["heads", "pairs"] | None = None,
    spectral_heads: int | tuple[int, ...] | None = None,
    spectral_pairs: int | None = None,
    embedding_size: int | None = None,
    spectrum: Literal["kv_heads", "heads", "shared"] | None = None,
    stacked_layers: int | None = None,
) -> int:
  """Replaces every fixed RoPE in `model` by a spectral one; returns how many.

  tunix's Gemma 3, Llama 3 and Qwen 3 attention layers (which call a rotary
  function) are converted too, each with its own spectrum initialised from
  the base and scale factor it uses (`tunix_models`); each counts as one. So
  are MaxText's rotary modules (`maxtext_rope`: shared spectra, or per head
  with `per_head=True, num_heads=...`).

  Args:
    model: any NNX module graph; changed in place.
    filter: an NNX filter (type, callable `(path, rope) -> bool`,
      `nnx.PathContains`, ...) choosing which ropes to replace; default all.
      A rope inside an attention partial has the path `(..., attr, 'rope')`.
    per_head: give every head its own spectrum (`[heads, pairs]`).
    num_heads: heads, where the site does not say (`nnx.MultiHeadAttention`
      and `attention.Attention` do).
    split: `"heads"` or `"pairs"`: a `BifocalRoPE` (geometric and spectral
      eyes) instead; `spectral_heads` and `spectral_pairs` as in `BifocalRoPE`.
    embedding_size: head dimension, for an `nnx.RoPE` built without its size
      (`nnx.RoPE(theta)` alone) where the site does not say.
    spectrum: for tunix layers: `"kv_heads"` (the default: one spectrum per
      key/value head, shared by its group of query heads), `"heads"` (one
      per query head; `per_head=True` means the same; refused under
      grouped-query attention) or `"shared"`. `filter` sees a tunix layer
      as `(path of its attention layer, layer)`.
    stacked_layers: for MaxText layers built under `nnx.vmap`/`nnx.scan`
      (parameters stacked `[layers, ...]`): the number of layers.

  Per-head and bifocal spectra change how a rope is called, so they are
  allowed only where this module controls the call: attention partials, and
  the `rope` of `bifocal_jax.nn.attention.Attention`. Elsewhere a rope keeps its
  call convention `rope(x, input_positions)` with a shared spectrum.

  Raises:
    ValueError: no rope was found (or none passed `filter`), a size or a
      head count cannot be known, or per-head/bifocal is asked for a rope
      whose caller is not head-aware (or for grouped-query attention).
  """
  _check_split(split, spectral_heads, spectral_pairs)
  predicate = nnx.filterlib.to_predicate(... if filter is None else filter)
  options = _RopeOptions(per_head=per_head, num_heads=num_heads, split=split,
                         spectral_heads=spectral_heads, spectral_pairs=spectral_pairs,
                         embedding_size=embedding_size)
  replacements = [
      r for site in list(_sites(model))
      if (r := _replacement(*site, predicate, options)) is not None
  ]
  converted = _convert_host_layers(model, predicate, split=split, per_head=per_head,
                                   num_heads=num_heads, spectrum=spectrum,
                                   stacked_layers=stacked_layers)
  if not replacements and not converted:
    raise ValueError(
        f"spectralize found no nnx.RoPE or GeometricRoPE (nor a tunix attention layer or MaxText "
        f"rotary module) in "
        f"{type(model).__name__}" + ("" if filter is None else f" matching filter={filter!r}"))
  for parent, key, new, in_partial in replacements:
    if isinstance(parent, (nnx.List, nnx.Dict, list, dict)):
      parent[key] = new
    else:
      # A partial is a static attribute: declare the module replacing it as data.
      setattr(parent, key, nnx.data(new) if in_partial else new)
  return len(replacements) + converted


def _check_split(split, spectral_heads, spectral_pairs) -> None:
  if split not in (None, "heads", "pairs"):
    raise ValueError(f"split must be None, 'heads' or 'pairs', got {split!r}")
  if spectral_heads is not None and split != "heads":
    raise ValueError(f"spectral_heads={spectral_heads!r} needs split='heads', got split={split!r}")
  if spectral_pairs is not None and split != "pairs":
    raise ValueError(f"spectral_pairs={spectral_pairs!r} needs split='pairs', got split={split!r}")


@dataclasses.dataclass(frozen=True)
class _RopeOptions:
  """`spectralize`'s choices for the rope modules it replaces."""
  per_head: bool
  num_heads: int | None
  split: str | None
  spectral_heads: Any
  spectral_pairs: int | None
  embedding_size: int | None

  @property
  def head_aware(self) -> bool:
    return self.per_head or self.split is not None


def _replacement(parent, key, path, value, predicate, o: _RopeOptions):
  """`(parent, key, new module, in_partial)` for one rope site, or None when
  `predicate` leaves it; a ValueError naming the site when it cannot be
  converted as asked."""
  in_partial = isinstance(value, functools.partial)
  rope = value.keywords["rope"] if in_partial else value
  rope_path = path + ("rope",) if in_partial else path
  if not predicate(rope_path, rope):
    return None
  where = "/".join(map(str, rope_path))
  if isinstance(parent, tuple):
    raise ValueError(f"cannot replace the rope at {where}: it is held in a tuple; use a list")
  # Attention partials and our Attention's `rope` (or a mixed kind's head
  # group's, `attention.HeadGroup`, with the group's heads) are called by code
  # that knows the heads (and the head size); any other rope is called as rope(x).
  site_knows_heads = in_partial or (isinstance(
      parent, (attention_lib.Attention, attention_lib.HeadGroup)) and key == "rope")
  if o.head_aware and not site_knows_heads:
    raise ValueError(
        f"per_head/split need a head-aware caller, but the rope at {where} is called as "
        f"rope(x) by {type(parent).__name__}; spectralize it without per_head/split")
  heads = getattr(parent, "num_heads", o.num_heads) if site_knows_heads else o.num_heads
  size = o.embedding_size
  if size is None and site_knows_heads:
    size = getattr(parent, "head_dim", None)
  if o.head_aware:
    if heads is None:
      raise ValueError(f"num_heads is unknown for the rope at {where}: pass num_heads=")
    kv_heads = getattr(parent, "num_kv_heads", heads)
    if kv_heads != heads:
      raise ValueError(f"per-head spectra at {where} need as many key heads as query heads, "
                       f"got num_kv_heads={kv_heads}, num_heads={heads}")
  new = _spectral_rope(rope, where=where, embedding_size=size, num_heads=heads, per_head=o.per_head,
                       split=o.split, spectral_heads=o.spectral_heads,
                       spectral_pairs=o.spectral_pairs)
  if in_partial:
    if value.args:
      raise ValueError(f"the attention partial at {where} has positional arguments; "
                       "only keyword partials (rope=...) are supported")
    if value.func is not nnx.dot_product_attention_with_rope and o.head_aware:
      raise ValueError(f"per_head/split need nnx.dot_product_attention_with_rope at {where}, "
                       f"got {value.func!r}")
    keywords = {k: v for k, v in value.keywords.items() if k != "rope"}
    new = RotaryAttention(new, value.func, keywords)
  return parent, key, new, in_partial
