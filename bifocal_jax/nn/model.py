"""A compact pre-LayerNorm transformer for the formal-language tasks.

Token embedding, `num_layers` blocks of (LayerNorm -> attention -> residual,
LayerNorm -> GELU MLP -> residual), a final LayerNorm and an untied output
head. Causal (decoder, next-token) or bidirectional (encoder, Chomsky tasks
with output positions). Positional treatment: `bifocal_jax/nn/positions/` (the
schemes), `attention.py` (the layer that applies them); here the model adds
absolute embeddings at the input, holds the modules that all layers share,
and draws randomized positions.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx

from bifocal_jax.nn import attention as attention_lib
from bifocal_jax.nn import positions as positions_lib
from bifocal_jax.nn import rope as rope_lib
from bifocal_jax.nn.positions import alibi as alibi_lib

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


def default_model_config() -> ml_collections.ConfigDict:
  return ml_collections.ConfigDict(
      dict(
          num_layers=2,
          d_model=64,
          num_heads=4,
          head_dim=-1,  # -1: d_model // num_heads
          mlp_dim=-1,  # -1: 4 * d_model
          dtype="float32",  # compute dtype; parameters are float32
      ))


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def layer_norm(x_NxD, scale_D, bias_D, eps: float):
  """`(x - mean) / sqrt(var + eps) * scale + bias` over the last axis, computed
  in float32, returned in `x`'s dtype.

  Its backward is written out (`_layer_norm_bwd`): at the widths of these
  models (64) a token's matmuls are small and autodiff's backward of the two
  reductions costs as much as they do; the closed form is two reductions and
  one elementwise pass over `x` (same gradients to float32 rounding,
  `tests/nn/test_model.py`; docs/performance.md).
  """
  return _layer_norm_fwd(x_NxD, scale_D, bias_D, eps)[0]


def _layer_norm_fwd(x_NxD, scale_D, bias_D, eps):
  x32 = x_NxD.astype(jnp.float32)
  centred = x32 - x32.mean(-1, keepdims=True)
  rstd_Nx1 = jax.lax.rsqrt(jnp.square(centred).mean(-1, keepdims=True) + eps)
  normed = centred * rstd_Nx1
  return (normed * scale_D + bias_D).astype(x_NxD.dtype), (normed, rstd_Nx1, scale_D, bias_D)


def _layer_norm_bwd(eps, residuals, dy_NxD):
  """With `n = (x - mean) * rstd` and `g = dy * scale`:
  `dx = rstd * (g - mean(g) - n * mean(g n))`, `dscale = sum(dy n)`, `dbias = sum(dy)`."""
  del eps
  normed, rstd_Nx1, scale_D, bias_D = residuals
  dy = dy_NxD.astype(jnp.float32)
  g = dy * scale_D
  dx = rstd_Nx1 * (g - g.mean(-1, keepdims=True) - normed * (g * normed).mean(-1, keepdims=True))
  leading = tuple(range(dy.ndim - 1))
  return (dx.astype(dy_NxD.dtype), (dy * normed).sum(leading).astype(scale_D.dtype),
          dy.sum(leading).astype(bias_D.dtype))


layer_norm.defvjp(_layer_norm_fwd, _layer_norm_bwd)


class LayerNorm(nnx.Module):

  def __init__(self, dim: int, *, eps: float = 1e-6):
    self.scale = nnx.Param(jnp.ones((dim,)), logical_axes=("embed",))
    self.bias = nnx.Param(jnp.zeros((dim,)), logical_axes=("embed",))
    self.eps = eps

  def __call__(self, x):
    return layer_norm(x, self.scale[...], self.bias[...], self.eps)


class Mlp(nnx.Module):

  def __init__(self, d_model: int, mlp_dim: int, *, dtype, rngs: nnx.Rngs):
    init = jax.nn.initializers.lecun_normal()
    self.w_in_DxF = nnx.Param(init(rngs.params(), (d_model, mlp_dim)),
                              logical_axes=("embed", "mlp"))
    self.b_in_F = nnx.Param(jnp.zeros((mlp_dim,)), logical_axes=("mlp",))
    self.w_out_FxD = nnx.Param(init(rngs.params(), (mlp_dim, d_model)),
                               logical_axes=("mlp", "embed"))
    self.b_out_D = nnx.Param(jnp.zeros((d_model,)), logical_axes=("embed",))
    self.dtype = dtype

  def __call__(self, x_BxLxD):
    h = x_BxLxD @ self.w_in_DxF[...].astype(self.dtype) + self.b_in_F[...].astype(self.dtype)
    h = jax.nn.gelu(h)
    return h @ self.w_out_FxD[...].astype(self.dtype) + self.b_out_D[...].astype(self.dtype)


class Block(nnx.Module):

  def __init__(self, cfg: ml_collections.ConfigDict, position: ml_collections.ConfigDict, *,
               causal: bool, dtype, rngs: nnx.Rngs):
    d, heads, head_dim, mlp_dim = resolved_dims(cfg)
    self.ln_attn = LayerNorm(d)
    self.attn = attention_lib.Attention(d, heads, head_dim, position, causal=causal, dtype=dtype,
                                        rngs=rngs)
    self.ln_mlp = LayerNorm(d)
    self.mlp = Mlp(d, mlp_dim, dtype=dtype, rngs=rngs)

  def __call__(self, x_BxLxD, positions_BxL, valid_BxL, *, shared=None, distances_BxL=None):
    x_BxLxD = x_BxLxD + self.attn(self.ln_attn(x_BxLxD), positions_BxL, valid_BxL, shared=shared,
                                  distances_BxL=distances_BxL)
    return x_BxLxD + self.mlp(self.ln_mlp(x_BxLxD))


def resolved_dims(cfg: ml_collections.ConfigDict) -> tuple[int, int, int, int]:
  """(d_model, num_heads, head_dim, mlp_dim) with the -1 defaults filled in."""
  for key in ("num_layers", "d_model", "num_heads"):
    if int(cfg[key]) < 1:
      raise ValueError(f"model.{key} must be a positive integer, got {cfg[key]!r}")
  head_dim = cfg.head_dim if cfg.head_dim != -1 else cfg.d_model // cfg.num_heads
  mlp_dim = cfg.mlp_dim if cfg.mlp_dim != -1 else 4 * cfg.d_model
  if head_dim < 2 or head_dim % 2:
    raise ValueError(f"model.head_dim must be a positive even integer, got {head_dim} "
                     f"(d_model={cfg.d_model}, num_heads={cfg.num_heads})")
  if mlp_dim < 1:
    raise ValueError(f"model.mlp_dim must be positive, got {mlp_dim}")
  return cfg.d_model, cfg.num_heads, head_dim, mlp_dim


def compute_dtype(cfg: ml_collections.ConfigDict):
  """The compute dtype `cfg.dtype` names; a ValueError naming the key otherwise."""
  if cfg.dtype not in DTYPES:
    raise ValueError(f"model.dtype={cfg.dtype!r}: must be one of {tuple(DTYPES)}")
  return DTYPES[cfg.dtype]


def layer_input(x: jax.Array | None, layer: int) -> jax.Array | None:
  """Layer `layer`'s positions or distances: `x[layer]` when drawn per layer
  (`[layers, B, L]`), else `x` (`[B, L]`, `[1, L]` or `[L]`: for all layers)."""
  return x[layer] if x is not None and x.ndim == 3 else x


class Transformer(nnx.Module):
  """`logits_BxLxV = model(tokens_BxL, valid_BxL, rng=...)`."""

  def __init__(self, cfg: ml_collections.ConfigDict, position: ml_collections.ConfigDict, *,
               vocab_size: int, causal: bool, rngs: nnx.Rngs):
    d, heads, head_dim, _ = resolved_dims(cfg)
    self.dtype = compute_dtype(cfg)
    self.vocab_size, self.causal = vocab_size, causal
    self.position_kind = position.kind
    scheme = positions_lib.get(position.kind)
    scheme.check_direction(causal=causal)
    self.randomize = scheme.randomize
    self.draw_per_layer = scheme.draws_per_layer(position)
    self.max_position = int(position.max_position)
    self.randomize_eval = bool(position.randomize_eval)
    self.embed_VxD = nnx.Param(
        jax.random.normal(rngs.params(), (vocab_size, d)) * d**-0.5,
        logical_axes=("vocab", "embed"))
    dims = dict(d_model=d, num_heads=heads, head_dim=head_dim, causal=causal, rngs=rngs)
    self.position_embedding = (None if scheme.embedding is None else scheme.embedding(
        position, **dims))
    self.position = None if scheme.shared is None else scheme.shared(position, **dims)
    self.blocks = nnx.List([
        Block(cfg, position, causal=causal, dtype=self.dtype, rngs=rngs)
        for _ in range(cfg.num_layers)
    ])
    self.ln_final = LayerNorm(d)
    self.unembed_DxV = nnx.Param(jax.nn.initializers.lecun_normal()(rngs.params(), (d, vocab_size)),
                                 logical_axes=("embed", "vocab"))

  def _randomizes(self, train: bool) -> bool:
    return self.randomize != positions_lib.base.IN_ORDER and (train or self.randomize_eval)

  def positions(self, shape: tuple[int, int], rng: jax.Array | None, train: bool, *,
                lengths_B: jax.Array | None = None) -> jax.Array:
    """`0 .. L-1`, or the randomized positions of a randomized kind when a key
    is given: one sorted draw shared by the batch, as the source draws them
    (`randomized_rope`, `randomized_sin_cos`, `randomized_learnt`).
    `lengths_B`: each sequence's real tokens (default `L`): a padded sequence
    gets the draw its unpadded length would (`rope.randomized_positions`)."""
    if self._randomizes(train) and self.randomize != positions_lib.base.DISTANCES:
      if rng is None:
        raise ValueError(f"position.kind={self.position_kind!r} needs an rng to draw positions")
      return rope_lib.randomized_positions(rng, shape, self.max_position, lengths=lengths_B,
                                           shared=True)
    return jnp.broadcast_to(jnp.arange(shape[1], dtype=jnp.int32), shape)

  def distances(self, length: int, rng: jax.Array | None, train: bool, *,
                lengths_B: jax.Array | None = None) -> jax.Array | None:
    """The relative distances `[0, r_1 < ... < r_{L-1}]` of one call
    (`randomized_relative`, `randomized_alibi`), or None for other kinds:
    `[1, L]` (in order, or one draw for unpadded sequences), or `[B, L]` with
    `lengths_B`: each sequence the draw of its own real length (sequences of
    one length share it, as the source's one draw per batch)."""
    if self.randomize != positions_lib.base.DISTANCES:
      return None
    if not self._randomizes(train):
      return jnp.arange(length, dtype=jnp.int32)[None]
    if rng is None:
      raise ValueError(f"position.kind={self.position_kind!r} needs an rng to draw distances")
    return alibi_lib.draw_distances(rng, length, self.max_position, lengths_B=lengths_B)

  def draw(self, tokens_BxL: jax.Array, valid_BxL: jax.Array | None, rng: jax.Array | None,
           train: bool) -> tuple[jax.Array, jax.Array | None]:
    """`(positions_BxL, distances_BxL)` of a call: randomized ones drawn for the
    real lengths `valid_BxL` marks (padding changes no real token's draw, nor
    does a longer sequence in the batch), as the source draws them for a batch
    of one unpadded length. With `draw_per_layer`, the randomized one of the
    two has a leading layer axis (`[layers, B, L]`: each layer its own draw,
    `layer_input` picks a layer's)."""
    batch, length = tokens_BxL.shape
    lengths_B = None if valid_BxL is None else jnp.sum(valid_BxL, axis=-1, dtype=jnp.int32)
    if not (self._randomizes(train) and self.randomize != positions_lib.base.DISTANCES):
      # In-order positions are shared by the batch ([1, L]), so every layer
      # computes its rotary angles once for all sequences.
      positions = lambda key: self.positions((1, length), key, train)
    else:
      positions = lambda key: self.positions((batch, length), key, train, lengths_B=lengths_B)
    distances = lambda key: self.distances(length, key, train, lengths_B=lengths_B)
    if not (self.draw_per_layer and self._randomizes(train)):
      return positions(rng), distances(rng)
    if rng is None:
      raise ValueError(f"position.kind={self.position_kind!r} needs an rng to draw positions")
    keys = jax.random.split(rng, len(self.blocks))
    if self.randomize == positions_lib.base.DISTANCES:
      return positions(None), jnp.stack([distances(k) for k in keys])
    return jnp.stack([positions(k) for k in keys]), distances(None)

  def __call__(self, tokens_BxL: jax.Array, valid_BxL: jax.Array | None = None, *,
               positions_BxL: jax.Array | None = None, distances_BxL: jax.Array | None = None,
               rng: jax.Array | None = None, train: bool = False) -> jax.Array:
    """Positions (and the randomized distances of `randomized_relative` and
    `randomized_alibi`: `[B, L]`, or `[1, L]` or `[L]` for the batch) are drawn
    from `rng` unless given; given positions without distances mean in-order
    distances."""
    if positions_BxL is None:
      positions_BxL, drawn_BxL = self.draw(tokens_BxL, valid_BxL, rng, train)
      distances_BxL = drawn_BxL if distances_BxL is None else distances_BxL
    elif distances_BxL is None and self.randomize == positions_lib.base.DISTANCES:
      distances_BxL = jnp.arange(tokens_BxL.shape[1], dtype=jnp.int32)[None]
    x_BxLxD = jnp.take(self.embed_VxD[...], tokens_BxL, axis=0).astype(self.dtype)
    if self.position_embedding is not None:
      x_BxLxD = x_BxLxD + self.position_embedding(positions_BxL).astype(self.dtype)
    for i, block in enumerate(self.blocks):
      x_BxLxD = block(x_BxLxD, layer_input(positions_BxL, i), valid_BxL, shared=self.position,
                      distances_BxL=layer_input(distances_BxL, i))
    x_BxLxD = self.ln_final(x_BxLxD)
    return (x_BxLxD @ self.unembed_DxV[...].astype(self.dtype)).astype(jnp.float32)


def spectral_frequencies(model: nnx.Module) -> jax.Array | None:
  """Current spectral frequencies as `[layers, heads, pairs]` (None without any).

  Heads are the spectral heads (1 for a shared spectrum); pairs the spectral
  pairs. This is what the training trajectory records. In a mixed kind
  (`spectral+alibi`) they are the spectral heads of its rotary group(s).
  """
  per_layer = []
  for block in model.blocks:
    groups = block.attn.groups
    ropes = ([block.attn.rope]
             if groups is None else [groups[kind].rope for kind in block.attn.group_kinds])
    spectra = []
    for rope in ropes:
      log_frequency = getattr(rope, "log_frequency", None)
      if isinstance(log_frequency, rope_lib.SpectralFrequency):
        f = jnp.exp(log_frequency[...])
        spectra.append(f[None] if f.ndim == 1 else f)
    if spectra:
      per_layer.append(jnp.concatenate(spectra, axis=0))
  if not per_layer:
    return None
  return jnp.stack(per_layer)


def count_params(model: nnx.Module) -> int:
  return int(sum(np.prod(x.shape) for x in jax.tree.leaves(nnx.state(model, nnx.Param))))


def flops_per_token(cfg: ml_collections.ConfigDict, *, vocab_size: int, seq_len: int) -> float:
  """Training FLOPs per token (forward + backward = 3x forward), PaLM-style.

  6 * (matmul parameters) + 12 * layers * seq_len * (heads * head_dim): the
  second term is attention's QK^T and AV (not halved for causal masks).
  """
  d, heads, head_dim, mlp_dim = resolved_dims(cfg)
  per_layer = d * 3 * heads * head_dim + heads * head_dim * d + 2 * d * mlp_dim
  matmul_params = cfg.num_layers * per_layer + d * vocab_size
  return 6.0 * matmul_params + 12.0 * cfg.num_layers * seq_len * heads * head_dim
