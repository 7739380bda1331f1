"""Surgical Integration for the `gemma` library's Linen models (gemma 4.0.1: Gemma 2 and 3).

`SpectralGemma(model=...)` wraps a gemma model the way its own
`gm.nn.LoRA(model=...)` does: it shares the model's scope (so checkpoints and
parameter paths are the model's, plus the new parameters) and calls it under
an `nn.intercept_methods` interceptor. The interceptor

* when a gemma `Attention` runs `setup`, gives it a child `rope`
  (`RatioSpectrum`), whose param `log_frequency_ratio` (`[num_kv_heads,
  rotary pairs]` by default, at 0) lives at `.../attn/rope/log_frequency_ratio`
  inside the model's own parameter tree;
* when that `Attention` runs `__call__`, runs a copy of its method in which
  `_positional_embeddings.apply_rope` rotates with gemma's own angle
  arithmetic times `exp(ratio)` (see `hosts`): exact at step 0.

Why this is immune to gemma's `nn.jit` trace cache: its `Transformer.__call__`
is `nn.jit` with `self` static, and the cache key holds the module and the
structure of its variables, not the interceptors active while it traces. At
`init` the variables are empty, so a model traced bare (or wrapped with
another spectrum) would be replayed without the conversion. The wrapper
therefore first creates an empty marker param, `spectral_surgery_<spectrum>`
(shape `[0]`), in the model's scope: every wrapper configuration, and the bare
model, trace under a different variable structure, at `init` and `apply`.

Gemma 4's attention (`gemma.gm.nn.gemma4`) is refused: its layers share keys
across layers (`kv_shared_cache`), which per-layer spectra cannot reproduce
exactly once they move.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import types

import flax.linen as nn
import flax.traverse_util
import jax
import jax.numpy as jnp

from bifocal_jax.surgery import hosts

SPECTRA = ("kv_heads", "heads", "shared")
SUPPORTED = "gemma.gm.nn._modules"


def host_angles(positions: jax.Array, head_dim: int, base: float, scale: float,
                rope_proportion: float = 1.0) -> tuple[jax.Array, int]:
  """gemma's angles `[B, L, 1, head_dim // 2]` and how many pairs rotate.

  `timescale = base ** ((2 / head_dim) * i)` for the rotated pairs, padded
  with infinity (angle 0) for the others; divided by `scale` as gemma does.
  """
  rope_angles = int(rope_proportion * head_dim // 2)
  nope_angles = head_dim // 2 - rope_angles
  freq_exponents = (2.0 / head_dim) * jnp.arange(0, rope_angles, dtype=jnp.float32)
  timescale = jnp.pad(base**freq_exponents, (0, nope_angles), mode="constant",
                      constant_values=(0, jnp.inf))
  angles = (positions[..., jnp.newaxis] / timescale[jnp.newaxis, jnp.newaxis, :])[...,
                                                                                  jnp.newaxis, :]
  return angles / scale, rope_angles


def rotate_like_host(x: jax.Array, angles: jax.Array) -> jax.Array:
  """gemma's rotation of `x: [B, L, heads, head_dim]` (half layout)."""
  sin, cos = jnp.sin(angles), jnp.cos(angles)
  first_half, second_half = jnp.split(x, 2, axis=-1)
  out = jnp.concatenate(
      [first_half * cos - second_half * sin, second_half * cos + first_half * sin], axis=-1)
  return out.astype(x.dtype)


class RatioSpectrum(nn.Module):
  """`exp(log_frequency_ratio)`, the param created at first call, float32, at 0."""

  @nn.compact
  def __call__(self, shape: tuple[int, ...]) -> jax.Array:

    def init(key, shape, dtype=None):
      del key, dtype  # deterministic, and float32 whatever dtype a caller asks for
      return jnp.zeros(shape, jnp.float32)

    return jnp.exp(self.param(hosts.RATIO_NAME, init, shape))


def _dispatcher(original, attention, spectrum: str):
  """gemma's `apply_rope` with `attention`'s spectrum."""
  signature = inspect.signature(original)

  def apply_rope(*args, **kwargs):
    bound = signature.bind(*args, **kwargs)
    bound.apply_defaults()
    a = bound.arguments
    x, scale = a["inputs"], float(a["scale_factor"])
    if scale < 1.0:
      raise ValueError(f"scale_factor must be >= 1.0, got {scale}")
    angles, rotated = host_angles(a["positions"], x.shape[-1], float(a["base_frequency"]), scale,
                                  float(a.get("rope_proportion", 1.0)))
    heads = {
        "kv_heads": attention.num_kv_heads,
        "heads": attention.num_heads,
        "shared": 1
    }[spectrum]
    ratio = attention.rope((heads, rotated))
    if ratio.shape[0] != x.shape[-2]:
      if x.shape[-2] != attention.num_heads or ratio.shape[0] != attention.num_kv_heads:
        raise ValueError(f"{type(attention).__module__}.Attention at {'/'.join(attention.path)}: "
                         f"a rotary call on {x.shape[-2]} heads, spectrum of {ratio.shape[0]}")
      ratio = jnp.repeat(ratio, attention.num_heads // attention.num_kv_heads, axis=0)
    ratio = jnp.pad(ratio, ((0, 0), (0, angles.shape[-1] - rotated)), constant_values=1.0)
    return rotate_like_host(x, angles * ratio)

  return apply_rope


@functools.cache
def _call_code(cls):
  """`cls.__call__`'s undecorated function (Flax wraps module methods)."""
  return inspect.unwrap(cls.__call__)


def _spectral_call(attention, spectrum: str, args, kwargs):
  """Runs `attention.__call__` with `_positional_embeddings` resolving to our dispatcher."""
  function = _call_code(type(attention))
  positional = function.__globals__["_positional_embeddings"]
  proxy = types.SimpleNamespace(apply_rope=_dispatcher(positional.apply_rope, attention, spectrum))
  where = f"{type(attention).__module__}.Attention"
  call = hosts.rebind_globals(function, where, _positional_embeddings=proxy)
  return call(attention, *args, **kwargs)


def _is_gemma_attention(module) -> bool:
  cls = type(module)
  return cls.__name__ == "Attention" and cls.__module__.startswith("gemma.gm.nn")


def _interceptor(next_fun, args, kwargs, context, *, spectrum: str):
  module = context.module
  if not _is_gemma_attention(module):
    return next_fun(*args, **kwargs)
  if type(module).__module__ != SUPPORTED:
    raise ValueError(
        f"cannot convert {type(module).__module__}.Attention at {'/'.join(module.path)}: "
        f"SpectralGemma supports {SUPPORTED}.Attention (Gemma 2 and 3); Gemma 4 shares keys "
        "across layers")
  if context.method_name == "setup":
    out = next_fun(*args, **kwargs)
    if spectrum == "heads" and module.num_heads != module.num_kv_heads:
      raise ValueError(
          f"cannot give {SUPPORTED}.Attention at {'/'.join(module.path)} one spectrum per query "
          f"head: {module.num_heads} query heads share {module.num_kv_heads} key heads; "
          "use spectrum='kv_heads'")
    module.rope = RatioSpectrum()
    return out
  if context.method_name == "__call__":
    return _spectral_call(module, spectrum, args, kwargs)
  return next_fun(*args, **kwargs)


def merge_params(params, wrapped_params):
  """`params` (say, loaded weights of the bare model) plus what the wrapper adds.

  Every leaf of `params` is kept; leaves only in `wrapped_params` (the ratios
  at 0 and the marker) are added, so the merged tree gives the bare model's
  outputs under `SpectralGemma` at step 0.
  """
  flat = flax.traverse_util.flatten_dict(wrapped_params)
  flat.update(flax.traverse_util.flatten_dict(params))
  return flax.traverse_util.unflatten_dict(flat)


class SpectralGemma(nn.Module):
  """A gemma model whose attention layers have trainable rotary spectra.

  Used like `gm.nn.LoRA`: `SpectralGemma(model=gm.nn.Gemma3_1B())`, then
  `init`/`apply` as the model (same arguments). Its params are the model's
  plus one `log_frequency_ratio` per attention layer, at 0, and the marker
  (see the module docstring); `merge_params(loaded, wrapped.init(...))` adds
  them to loaded weights, which then give the original outputs.
  `optim.spectral_evolution` puts the ratios in their own optimizer group.

  Attributes:
    model: the gemma model to wrap.
    spectrum: `"kv_heads"` (default; one spectrum per key/value head, shared
      by its query heads), `"heads"` (per query head; refused under
      grouped-query attention) or `"shared"`.
  """

  _: dataclasses.KW_ONLY
  model: nn.Module
  spectrum: str = "kv_heads"

  def __post_init__(self):
    if self.spectrum not in SPECTRA:
      raise ValueError(f"spectrum must be one of {SPECTRA}, got {self.spectrum!r}")
    super().__post_init__()
    if self.scope is not None:
      nn.share_scope(self, self.model)

  @nn.compact
  def __call__(self, *args, **kwargs):

    def empty(key, shape, dtype=None):
      del key, dtype
      return jnp.zeros(shape, jnp.float32)

    self.param(f"spectral_surgery_{self.spectrum}", empty, (0,))  # see the module docstring
    with nn.intercept_methods(functools.partial(_interceptor, spectrum=self.spectrum)):
      return self.model(*args, **kwargs)

  def __getattr__(self, name: str):
    return getattr(self.model, name)
