"""Linen versions of the rotary modules, for Linen models.

Same behaviour and call convention as `bifocal_jax.nn.rope`'s NNX modules:
`rope(x, input_positions=None)` on `x: [..., seq, head_dim]` (or `[..., seq,
heads, head_dim]` with per-head spectra), inside `nn.compact` code. The
spectral frequencies are an ordinary Linen param named `log_frequency`, so
`optim.spectral_evolution` (which selects that name) gives them their own
optimizer group.

Other libraries may replace `flax.linen.Module.param` process-wide: the
`gemma` library's does, passing every initialiser a `dtype` (bfloat16 inside
its `initialize_param_with_dtype`). The initialiser here accepts one and
ignores it: the frequencies stay float32, as angles need.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from bifocal_jax.nn.rope import (Layout, _check_rotary_dim, _default_positions, apply_rope,
                                 geometric_frequencies)

__all__ = ("GeometricRoPE", "SpectralRoPE")


def _rotate_one_head(x: jax.Array, input_positions, frequencies: jax.Array, layout: Layout):
  """`x: [..., seq, head_dim]` as a one-head `[..., seq, 1, head_dim]` problem."""
  positions = _default_positions(x, input_positions)
  return apply_rope(x[..., None, :], positions, frequencies, layout=layout)[..., 0, :]


class GeometricRoPE(nn.Module):
  """Fixed RoPE on `x: [..., seq, head_dim]`; `embedding_size` defaults to `x.shape[-1]`."""

  theta: float = 10_000.0
  embedding_size: int | None = None
  rotary_fraction: float = 1.0
  layout: Layout = "half"

  @nn.compact
  def __call__(self, x: jax.Array, input_positions: jax.Array | None = None) -> jax.Array:
    size = x.shape[-1] if self.embedding_size is None else self.embedding_size
    rotary_dim = _check_rotary_dim(size, self.rotary_fraction)
    return _rotate_one_head(x, input_positions, geometric_frequencies(rotary_dim, self.theta),
                            self.layout)


class SpectralRoPE(nn.Module):
  """RoPE with trainable frequencies (param `log_frequency`), initialised geometric.

  `num_heads=None`: one spectrum `[pairs]` on `x: [..., seq, head_dim]`.
  `num_heads=H`: one spectrum per head, `[H, pairs]`, on
  `x: [..., seq, H, head_dim]`.
  """

  theta: float = 10_000.0
  embedding_size: int | None = None
  num_heads: int | None = None
  rotary_fraction: float = 1.0
  layout: Layout = "half"

  @nn.compact
  def __call__(self, x: jax.Array, input_positions: jax.Array | None = None) -> jax.Array:
    if self.num_heads is not None and self.num_heads < 1:
      raise ValueError(f"num_heads must be >= 1, got {self.num_heads!r}")
    size = x.shape[-1] if self.embedding_size is None else self.embedding_size
    rotary_dim = _check_rotary_dim(size, self.rotary_fraction)
    shape = (rotary_dim // 2,) if self.num_heads is None else (self.num_heads, rotary_dim // 2)

    def init(key, shape, dtype=None):
      del key, dtype  # deterministic, and float32 whatever dtype a caller asks for
      return jnp.broadcast_to(jnp.log(geometric_frequencies(rotary_dim, self.theta)), shape)

    frequencies = jnp.exp(self.param("log_frequency", init, shape))
    if self.num_heads is None:
      return _rotate_one_head(x, input_positions, frequencies, self.layout)
    if input_positions is None:
      input_positions = jnp.arange(x.shape[-3], dtype=jnp.int32)
    return apply_rope(x, input_positions, frequencies, layout=self.layout)
