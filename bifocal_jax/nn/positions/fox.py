"""FoX, the Forgetting Transformer's forget gate (Lin et al. 2025, arXiv 2503.02130).

As zhixuan-lin/forgetting-transformer: `ForgettingAttentionLayer` in
`src/forgetting_transformer/model/forgetting_transformer/modeling_forgetting_transformer.py`
and the reference attention in `src/forgetting_transformer/ops/forgetting_attention.py`
(`test_op`):

  f_t      = sigmoid(w_h . x_t + b_h)             per head (`fgate_proj`, fgate_type "full")
  c_t      = sum_{s <= t} log f_t                 (float32 cumulative sum)
  logits   = q_i . k_j / sqrt(d) + c_i - c_j      (the decay bias sits after the scaling)
  out_i    = softmax_{j <= i}(logits) v.

This is the base "FoX (LLaMA)" of the repository's configs: no RoPE
(`use_rope=False`), no output gate, output norm, QK-norm or key/value shift
(FoX (Pro) adds those; they are not included). `fgate_proj` is initialised as
the source's `_init_weights`: weight N(0, 0.02), bias zero.

Causal only: the source's kernel supports causal attention alone, so the
encoder refuses this kind. Padding: the source excludes keys before
`seq_start` (left padding); here padded keys are masked and a padded token's
forget gate is 1 (`log f = 0`), so padding anywhere is transparent to the
decay, as removing it would be.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from bifocal_jax.nn.positions import base
from bifocal_jax.nn.positions import query_chunks


def fox_attention(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, positions_BxL, valid_BxL=None, *,
                  log_fgate_BxLxH: jax.Array, causal: bool = True,
                  query_chunk: int = 1024) -> jax.Array:
  """Forgetting attention, `[B, L, H, K]` out; `log_fgate_BxLxH` = log f_t.

  `positions_BxL` is unused (FoX has no position embedding). Memory is
  `query_chunk x L` per head.
  """
  del positions_BxL
  if not causal:
    raise ValueError("position.kind='fox' is defined for causal attention only")
  length = k_BxLxHxK.shape[1]
  scale = q_BxLxHxK.shape[-1]**-0.5
  q, k, v = query_chunks.heads_major(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK)
  cum_BxHxL = cumulative_log_fgate(log_fgate_BxLxH, valid_BxL)

  def block(q_offset, q_BxHxQxK, cum_q_BxHxQ):
    mask = query_chunks.key_mask(q_offset, q_BxHxQxK.shape[2], length, valid_BxL, causal=True)
    logits = jnp.einsum("bhqk,bhsk->bhqs", q_BxHxQxK, k, preferred_element_type=jnp.float32)
    logits = logits * scale + cum_q_BxHxQ[..., None] - cum_BxHxL[:, :, None, :]
    return query_chunks.masked_softmax_values(logits, mask, v)

  out = query_chunks.map_query_chunks(block, q.shape[2], query_chunk, q, cum_BxHxL)
  return jnp.swapaxes(out, 1, 2).astype(v_BxLxHxK.dtype)


def cumulative_log_fgate(log_fgate_BxLxH: jax.Array, valid_BxL=None) -> jax.Array:
  """`c_t = sum_{s <= t} log f_s`, float32 `[B, H, L]` (heads major), a padded
  token's `log f` 0: the decay `c_i - c_j = sum_{j < s <= i} log f_s`."""
  log_fgate = log_fgate_BxLxH.astype(jnp.float32)
  if valid_BxL is not None:
    log_fgate = jnp.where(valid_BxL[..., None], log_fgate, 0.0)
  return jnp.swapaxes(jnp.cumsum(log_fgate, axis=1), 1, 2)


class FoX(nnx.Module):
  """One layer's forget gate: `fgate_proj` `[d_model, heads]` and its bias."""

  def __init__(self, *, d_model: int, num_heads: int, rngs: nnx.Rngs):
    init = jax.nn.initializers.normal(0.02)
    self.fgate_DxH = nnx.Param(init(rngs.params(), (d_model, num_heads), jnp.float32),
                               logical_axes=("embed", "heads"))
    self.fgate_bias_H = nnx.Param(jnp.zeros((num_heads,), jnp.float32), logical_axes=("heads",))

  def log_fgate(self, x_BxLxD: jax.Array) -> jax.Array:
    """`log sigmoid(x W + b)`, float32 `[B, L, H]`."""
    logit = jnp.einsum("bld,dh->blh", x_BxLxD.astype(jnp.float32), self.fgate_DxH[...])
    return jax.nn.log_sigmoid(logit + self.fgate_bias_H[...])

  def attend(self, x_BxLxD, q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, positions_BxL, valid_BxL=None, *,
             causal: bool, query_chunk: int = 1024):
    return fox_attention(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, positions_BxL, valid_BxL,
                         log_fgate_BxLxH=self.log_fgate(x_BxLxD), causal=causal,
                         query_chunk=query_chunk)


def _layer(position, *, d_model, num_heads, head_dim, causal, rngs):
  del position, head_dim, causal
  return FoX(d_model=d_model, num_heads=num_heads, rngs=rngs)


SCHEMES = (base.Scheme(
    "fox", base.ATTENTION,
    "Lin et al. 2025, zhixuan-lin/forgetting-transformer ForgettingAttentionLayer (base FoX)",
    encoder=False, layer=_layer,
    why_not="the forget gate decays along the causal past; its kernel is causal only"),)
