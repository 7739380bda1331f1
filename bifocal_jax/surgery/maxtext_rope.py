"""Surgical Integration for MaxText's rotary modules (maxtext 0.2.5, `layers/embeddings.py`).

MaxText's attention holds a rotary *module* (chosen in
`Attention.init_rotary_embedding`) whose angles are `position / timescale`,
`timescale` a property (`RotaryEmbedding` and `PartialRotaryEmbedding`:
half layout; `Gemma4PartialRotaryEmbedding`: proportional, the unrotated
pairs' timescales infinite; `LLaMARotaryEmbedding`: interleaved layout,
Llama 3.1 scaling), or a precomputed complex table `freqs_cis`
(`YarnRotaryEmbedding`, fixed YaRN scaling). Conversion swaps each module's
class, in place, for a subclass whose `timescale` (or `freqs_cis`) divides
(multiplies) the host's own values by `exp(log_frequency_ratio)` for the
rotated pairs only, a trainable log-ratio at 0 (see `hosts`): the host's
`__call__` runs unchanged, so step 0 is exact, the infinite timescales are
never touched (no NaN gradients, unrotated pairs stay unrotated), and the
interleaved layout is the host's.

The ratio is `[pairs]` (shared), `[num_heads, pairs]` (per head; not for
YaRN, whose table has no head axis), with a leading `[layers]` where the
layers are built under `nnx.vmap`/`nnx.scan` with stacked parameters
(`stacked_layers=`): inside the scanned layer each layer sees its own slice.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from bifocal_jax.nn.rope import SpectralFrequency

MODULE = "maxtext.layers.embeddings"
TIMESCALE = ("RotaryEmbedding", "PartialRotaryEmbedding", "Gemma4PartialRotaryEmbedding",
             "LLaMARotaryEmbedding")
TABLE = ("YarnRotaryEmbedding",)


def _host_class(cls: type) -> type:
  return getattr(cls, "_bifocal_host", cls)


def is_rotary(node) -> bool:
  """A MaxText rotary module (converted or not)."""
  cls = _host_class(type(node))
  return isinstance(
      node, nnx.Module) and cls.__module__ == MODULE and cls.__name__.endswith("RotaryEmbedding")


def rotated_pairs(module) -> int:
  """How many channel pairs the host rotates."""
  if _host_class(type(module)).__name__ == "Gemma4PartialRotaryEmbedding":
    return module.rotary_dim // 2
  return module.embedding_dims // 2


def _ratio(module) -> jax.Array:
  """`exp(log_frequency_ratio)`: `[pairs]` or `[heads, pairs]` (inside a scan, a layer's slice)."""
  return jnp.exp(module.log_frequency_ratio[...])


def _timescale(self):
  timescale = _host_class(type(self)).timescale.fget(self)
  ratio = _ratio(self)
  name = _host_class(type(self)).__name__
  if name == "LLaMARotaryEmbedding":  # [1, 1, 1, 2 * pairs], each pair's timescale twice
    return timescale / jnp.repeat(ratio, 2, axis=-1)
  if name == "Gemma4PartialRotaryEmbedding":  # [head_dim // 2], infinite past the rotated pairs
    pairs = ratio.shape[-1]
    rotated, unrotated = timescale[:pairs] / ratio, timescale[pairs:]
    return jnp.concatenate(
        [rotated, jnp.broadcast_to(unrotated, ratio.shape[:-1] + unrotated.shape)], axis=-1)
  return timescale / ratio


def _freqs_cis(self):
  """YaRN's table, as `YarnRotaryEmbedding.freqs_cis` computes it, frequencies times the ratio."""
  half_dim = self.embedding_dims // 2
  freqs = 1.0 / (self.rope_theta
                 **(2.0 * jnp.arange(0, half_dim, dtype=jnp.float32) / self.embedding_dims))
  low, high = self._find_correction_range(self.beta_fast, self.beta_slow, self.embedding_dims,
                                          self.rope_theta, self.original_max_position_embeddings,
                                          self.truncate)
  smooth = 1 - self._linear_ramp_factor(low, high, half_dim)
  freqs = (freqs / self.rope_factor * (1 - smooth) + freqs * smooth) * _ratio(self)
  t = jnp.arange(self.max_position_embeddings, dtype=jnp.float32)
  return jnp.exp(1j * jnp.outer(t, freqs))


def original_frequencies(module) -> jax.Array:
  """The host's rotated frequencies, `[pairs]` (radians per token), float32."""
  name = _host_class(type(module)).__name__
  pairs = rotated_pairs(module)
  if name in TABLE:
    return jnp.angle(_host_class(type(module)).freqs_cis.fget(module)[1])
  timescale = jnp.reshape(_host_class(type(module)).timescale.fget(module), (-1,))
  if name == "LLaMARotaryEmbedding":
    timescale = timescale[::2]
  return 1.0 / timescale[:pairs]


def frequencies(module) -> jax.Array:
  """A converted module's current frequencies, `[..., pairs]`."""
  return original_frequencies(module) * _ratio(module)


_CONVERTED: dict[type, type] = {}


def converted_class(cls: type) -> type:
  if cls not in _CONVERTED:
    override = ({
        "freqs_cis": property(_freqs_cis)
    } if cls.__name__ in TABLE else {
        "timescale": property(_timescale)
    })
    name = f"Spectral{cls.__name__}"
    _CONVERTED[cls] = type(cls)(name, (cls,), override | {
        "__module__": __name__,
        "__qualname__": name,
        "_bifocal_host": cls
    })
    globals()[name] = _CONVERTED[cls]
  return _CONVERTED[cls]


def sites(model) -> list[tuple[tuple, nnx.Module]]:
  return [(path, node) for path, node in nnx.iter_graph(model) if is_rotary(node)]


def convert(model, *, num_heads: int | None = None, stacked_layers: int | None = None,
            predicate=lambda path, node: True) -> int:
  """Converts every unconverted MaxText rotary module in `model`; returns how many.

  Args:
    num_heads: one spectrum per head (`[num_heads, pairs]`); None: shared.
    stacked_layers: the leading layer axis of parameters built under
      `nnx.vmap`/`nnx.scan`, given to every ratio.

  Raises:
    ValueError, in one line naming the module: a rotary class other than the
      five supported, or per-head spectra for YaRN.
  """
  todo = []
  for path, module in sites(model):
    where = "/".join(map(str, path)) or "<root>"
    cls = type(module)
    if hasattr(cls, "_bifocal_host") or not predicate(path, module):
      continue
    if cls.__name__ not in TIMESCALE + TABLE:
      raise ValueError(f"cannot convert {MODULE}.{cls.__name__} at {where}: supported are "
                       f"{', '.join(TIMESCALE + TABLE)}")
    if cls.__name__ in TABLE and num_heads is not None:
      raise ValueError(f"cannot give {MODULE}.{cls.__name__} at {where} one spectrum per head: "
                       "its frequency table has no head axis; use a shared spectrum")
    shape = ((() if stacked_layers is None else
              (stacked_layers,)) + (() if num_heads is None else
                                    (num_heads,)) + (rotated_pairs(module),))
    todo.append((module, shape))
  for module, shape in todo:
    module.__class__ = converted_class(type(module))
    module.log_frequency_ratio = SpectralFrequency(jnp.zeros(shape, jnp.float32))
  return len(todo)
