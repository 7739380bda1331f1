"""PaTH attention, position encoding by accumulated Householder transformations
(Yang et al. 2025, arXiv 2505.16381).

As fla-org/flash-linear-attention `fla/layers/path_attn.py` (`PaTHAttention`,
its defaults) and its reference op `fla/ops/path_attn/naive.py`
(`naive_path_attn`):

  H_t      = I - beta_t w_t w_t^T                 (a data-dependent generalised reflection)
  logits   = q_i^T H_i H_{i-1} ... H_{j+1} k_j / sqrt(d)     for keys j <= i
  out_i    = softmax_j(logits) v

with, per token, `w_t = l2norm(silu(shortconv(x W_a W_b)))` per head (a
low-rank projection through width 32, `use_low_rank_w`; a causal depthwise
convolution of width 3 without bias, `use_w_shortconv`; l2 normalisation
with eps 1e-6) and `beta_t = 2 sigmoid(x W_beta + b)` per head (in (0, 2),
so H_t may have a negative eigenvalue). The defaults have no forget gate
(`use_forget_gate=False`; PaTH-FoX is `path_fox.py`), no QK-norm and no RoPE.
Weights are initialised as the source's `_init_weights`: N(0, 0.02), biases 0.

The computation is the source's blockwise one (the UT transform of
`naive_path_attn`, block size `block_size`): within each block of C tokens,
`T = (I + strict_lower(diag(beta) W W^T))^{-1}` gives the in-block scores,
each query moved to its block's start and each key to its block's end; a
query then crosses the earlier blocks one at a time (`u <- u (I - W^T T diag(beta) W)`),
so a query chunk holds `chunk x L` scores and `chunk x d` state, never `L x L`.
Causal only (the transformations accumulate along the causal past), so the
encoder refuses this kind. A padded token's reflection is the identity
(`beta = 0`) and its key is masked, as removing it would be.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from bifocal_jax.nn.positions import base
from bifocal_jax.nn.positions import query_chunks

LOW_RANK = 32  # the source's `w_proj` bottleneck
CONV_SIZE = 3  # the source's `conv_size`
L2_EPS = 1e-6  # fla.modules.l2norm's eps
UNROLL_BLOCKS = 16  # unroll the scan over key blocks up to this many (training lengths)


def _block_terms(q, k, w, beta_n):
  """The per-block quantities of the blockwise form, from `[B, H, N, C, d]`
  queries, keys, reflection vectors and `[B, H, N, C]` betas: the in-block
  scores `[.., C, C]`, each query moved back to its block's start and each
  key to its block's end `[.., C, d]`, and each block's whole product of
  reflections `[.., d, d]` (the UT transform: `T = (I + strict(W_beta W^T))^-1`)."""
  c, d = q.shape[-2], q.shape[-1]
  w_beta = w * beta_n[..., None]
  strict = jnp.tril(jnp.ones((c, c), bool), -1)
  lower = jnp.tril(jnp.ones((c, c), bool))
  wbw = jnp.where(strict, jnp.einsum("...sk,...rk->...sr", w_beta, w), 0.0)
  t_mat = unit_lower_inverse(jnp.eye(c, dtype=jnp.float32) + wbw)
  t_wbk = t_mat @ jnp.where(strict, jnp.einsum("...sk,...jk->...sj", w_beta, k), 0.0)
  qw = jnp.where(lower, jnp.einsum("...ik,...sk->...is", q, w), 0.0)
  t_wb = t_mat @ w_beta
  a_local = jnp.where(lower, jnp.einsum("...ik,...jk->...ij", q, k), 0.0) - qw @ t_wbk
  q_start = q - qw @ t_wb
  k_end = k - jnp.swapaxes(t_wbk, -1, -2) @ w
  cross = jnp.eye(d, dtype=jnp.float32) - jnp.swapaxes(w, -1, -2) @ t_wb
  return a_local, q_start, k_end, cross


def path_attention(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, positions_BxL, valid_BxL=None, *,
                   w_BxLxHxK: jax.Array, beta_BxLxH: jax.Array, causal: bool = True,
                   query_chunk: int = 1024, block_size: int = 16,
                   decay_BxHxL: jax.Array | None = None) -> jax.Array:
  """PaTH attention, `[B, L, H, K]` out; `w` unit vectors, `beta` in (0, 2).

  `positions_BxL` is unused (the positions are the reflections). Memory:
  `query_chunk x L` scores per head, `L x block_size` for the in-block
  quantities. `decay_BxHxL` (PaTH-FoX, `path_fox.py`): cumulative log forget
  gates `c`, with `c_i - c_j` added to the scores before the `1/sqrt(d)`
  scaling, as the source's kernels add `g_cumsum`.
  """
  del positions_BxL
  if not causal:
    raise ValueError("position.kind='path' is defined for causal attention only")
  b, length, h, d = q_BxLxHxK.shape
  c = min(block_size, length)
  num_blocks = -(-length // c)
  pad = num_blocks * c - length
  scale = d**-0.5
  beta = beta_BxLxH.astype(jnp.float32)
  if valid_BxL is not None:
    beta = jnp.where(valid_BxL[..., None], beta, 0.0)

  def blocks(x_BxLxHx_):  # [B, L, H, ...] -> [B, H, N, C, ...], zero padded
    x = jnp.pad(x_BxLxHx_.astype(jnp.float32), [(0, 0), (0, pad)] + [(0, 0)] * (x_BxLxHx_.ndim - 2))
    x = jnp.swapaxes(x, 1, 2)
    return x.reshape(x.shape[:2] + (num_blocks, c) + x.shape[3:])

  # padding: beta 0, the identity
  a_local, q_start, k_end, cross_KxK = _block_terms(blocks(q_BxLxHxK), blocks(k_BxLxHxK),
                                                    blocks(w_BxLxHxK), blocks(beta))

  def rows(x):  # [B, H, N, C, ...] -> [B, H, N * C, ...], the per-query layout
    return x.reshape(x.shape[:2] + (num_blocks * c,) + x.shape[4:])

  _, _, v = query_chunks.heads_major(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK)
  k_mask = None if valid_BxL is None else valid_BxL.astype(bool)

  def chunk_scores(q_offset, q_start_BxHxQxK, a_local_BxHxQxC, *decay_q_BxHxQ):
    q_len = q_start_BxHxQxK.shape[2]
    q_block = (q_offset + jnp.arange(q_len)) // c  # [Q]

    def step(u, xs):
      n, k_end_n, cross_n, = xs
      cross_scores = jnp.einsum("bhqk,bhsk->bhqs", u, k_end_n)
      scores = jnp.where((n < q_block)[:, None], cross_scores,
                         jnp.where((n == q_block)[:, None], a_local_BxHxQxC, 0.0))
      u = jnp.where((n < q_block)[:, None], u @ cross_n, u)
      return u, scores

    _, scores = jax.lax.scan(
        step, q_start_BxHxQxK,
        (jnp.arange(num_blocks), jnp.moveaxis(k_end, 2, 0), jnp.moveaxis(cross_KxK, 2, 0)),
        reverse=True, unroll=num_blocks if num_blocks <= UNROLL_BLOCKS else 1)
    # [N, B, H, Q, C] -> [B, H, Q, N * C], cut to the real keys
    scores = jnp.moveaxis(scores, 0, 3).reshape(b, h, q_len, num_blocks * c)[..., :length]
    if decay_q_BxHxQ:
      scores = scores + decay_q_BxHxQ[0][..., None] - decay_BxHxL[:, :, None, :]
    mask = query_chunks.key_mask(q_offset, q_len, length, k_mask, causal=True)
    return query_chunks.masked_softmax_values(scores * scale, mask, v)

  per_query = [rows(q_start), rows(a_local)]
  if decay_BxHxL is not None:
    decay_BxHxL = decay_BxHxL.astype(jnp.float32)
    per_query.append(jnp.pad(decay_BxHxL, [(0, 0), (0, 0), (0, pad)]))
  out = query_chunks.map_query_chunks(chunk_scores, num_blocks * c, query_chunk, *per_query,
                                      multiple_of=c)
  return jnp.swapaxes(out[:, :, :length], 1, 2).astype(v_BxLxHxK.dtype)


def unit_lower_inverse(m_XxCxC: jax.Array) -> jax.Array:
  """The inverse of unit lower-triangular matrices `[..., C, C]`, by blocks.

  `[[A, 0], [X, D]]^-1 = [[A^-1, 0], [-D^-1 X A^-1, D^-1]]`, from 1 x 1 blocks
  up in log2(C) levels of batched matmuls: the same exact elimination as the
  source's row-by-row forward substitution (`naive_path_attn`'s loop), but
  XLA:CPU runs these small batched matmuls in a fraction of the time of
  `solve_triangular` (docs/performance.md).
  """
  c = m_XxCxC.shape[-1]
  size = 1 << max(c - 1, 0).bit_length()  # the next power of two
  if size != c:  # pad with the identity, then cut
    m = jnp.pad(m_XxCxC, [(0, 0)] * (m_XxCxC.ndim - 2) + [(0, size - c), (0, size - c)])
    m = m + jnp.diag((jnp.arange(size) >= c).astype(m.dtype))
  else:
    m = m_XxCxC
  batch = m.shape[:-2]
  inv = jnp.ones(batch + (size, 1, 1), m.dtype)  # the 1 x 1 diagonal blocks' inverses
  s = 1
  while s < size:
    pairs = size // (2 * s)
    blocks = m.reshape(batch + (pairs, 2, s, pairs, 2, s))
    # the lower-left block of each diagonal 2s x 2s block: rows 2p + 1, columns 2p
    lower_left = jnp.diagonal(blocks[..., :, 1, :, :, 0, :], axis1=-4, axis2=-2)
    lower_left = jnp.moveaxis(lower_left, -1, -3)  # [..., pairs, s, s]
    a_inv, d_inv = inv[..., 0::2, :, :], inv[..., 1::2, :, :]
    low = -(d_inv @ lower_left @ a_inv)
    top = jnp.concatenate([a_inv, jnp.zeros_like(a_inv)], axis=-1)
    bottom = jnp.concatenate([low, d_inv], axis=-1)
    inv = jnp.concatenate([top, bottom], axis=-2)  # [..., pairs, 2s, 2s]
    s *= 2
  return inv.reshape(batch + (size, size))[..., :c, :c]


def short_convolution(x_BxLxC: jax.Array, weight_WxC: jax.Array) -> jax.Array:
  """fla's `ShortConvolution` (no bias, silu): a causal depthwise convolution,
  `y_t = silu(sum_m weight[m] x_{t - W + 1 + m})` (PyTorch's `Conv1d`
  cross-correlation with `W - 1` zeros of left padding)."""
  width = weight_WxC.shape[0]
  length = x_BxLxC.shape[1]
  x = jnp.pad(x_BxLxC, ((0, 0), (width - 1, 0), (0, 0)))
  y = sum(weight_WxC[m] * x[:, m:m + length] for m in range(width))
  return jax.nn.silu(y)


class PaTH(nnx.Module):
  """One layer's PaTH parameters: `w_proj` (low rank), the short convolution
  of `w`, and `bt_proj` (the reflections' strengths)."""

  def __init__(self, *, d_model: int, num_heads: int, head_dim: int, block_size: int = 16,
               rngs: nnx.Rngs):
    init = jax.nn.initializers.normal(0.02)
    width = num_heads * head_dim
    self.num_heads, self.head_dim, self.block_size = num_heads, head_dim, block_size
    self.w_down_DxR = nnx.Param(init(rngs.params(), (d_model, LOW_RANK), jnp.float32),
                                logical_axes=("embed", None))
    self.w_up_RxF = nnx.Param(init(rngs.params(), (LOW_RANK, width), jnp.float32),
                              logical_axes=(None, None))
    self.w_conv_WxF = nnx.Param(init(rngs.params(), (CONV_SIZE, width), jnp.float32),
                                logical_axes=(None, None))
    self.beta_DxH = nnx.Param(init(rngs.params(), (d_model, num_heads), jnp.float32),
                              logical_axes=("embed", "heads"))
    self.beta_bias_H = nnx.Param(jnp.zeros((num_heads,), jnp.float32), logical_axes=("heads",))

  def reflections(self, x_BxLxD: jax.Array, valid_BxL=None) -> tuple[jax.Array, jax.Array]:
    """`(w [B, L, H, K] unit vectors, beta [B, L, H] in (0, 2))`, float32."""
    x = x_BxLxD.astype(jnp.float32)
    w = x @ self.w_down_DxR[...] @ self.w_up_RxF[...]
    if valid_BxL is not None:  # the source convolves the unpadded sequence
      w = jnp.where(valid_BxL[..., None], w, 0.0)
    w = short_convolution(w, self.w_conv_WxF[...])
    w = w.reshape(w.shape[:2] + (self.num_heads, self.head_dim))
    w = w * jax.lax.rsqrt(jnp.sum(w * w, axis=-1, keepdims=True) + L2_EPS)
    beta = 2.0 * jax.nn.sigmoid(x @ self.beta_DxH[...] + self.beta_bias_H[...])
    return w, beta

  def attend(self, x_BxLxD, q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, positions_BxL, valid_BxL=None, *,
             causal: bool, query_chunk: int = 1024):
    w, beta = self.reflections(x_BxLxD, valid_BxL)
    return path_attention(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, positions_BxL, valid_BxL, w_BxLxHxK=w,
                          beta_BxLxH=beta, causal=causal, query_chunk=query_chunk,
                          block_size=self.block_size)


def _layer(position, *, d_model, num_heads, head_dim, causal, rngs):
  del position, causal
  return PaTH(d_model=d_model, num_heads=num_heads, head_dim=head_dim, rngs=rngs)


SCHEMES = (base.Scheme("path", base.ATTENTION,
                       "Yang et al. 2025, fla-org/flash-linear-attention fla/layers/path_attn.py",
                       encoder=False, layer=_layer,
                       why_not="the Householder products accumulate along the causal past"),)
