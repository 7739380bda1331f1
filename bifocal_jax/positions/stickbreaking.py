"""Stick-breaking attention (Tan et al. 2024, arXiv 2410.17980).

As shawntan/stickbreaking-attention `stickbreaking_attention/sb_ref.py`
(`stickbreaking`) with the remainder handling of its tests (`tests/test_attn.py`,
`ref_fwd`) and its kernel's defaults (`sb_attn`: `inv_temp = 1/sqrt(d)`,
`attend_current=False`):

  z_ij     = q_i . k_j / sqrt(d)
  A_ij     = sigmoid(z_ij) * prod_{j < l < i} (1 - sigmoid(z_il))    for keys j < i
           = exp(log sigmoid(z_ij) + sum_{l > j} log sigmoid(-z_il))  (log space)
  out_i    = sum_j A_ij v_j + (1 - sum_j A_ij) v_i.

Each query breaks its stick from the nearest key backwards; what is left
over (the remainder, "attention to nothing") goes to the query's own value,
as the source's tests and kernels do (`o + rem[..., None] * v`). With
`attend_current=False` (the default) key `i` itself is masked and reached
only through the remainder; `attend_current=True` lets it take a share.
Masked keys (future or padded) have `A = 0` and `log(1 - sigmoid) = 0`, so
they neither take a share nor break the stick, as in `sb_ref.py`.

Stick-breaking has no position embedding and is defined for causal models
only (its order is "nearest first" along the causal past), so the encoder
refuses this kind.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_collections
from flax import nnx

from bifocal_jax.positions import base
from bifocal_jax.positions import query_chunks


def stickbreaking_attention(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, positions_BxL, valid_BxL=None, *,
                            causal: bool = True, attend_current: bool = False,
                            query_chunk: int = 1024) -> jax.Array:
  """Stick-breaking attention with the remainder on `v_i`, `[B, L, H, K]` out.

  `positions_BxL` is unused (no position embedding). Memory is
  `query_chunk x L` per head.
  """
  del positions_BxL
  if not causal:
    raise ValueError("position.kind='stickbreaking' is defined for causal attention only")
  length = k_BxLxHxK.shape[1]
  scale = q_BxLxHxK.shape[-1]**-0.5
  q, k, v = query_chunks.heads_major(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK)
  v32 = v.astype(jnp.float32)

  def block(q_offset, q_BxHxQxK, v_self_BxHxQxK):
    mask = query_chunks.key_mask(q_offset, q_BxHxQxK.shape[2], length, valid_BxL, causal=True,
                                 strict=not attend_current)
    logits = jnp.einsum("bhqk,bhsk->bhqs", q_BxHxQxK, k, preferred_element_type=jnp.float32) * scale
    log_z = jax.nn.log_sigmoid(logits)
    # log sigmoid(-z) = log sigmoid(z) - z: one transcendental pass over chunk x L, not two.
    log_beta = jnp.where(mask, log_z - logits, 0.0)
    # sum_{l > j} log_beta_il: the inclusive reversed cumsum, shifted by one key.
    reversed_cumsum = jax.lax.cumsum(log_beta, axis=3, reverse=True)
    after_j = jnp.concatenate([reversed_cumsum[..., 1:],
                               jnp.zeros_like(reversed_cumsum[..., :1])], axis=-1)
    att = jnp.where(mask, jnp.exp(log_z + after_j), 0.0)
    out = jnp.einsum("bhqs,bhsk->bhqk", att, v32)
    remainder = 1.0 - jnp.sum(att, axis=-1, keepdims=True)
    return out + remainder * v_self_BxHxQxK.astype(jnp.float32)

  out = query_chunks.map_query_chunks(block, q.shape[2], query_chunk, q, v)
  return jnp.swapaxes(out, 1, 2).astype(v_BxLxHxK.dtype)


class StickBreaking(nnx.Module):
  """Stick-breaking has no parameters; this holds its one option, so that the
  attention layer calls every data-dependent kind the same way."""

  def __init__(self, *, attend_current: bool = False, rngs: nnx.Rngs | None = None):
    del rngs
    self.attend_current = attend_current

  def attend(self, x_BxLxD, q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, positions_BxL, valid_BxL=None, *,
             causal: bool, query_chunk: int = 1024):
    del x_BxLxD
    return stickbreaking_attention(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, positions_BxL, valid_BxL,
                                   causal=causal, attend_current=self.attend_current,
                                   query_chunk=query_chunk)


def _layer(position, *, d_model, num_heads, head_dim, causal, rngs):
  del d_model, num_heads, head_dim, causal
  return StickBreaking(attend_current=bool(position.stickbreaking_attend_current), rngs=rngs)


SCHEMES = (base.Scheme("stickbreaking", base.ATTENTION,
                       "Tan et al. 2024, shawntan/stickbreaking-attention sb_ref.py", encoder=False,
                       layer=_layer,
                       why_not="the stick breaks from the nearest key along the causal past"),)

CONFIG_KEYS = {
    # let a query take a share of its own key (None: False, sb_attn's default)
    "stickbreaking_attend_current": ml_collections.config_dict.placeholder(bool),
}
