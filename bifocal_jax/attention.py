"""Multi-head attention whose positional treatment is chosen by `position.kind`.

Kinds (see `POSITION_KINDS`):
  nope             no positional signal (causal masking only).
  rope             geometric RoPE on every channel pair.
  partial_rope     geometric RoPE on a fraction of each head (Gemma's
                   `rope_proportion`), the rest position-free.
  randomized_rope  geometric RoPE over randomized positions (Ruoss et al.
                   2023): the model draws the positions (see `model.py`).
  alibi            linear distance biases (Press et al. 2022).
  spectral         every head has its own trainable spectrum.
  bifocal          geometric eyes + spectral eyes, split by heads or pairs.

Whatever the kind, the rotary module is held as `self.rope` and only its
`frequencies()` and `layout` are used: the angles are computed once per layer
and call, and shared by queries and keys. Surgery (`surgery.py`) swaps
`self.rope` for a spectral module with the same spectrum.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
from flax import nnx

from bifocal_jax import rope as rope_lib

POSITION_KINDS = (
    "nope", "rope", "partial_rope", "randomized_rope", "alibi", "spectral", "bifocal")
ROTARY_KINDS = ("rope", "partial_rope", "randomized_rope", "spectral", "bifocal")


def default_position_config() -> ml_collections.ConfigDict:
  """Every key the attention layer understands, with its default."""
  return ml_collections.ConfigDict(dict(
      kind="bifocal",
      base=10_000.0,            # geometric spectrum base (theta)
      layout="half",            # "half" (Llama) or "interleaved" (GPT-J)
      rotary_fraction=0.5,      # partial_rope: fraction of each head rotated
      max_position=8192,        # randomized_rope: positions drawn from [0, max_position)
      randomize_eval=True,      # randomized_rope: also randomize at evaluation (as Ruoss et al.)
      split="heads",            # bifocal: "heads" or "pairs"
      spectral_heads=-1,        # bifocal/heads: number of spectral heads (-1: half)
      spectral_pairs=-1,        # bifocal/pairs: spectral pairs per head (-1: half)
  ))


def make_rope(position: ml_collections.ConfigDict, *, num_heads: int, head_dim: int):
  """The rotary module of one layer for `position.kind`, or None."""
  kind = position.kind
  if kind not in POSITION_KINDS:
    raise ValueError(f"position.kind must be one of {POSITION_KINDS}, got {kind!r}")
  common = dict(theta=position.base, embedding_size=head_dim, layout=position.layout)
  if kind in ("rope", "randomized_rope"):
    return rope_lib.GeometricRoPE(**common)
  if kind == "partial_rope":
    return rope_lib.GeometricRoPE(**common, rotary_fraction=position.rotary_fraction)
  if kind == "spectral":
    return rope_lib.SpectralRoPE(**common, num_heads=num_heads)
  if kind == "bifocal":
    spectral_heads = None if position.spectral_heads == -1 else position.spectral_heads
    spectral_pairs = None if position.spectral_pairs == -1 else position.spectral_pairs
    if position.split == "heads" and spectral_heads is None and num_heads < 2:
      raise ValueError("position.kind='bifocal' split by heads needs num_heads >= 2")
    return rope_lib.BifocalRoPE(**common, num_heads=num_heads, split=position.split,
                                spectral_heads=spectral_heads, spectral_pairs=spectral_pairs)
  return None


class Attention(nnx.Module):
  """Multi-head self-attention over `x_BxLxD` with a fused QKV projection.

  Parameters carry `logical_axes` metadata (`sharding.py` maps them to mesh
  axes); nothing here needs a mesh.
  """

  def __init__(self, d_model: int, num_heads: int, head_dim: int,
               position: ml_collections.ConfigDict, *, causal: bool,
               dtype: Any = jnp.float32, query_chunk: int = 1024, rngs: nnx.Rngs):
    if head_dim % 2:
      raise ValueError(f"head_dim must be even for rotary embeddings, got {head_dim}")
    self.num_heads, self.head_dim, self.causal, self.dtype = num_heads, head_dim, causal, dtype
    self.kind = position.kind
    self.query_chunk = query_chunk
    init = jax.nn.initializers.lecun_normal(in_axis=0, out_axis=(1, 2, 3))
    self.qkv_DxTxHxK = nnx.Param(
        init(rngs.params(), (d_model, 3, num_heads, head_dim)),
        logical_axes=("embed", None, "heads", "head_dim"))
    out_init = jax.nn.initializers.lecun_normal(in_axis=(0, 1), out_axis=2)
    self.out_HxKxD = nnx.Param(
        out_init(rngs.params(), (num_heads, head_dim, d_model)),
        logical_axes=("heads", "head_dim", "embed"))
    self.rope = make_rope(position, num_heads=num_heads, head_dim=head_dim)
    self.alibi_slopes = (
        nnx.Variable(jnp.asarray(rope_lib.alibi_slopes(num_heads)))
        if self.kind == "alibi" else None)

  def __call__(self, x_BxLxD: jax.Array, positions_BxL: jax.Array,
               valid_BxL: jax.Array | None = None) -> jax.Array:
    qkv = jnp.einsum("bld,dthk->tblhk", x_BxLxD, self.qkv_DxTxHxK[...].astype(self.dtype))
    q_BxLxHxK, k_BxLxHxK, v_BxLxHxK = qkv[0], qkv[1], qkv[2]
    rope_lib.check_positions(q_BxLxHxK.shape, positions_BxL.shape)
    if self.rope is not None:
      cos, sin = rope_lib.rotary_cos_sin(positions_BxL, self.rope.frequencies())
      q_BxLxHxK = rope_lib.rotate(q_BxLxHxK, cos, sin, self.rope.layout)
      k_BxLxHxK = rope_lib.rotate(k_BxLxHxK, cos, sin, self.rope.layout)
    slopes = None if self.alibi_slopes is None else self.alibi_slopes[...]
    out_BxLxHxK = attend(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, positions_BxL, valid_BxL,
                         causal=self.causal, alibi_slopes=slopes, query_chunk=self.query_chunk)
    return jnp.einsum("blhk,hkd->bld", out_BxLxHxK, self.out_HxKxD[...].astype(self.dtype))


def attend(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, positions_BxL, valid_BxL=None, *, causal: bool,
           alibi_slopes=None, query_chunk: int = 1024):
  """Softmax attention with causal/padding masks and optional ALiBi biases.

  On GPU/TPU this is `jax.nn.dot_product_attention` (cuDNN's fused kernel
  where it applies). On CPU, XLA's lowering of that function is 2-3x slower
  than two einsums and a float32 softmax, so we use the einsums there; for
  sequences longer than `query_chunk` the queries are processed in chunks,
  so the score memory is `chunk x L` per head instead of `L x L`.
  """
  if jax.default_backend() != "cpu":
    bias = None
    if alibi_slopes is not None:
      bias = rope_lib.alibi_bias(positions_BxL, positions_BxL, alibi_slopes).astype(q_BxLxHxK.dtype)
    mask = None if valid_BxL is None else valid_BxL[:, None, None, :]
    implementation = "cudnn" if _cudnn_applies(q_BxLxHxK, bias) else None
    return jax.nn.dot_product_attention(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, bias=bias, mask=mask,
                                        is_causal=causal, implementation=implementation)
  length = q_BxLxHxK.shape[1]
  if length <= query_chunk:
    return _attend_block(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, 0, positions_BxL, positions_BxL,
                         valid_BxL, causal, alibi_slopes)
  num_chunks = -(-length // query_chunk)
  pad = num_chunks * query_chunk - length
  q_pad = jnp.pad(q_BxLxHxK, ((0, 0), (0, pad), (0, 0), (0, 0)))
  pos_pad = jnp.pad(positions_BxL, ((0, 0), (0, pad)))
  b, _, h, k = q_BxLxHxK.shape
  q_chunks = q_pad.reshape(b, num_chunks, query_chunk, h, k).swapaxes(0, 1)
  pos_chunks = pos_pad.reshape(b, num_chunks, query_chunk).swapaxes(0, 1)

  def one(args):
    index, q_c, pos_c = args
    return _attend_block(q_c, k_BxLxHxK, v_BxLxHxK, index * query_chunk, pos_c, positions_BxL,
                         valid_BxL, causal, alibi_slopes)

  out = jax.lax.map(one, (jnp.arange(num_chunks), q_chunks, pos_chunks))
  return out.swapaxes(0, 1).reshape(b, num_chunks * query_chunk, h, -1)[:, :length]


def _attend_block(q_BxQxHxK, k_BxSxHxK, v_BxSxHxK, q_offset, q_pos_BxQ, k_pos_BxS, valid_BxS,
                  causal, alibi_slopes):
  scale = q_BxQxHxK.shape[-1] ** -0.5
  scores = jnp.einsum("bqhk,bshk->bhqs", q_BxQxHxK, k_BxSxHxK,
                      preferred_element_type=jnp.float32) * scale
  if alibi_slopes is not None:
    scores = scores + rope_lib.alibi_bias(q_pos_BxQ, k_pos_BxS, alibi_slopes)
  q_len, k_len = q_BxQxHxK.shape[1], k_BxSxHxK.shape[1]
  mask = jnp.ones((1, 1, q_len, k_len), bool)
  if causal:  # by index, not position: randomized positions keep the order
    q_index = q_offset + jnp.arange(q_len)
    mask = mask & (q_index[:, None] >= jnp.arange(k_len)[None, :])[None, None]
  if valid_BxS is not None:
    mask = mask & valid_BxS[:, None, None, :]
  scores = jnp.where(mask, scores, jnp.finfo(jnp.float32).min)
  probs = jax.nn.softmax(scores, axis=-1).astype(v_BxSxHxK.dtype)
  return jnp.einsum("bhqs,bshk->bqhk", probs, v_BxSxHxK)


def _cudnn_applies(q, bias) -> bool:
  """cuDNN's fused attention: GPU, half precision, head_dim a multiple of 8."""
  return (jax.default_backend() == "gpu" and q.dtype in (jnp.bfloat16, jnp.float16)
          and q.shape[-1] % 8 == 0 and q.shape[-1] <= 128 and bias is None)
