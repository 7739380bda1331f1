"""CoPE, contextual position encoding (Golovneva et al. 2024, arXiv 2405.18719).

As facebookresearch/RAM `projects/cope/src/cope/context_position.py`
(`ContextPosSelfAttn`, its defaults: gates from the attention keys, not
`--cope-sep-key` or `--cope-val-gates`; divided by sqrt(head_dim), not
`--cope-nodiv`; CoPE on every layer, embeddings per layer, not shared):

  gates    g_ij = sigmoid(q_i . k_j / sqrt(d)) * mask_ij
  position p_ij = min(sum_{l >= j} g_il, npos - 1)        (reversed cumulative sum)
  e_ij     = interpolation of q_i . E[:, floor(p)] and q_i . E[:, ceil(p)]
             with weight p - floor(p) (the floor and ceiling carry no gradient)
  logits   = (q_i . k_j + e_ij) / sqrt(d), masked, softmax over j.

`E` (`pos_emb`, `[head_dim, npos]`) starts at zeros, is shared by the heads
of a layer, and has `npos = block_size + 1` columns (the source's default:
positions 0 .. context length), so counts past the training context are
clamped to its last column. The source uses CoPE in its decoder and its
encoder (`EncoderCore`), so both are defined: the encoder counts over every
valid key. The mask is the source's `attn_mask` (causal and padding); a
padded key has gate 0 and is excluded from the softmax. (The source also
lets a padded query attend to itself; here a padded query sees the valid
keys, and its output is not used.)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_collections
from flax import nnx

from bifocal_jax.nn.positions import base
from bifocal_jax.nn.positions import query_chunks


def cope_attention(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, positions_BxL, valid_BxL=None, *,
                   pos_emb_KxP: jax.Array, causal: bool, query_chunk: int = 1024) -> jax.Array:
  """CoPE attention, `[B, L, H, K]` out; `pos_emb_KxP` is the layer's `E`.

  `positions_BxL` is unused (CoPE counts positions from the gates) and kept
  for the common signature. Memory is `query_chunk x L` per head.
  """
  del positions_BxL
  head_dim = q_BxLxHxK.shape[-1]
  npos = pos_emb_KxP.shape[-1]
  length = k_BxLxHxK.shape[1]
  q, k, v = query_chunks.heads_major(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK)
  q, k = q.astype(jnp.float32), k.astype(jnp.float32)
  inv_sqrt_d = head_dim**-0.5
  pos_emb = pos_emb_KxP.astype(jnp.float32)

  def block(q_offset, q_BxHxQxK):
    mask = query_chunks.key_mask(q_offset, q_BxHxQxK.shape[2], length, valid_BxL, causal=causal)
    logits = jnp.einsum("bhqk,bhsk->bhqs", q_BxHxQxK, k)
    gates = jax.nn.sigmoid(logits * inv_sqrt_d)
    if mask is not None:
      gates = jnp.where(mask, gates, 0.0)
    counts = jax.lax.cumsum(gates, axis=3, reverse=True)
    counts = jnp.minimum(counts, npos - 1)
    pos_logits_fixed = jnp.einsum("bhqk,kp->bhqp", q_BxHxQxK, pos_emb)  # [B, H, Q, npos]
    floor = jax.lax.stop_gradient(jnp.floor(counts))
    ceil = jax.lax.stop_gradient(jnp.ceil(counts))
    logit_floor = jnp.take_along_axis(pos_logits_fixed, floor.astype(jnp.int32), axis=-1)
    logit_ceil = jnp.take_along_axis(pos_logits_fixed, ceil.astype(jnp.int32), axis=-1)
    ceil_weight = counts - floor
    pos_logits = logit_ceil * ceil_weight + logit_floor * (1.0 - ceil_weight)
    return query_chunks.masked_softmax_values((logits + pos_logits) * inv_sqrt_d, mask, v)

  out = query_chunks.map_query_chunks(block, q.shape[2], query_chunk, q)
  return jnp.swapaxes(out, 1, 2).astype(v_BxLxHxK.dtype)


class CoPE(nnx.Module):
  """The parameters of one layer's CoPE: `pos_emb` `[head_dim, npos]`, zeros.

  `npos` is the source's `block_size + 1` (the training context length plus
  one) unless given (`--cope-npos`).
  """

  def __init__(self, *, head_dim: int, npos: int, rngs: nnx.Rngs | None = None):
    del rngs  # zeros, as the source
    if npos < 2:
      raise ValueError(f"cope: npos={npos!r} must be >= 2 (context length + 1)")
    self.pos_emb_KxP = nnx.Param(jnp.zeros((head_dim, npos), jnp.float32),
                                 logical_axes=("head_dim", None))

  def attend(self, x_BxLxD, q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, positions_BxL, valid_BxL=None, *,
             causal: bool, query_chunk: int = 1024):
    del x_BxLxD
    return cope_attention(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, positions_BxL, valid_BxL,
                          pos_emb_KxP=self.pos_emb_KxP[...], causal=causal, query_chunk=query_chunk)


def _layer(position, *, d_model, num_heads, head_dim, causal, rngs):
  del d_model, num_heads, causal
  if position.cope_npos is None:
    raise ValueError("position.cope_npos=None: unresolved (state.build_model sets it to the "
                     "training context length + 1; give it to build a layer alone)")
  return CoPE(head_dim=head_dim, npos=int(position.cope_npos), rngs=rngs)


SCHEMES = (base.Scheme(
    "cope", base.ATTENTION,
    "Golovneva et al. 2024, facebookresearch/RAM projects/cope context_position.py", layer=_layer),)

CONFIG_KEYS = {
    # the number of position embeddings (None: the training context length + 1, the
    # source's block_size + 1); contextual positions are clamped at cope_npos - 1
    "cope_npos": ml_collections.config_dict.placeholder(int),
}
# Keys resolved from the training context length when unset (`positions.with_context_length`).
CONTEXT_KEYS = {"cope_npos": lambda length: length + 1}
