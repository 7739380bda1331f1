"""Surgical Integration for tunix's Gemma 3, Llama 3 and Qwen 3 (google-tunix 0.1.7).

Their attention layers hold no rotary module: `Attention.block` calls the
module-level function `apply_rope(x, positions, head_dim=..., <base>=...)` of
its model file on queries and keys, before the keys enter the KV cache.
Conversion leaves tunix's source alone. Each converted layer's class becomes a
subclass whose `block` is a copy of the original one in which the name
`apply_rope` resolves to a dispatcher; the layer gets a `rope`
(`TunixRoPE`, a trainable log-ratio spectrum, see `hosts`), and while its
`block` runs, the dispatcher rotates with the host's own angle arithmetic
scaled by that layer's spectrum. Everything else (GQA reshapes, the cache,
remat, sharding) is tunix's code, so decoding, `nnx.jit`, `nnx.remat` and
Orbax see an ordinary NNX module with one more variable,
`.../attn/rope/log_frequency_ratio`.

The base and scale factor each layer uses are the ones its call really
passes: Gemma 3 passes its layer's `rope_base_frequency` and
`rope_scale_factor` (local 10k, global 1M, scale 8 on the larger models);
Llama 3 and Qwen 3 pass no base, so `apply_rope`'s default (1,000,000) applies,
not `config.rope_theta`. Every call is checked against the values the layer
was converted with.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import inspect
import sys
import types

import jax
import jax.numpy as jnp
from flax import nnx

from bifocal_jax.surgery import hosts

SPECTRA = ("kv_heads", "heads", "shared")


@dataclasses.dataclass(frozen=True)
class Family:
  """How one tunix model file calls `apply_rope`."""

  base_arg: str  # the keyword carrying the base
  scale_arg: str | None  # the keyword carrying the scale factor, if any
  trig_in_input_dtype: bool  # sin/cos cast to the input dtype before the products

  def base_and_scale(self, attention, apply_rope) -> tuple[float, float]:
    """The base and scale factor `attention.block` passes (its attributes, else the defaults)."""
    defaults = {k: p.default for k, p in inspect.signature(apply_rope).parameters.items()}
    if self.scale_arg is not None:  # Gemma 3 passes both from the layer's attributes
      return float(attention.rope_base_frequency), float(attention.rope_scale_factor)
    return float(defaults[self.base_arg]), 1.0


FAMILIES = {
    "tunix.models.gemma3.model": Family("base_frequency", "scale_factor", False),
    "tunix.models.llama3.model": Family("rope_theta", None, False),
    "tunix.models.qwen3.model": Family("rope_theta", None, True),
}


def import_model(family: str) -> types.ModuleType:
  """`tunix.models.<family>.model`, also where only tunix's model code is installed.

  (tunix's Gemma 3 file sets `flax.config.flax_always_shard_variable = False`
  process-wide when imported; that is tunix's choice, left as it is.)
  """
  name = f"tunix.models.{family}.model"
  if f"tunix.models.{family}" not in {m.rsplit(".", 1)[0] for m in FAMILIES}:
    raise ValueError(f"family must be one of gemma3, llama3, qwen3, got {family!r}")
  return import_tunix(name)


# The install command of what `import_tunix`'s callers need (pyproject.toml's
# `tunix` extra: tunix's code at the tested version, qwix and metrax).
INSTALL = "pip install 'bifocal-jax[tunix]'"


def import_tunix(name: str) -> types.ModuleType:
  """The tunix module `name` (`tunix.sft.peft_trainer`, ...), without tunix's whole stack.

  tunix's package `__init__` imports its whole trainer stack (datasets,
  transformers, TensorFlow Datasets...); its model files need only flax,
  einops, jaxtyping and safetensors, and its PEFT trainer a few more light
  packages (requirements-hosts.txt). When the package import fails for a
  missing dependency, the package is registered without running its
  `__init__`, and the module is imported alone.
  """
  if "tunix" not in sys.modules:
    spec = importlib.util.find_spec("tunix")
    if spec is None:
      raise ImportError(f"tunix is not installed: {INSTALL}")
    try:
      importlib.import_module("tunix")
    except ImportError:
      package = types.ModuleType("tunix")
      package.__path__ = list(spec.submodule_search_locations)
      package.__spec__ = spec
      package.__file__ = spec.origin
      sys.modules["tunix"] = package
  try:
    return importlib.import_module(name)
  except ModuleNotFoundError as e:  # tunix itself, or a package its module needs
    raise ImportError(f"{name} needs {e.name or 'tunix'}, which is not installed: "
                      f"{INSTALL}") from e


# ----------------------------------------------------------------------------
# The host's arithmetic, with a spectrum.
# ----------------------------------------------------------------------------


def host_angles(positions: jax.Array, head_dim: int, base: float, scale: float) -> jax.Array:
  """tunix's angles, `[B, L, 1, pairs]`: `positions / base ** (2i / head_dim) / scale`, float32."""
  fraction = 2 * jnp.arange(0, head_dim // 2, dtype=jnp.float32) / head_dim
  timescale = base**fraction
  angles = (positions[..., jnp.newaxis] / timescale[jnp.newaxis, jnp.newaxis, :])[...,
                                                                                  jnp.newaxis, :]
  return angles / scale if scale != 1.0 else angles


def rotate_like_host(x: jax.Array, angles: jax.Array, trig_in_input_dtype: bool,
                     repeat: int = 1) -> jax.Array:
  """tunix's rotation of `x: [B, L, heads, head_dim]` (half layout) by `angles`.

  `repeat` > 1: `angles` has one head per group of `repeat` heads of `x`
  (a per-KV-head spectrum on queries); the sines and cosines are computed per
  group and repeated, so queries and keys share one computation of them.
  """
  sin, cos = jnp.sin(angles), jnp.cos(angles)
  if repeat > 1:
    sin, cos = jnp.repeat(sin, repeat, axis=-2), jnp.repeat(cos, repeat, axis=-2)
  if trig_in_input_dtype:
    sin, cos = sin.astype(x.dtype), cos.astype(x.dtype)
  first_half, second_half = jnp.split(x, 2, axis=-1)
  out = jnp.concatenate(
      [first_half * cos - second_half * sin, second_half * cos + first_half * sin], axis=-1)
  return out.astype(x.dtype)


class TunixRoPE(hosts.RatioSpectrum):
  """One tunix attention layer's trainable spectrum (see `hosts.RatioSpectrum`)."""

  def __init__(self, *, theta: float, scale_factor: float, head_dim: int, num_heads: int,
               num_kv_heads: int, spectrum: str, site: str):
    original = host_angles(jnp.ones((1, 1), jnp.float32), head_dim, theta, scale_factor)[0, 0, 0]
    heads = {"kv_heads": num_kv_heads, "heads": num_heads, "shared": None}[spectrum]
    super().__init__(original, num_heads=heads)
    self.theta = theta
    self.scale_factor = scale_factor
    self.head_dim = head_dim
    self.num_heads = num_heads
    self.num_kv_heads = num_kv_heads
    self.spectrum = spectrum
    self.site = site


def _dispatcher(family: Family, original, where: str):
  """A stand-in for the host's `apply_rope`: the active layer's spectrum, else the original."""
  signature = inspect.signature(original)
  x_name, positions_name = list(signature.parameters)[:2]

  def apply_rope(*args, **kwargs):
    layer = hosts.current_layer()
    if layer is None:
      return original(*args, **kwargs)
    bound = signature.bind(*args, **kwargs)
    bound.apply_defaults()
    arguments = bound.arguments
    x, positions = arguments[x_name], arguments[positions_name]
    rope = layer.rope
    base = float(arguments[family.base_arg])
    scale = float(arguments[family.scale_arg]) if family.scale_arg else 1.0
    if (base, scale, arguments["head_dim"]) != (rope.theta, rope.scale_factor, rope.head_dim):
      raise ValueError(
          f"{where} at {rope.site} called apply_rope with base={base}, scale={scale}, "
          f"head_dim={arguments['head_dim']}, but was converted with base={rope.theta}, "
          f"scale={rope.scale_factor}, head_dim={rope.head_dim}")
    if scale < 1.0:
      raise ValueError(f"scale_factor must be >= 1.0, got {scale}")
    ratio = rope.ratio()  # [spectrum heads or 1, pairs]
    heads = x.shape[-2]
    if ratio.shape[0] not in (1, heads) and (heads, ratio.shape[0]) != (rope.num_heads,
                                                                        rope.num_kv_heads):
      raise ValueError(f"the rotary call at {rope.site} got {heads} heads, but its spectrum "
                       f"has {ratio.shape[0]} (num_heads={rope.num_heads}, "
                       f"num_kv_heads={rope.num_kv_heads})")
    angles = host_angles(positions, rope.head_dim, base, scale) * ratio
    repeat = heads // ratio.shape[0] if ratio.shape[0] > 1 else 1
    return rotate_like_host(x, angles, family.trig_in_input_dtype, repeat)

  return apply_rope


_CONVERTED: dict[type, type] = {}


def converted_class(cls: type) -> type:
  """The subclass of a tunix `Attention` whose `block` rotates with the layer's spectrum."""
  if cls in _CONVERTED:
    return _CONVERTED[cls]
  module = sys.modules[cls.__module__]
  where = f"{cls.__module__}.{cls.__qualname__}"
  family = FAMILIES[cls.__module__]
  block = hosts.rebind_globals(cls.block, where,
                               apply_rope=_dispatcher(family, module.apply_rope, where))

  def spectral_block(self, *args, **kwargs):
    with hosts.active_layer(self):
      return block(self, *args, **kwargs)

  name = f"Spectral{cls.__name__}_{cls.__module__.split('.')[-2]}"
  new = type(cls)(name, (cls,), {
      "block": spectral_block,
      "__module__": __name__,
      "__qualname__": name,
      "_bifocal_host": cls
  })
  globals()[name] = new  # importable by name, like any class
  _CONVERTED[cls] = new
  return new


# ----------------------------------------------------------------------------
# Finding and converting layers.
# ----------------------------------------------------------------------------


def is_tunix_attention(node) -> bool:
  """A tunix attention layer whose model file has a module-level `apply_rope`."""
  cls = type(node)
  module = sys.modules.get(cls.__module__)
  return (isinstance(node, nnx.Module) and cls.__module__.startswith("tunix.models.") and
          cls.__name__ == "Attention" and callable(getattr(module, "apply_rope", None)))


def sites(model) -> list[tuple[tuple, nnx.Module]]:
  """`(path, layer)` for every tunix attention layer (converted or not) in `model`."""
  return [(path, node)
          for path, node in nnx.iter_graph(model)
          if is_tunix_attention(node) or hasattr(type(node), "_bifocal_host")]


def _head_counts(layer) -> tuple[int, int, int]:
  """`(num_heads, num_kv_heads, head_dim)`: from the layer's config where it has one.

  (tunix 0.1.7's Llama 3 and Qwen 3 `Attention.num_heads` property reads the
  embedding width, `q_proj.shape[0]`; their config is right.)
  """
  config = getattr(layer, "config", None)
  if config is not None:
    return int(config.num_heads), int(config.num_kv_heads), int(config.head_dim)
  return int(layer.num_heads), int(layer.num_kv_heads), int(layer.head_dim)


def convert(model, *, spectrum: str = "kv_heads", predicate=lambda path, node: True) -> int:
  """Converts every unconverted tunix attention layer in `model`; returns how many.

  Raises:
    ValueError, in one line naming the layer: a tunix family other than
      Gemma 3, Llama 3 and Qwen 3, an attribute `rope` already in use, or a
      per-query-head spectrum under grouped-query attention (a key head
      shared by query heads with different spectra has no single rotation
      to cache).
  """
  if spectrum not in SPECTRA:
    raise ValueError(f"spectrum must be one of {SPECTRA}, got {spectrum!r}")
  todo = []
  for path, layer in sites(model):
    where = "/".join(map(str, path)) or "<root>"
    if hasattr(type(layer), "_bifocal_host") or not predicate(path, layer):
      continue
    cls = type(layer)
    if cls.__module__ not in FAMILIES:
      raise ValueError(
          f"cannot convert {cls.__module__}.{cls.__qualname__} at {where}: spectralize supports "
          f"tunix's {', '.join(m.split('.')[2] for m in FAMILIES)} attention")
    if "rope" in vars(layer):
      raise ValueError(f"cannot convert {cls.__module__}.{cls.__qualname__} at {where}: "
                       "it already has an attribute named 'rope'")
    heads, kv_heads, head_dim = _head_counts(layer)
    if spectrum == "heads" and heads != kv_heads:
      raise ValueError(
          f"cannot give {cls.__module__}.{cls.__qualname__} at {where} one spectrum per query "
          f"head: {heads} query heads share {kv_heads} key heads; use spectrum='kv_heads'")
    module = sys.modules[cls.__module__]
    theta, scale = FAMILIES[cls.__module__].base_and_scale(layer, module.apply_rope)
    todo.append((layer,
                 TunixRoPE(theta=theta, scale_factor=scale, head_dim=head_dim, num_heads=heads,
                           num_kv_heads=kv_heads, spectrum=spectrum, site=where)))
  for layer, rope in todo:
    layer.__class__ = converted_class(type(layer))
    layer.rope = rope
  return len(todo)
