"""Stick-breaking attention (Tan et al. 2024, arXiv 2410.17980).

As its authors' language model, IBM/dolomite-engine `SBAttention`
(`lm_engine/hf_models/modeling_utils/sequence_mixer_blocks/stickbreaking_attention.py`,
formerly under `dolomite_engine/`), whose attention is the kernel
shawntan/stickbreaking-attention `sb_attn` (maths: `stickbreaking_attention/sb_ref.py`,
`stickbreaking`) at its defaults (`inv_temp = 1/sqrt(d)`: the layer passes
`attention_multiplier`, None by default; `attend_current=False`):

  z_ij     = q_i . k_j / sqrt(d)
  A_ij     = sigmoid(z_ij) * prod_{j < l < i} (1 - sigmoid(z_il))    for keys j < i
           = exp(log sigmoid(z_ij) + sum_{l > j} log sigmoid(-z_il))  (log space)
  o_i      = sum_j A_ij v_j,   rem_i = 1 - sum_j A_ij                 (`sb_attn`'s two outputs)
  out_i    = GroupNorm(o_i + rem_i * head_bias[h])                   (per head h)

Each query breaks its stick from the nearest key backwards; what is left
over (the remainder, "attention to nothing") multiplies a learned per-head
vector `head_bias` `[H, K]` (zero at initialisation; the source's
`head_bias`, shape `(hidden_size // head_dim, head_dim)`). Then a GroupNorm
with one group per head (`torch.nn.GroupNorm(num_heads, hidden_size)` on the
heads' outputs concatenated, channel `h * K + k`): per token and head, the
`K` outputs less their mean over the `K`, over the square root of their biased
variance plus `eps = 1e-5` (torch's default), times a per-channel scale
(ones) plus a per-channel bias (zeros), both held here as `[H, K]`. The
output projection follows (the attention layer's). The layer applies no
position embedding to q and k (`SBAttention.forward` never applies the
rotary embedding its base class would).

`position.stickbreaking_remainder` chooses the form:

  None / "head_bias"  the model above (the default).
  "own_value"         the kernel tests' form (`tests/test_attn.py`, `ref_fwd`:
                      `o + rem[..., None] * v`): the remainder goes to the
                      query's own value, `out_i = o_i + rem_i v_i`, with no
                      `head_bias` and no norm (no parameters).

With `attend_current=False` (`position.stickbreaking_attend_current`, the
default) key `i` itself is masked and reached, in the `own_value` form, only
through the remainder; `attend_current=True` lets it take a share. Masked
keys (future or padded) have `A = 0` and `log(1 - sigmoid) = 0`, so they
neither take a share nor break the stick, as in `sb_ref.py`; padding anywhere
is then as removing it, as the model's padding-free `PaddingFreeSBAttention`
(one `sb_attn_varlen` segment per sequence) computes it (the padded
`SBAttention` passes no mask to `sb_attn`; on right padding, where every
padded key is in a valid query's future, the two agree).

Where this departs from the source: the maths is float32 whatever the
compute dtype (the norm included); the scale is always `1/sqrt(d)` (the
source's `attention_multiplier`, for muP, is not offered); q, k, v and the
output projection are the attention layer's (one key and value per query
head, no projection biases; the source's `c_attn`/`c_proj` have biases by
default and allow grouped keys and values). The optimiser's weight-decay mask
(`optim.py`, leaves of two or more dimensions) decays `head_bias` and the
norm's `[H, K]` scale and bias, as the source's optimiser does (it marks none
of the three as without weight decay).

Stick-breaking is defined for causal models only (its order is "nearest
first" along the causal past), so the encoder refuses this kind.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_collections
from flax import nnx

from bifocal_jax.nn.positions import base
from bifocal_jax.nn.positions import query_chunks

HEAD_BIAS = "head_bias"  # the model's `SBAttention`: rem * head_bias, then a per-head GroupNorm
OWN_VALUE = "own_value"  # the kernel tests' `ref_fwd`: rem * v_i, nothing after
REMAINDERS = (HEAD_BIAS, OWN_VALUE)
NORM_EPS = 1e-5  # torch.nn.GroupNorm's default eps, which `SBAttention` keeps


def _stick_values(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, valid_BxL, *, attend_current: bool,
                  query_chunk: int, remainder) -> jax.Array:
  """Float32 `[B, L, H, K]`: `o_i` plus the remainder's share (see `stickbreaking_attention`)."""
  length = k_BxLxHxK.shape[1]
  scale = q_BxLxHxK.shape[-1]**-0.5
  q, k, v = query_chunks.heads_major(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK)
  v32 = v.astype(jnp.float32)
  own_value = isinstance(remainder, str) and remainder == OWN_VALUE
  target_1xHx1xK = None
  if remainder is not None and not own_value:
    target_1xHx1xK = jnp.asarray(remainder, jnp.float32)[None, :, None, :]

  def block(q_offset, q_BxHxQxK, *v_self_BxHxQxK):
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
    if remainder is None:
      return out
    rem = 1.0 - jnp.sum(att, axis=-1, keepdims=True)
    return out + rem * (v_self_BxHxQxK[0].astype(jnp.float32) if own_value else target_1xHx1xK)

  per_query = (q, v) if own_value else (q,)
  out = query_chunks.map_query_chunks(block, q.shape[2], query_chunk, *per_query)
  return jnp.swapaxes(out, 1, 2)


def stickbreaking_attention(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, positions_BxL, valid_BxL=None, *,
                            remainder, causal: bool = True, attend_current: bool = False,
                            query_chunk: int = 1024) -> jax.Array:
  """Stick-breaking attention, `[B, L, H, K]` out (the values' dtype).

  `remainder` is where `rem_i = 1 - sum_j A_ij` goes: `"own_value"` (`v_i`,
  the kernel tests' `ref_fwd`), a per-head vector `[H, K]` (`rem_i *
  target[h]`, the model's `head_bias`, before its norm: `head_group_norm`),
  or None (nowhere: `sb_attn`'s first output `o_i = sum_j A_ij v_j`, linear
  in the values). `positions_BxL` is unused (no position embedding). Memory
  is `query_chunk x L` per head.
  """
  del positions_BxL
  if not causal:
    raise ValueError("position.kind='stickbreaking' is defined for causal attention only")
  out = _stick_values(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, valid_BxL, attend_current=attend_current,
                      query_chunk=query_chunk, remainder=remainder)
  return out.astype(v_BxLxHxK.dtype)


def head_group_norm(x_BxLxHxK, scale_HxK, bias_HxK, *, eps: float = NORM_EPS) -> jax.Array:
  """`torch.nn.GroupNorm(H, H * K)` on the heads concatenated, float32: per
  token and head, `(x - mean) / sqrt(var + eps) * scale + bias`, the mean and
  the biased variance over the head's `K` channels."""
  x = x_BxLxHxK.astype(jnp.float32)
  mean = jnp.mean(x, axis=-1, keepdims=True)
  var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
  return (x - mean) * jax.lax.rsqrt(var + eps) * scale_HxK + bias_HxK


class StickBreaking(nnx.Module):
  """One layer's stick-breaking options and, in the model's form
  (`remainder="head_bias"`), its parameters: `head_bias_HxK` (zeros) and the
  per-head norm's `norm_scale_HxK` (ones) and `norm_bias_HxK` (zeros)."""

  def __init__(self, *, num_heads: int, head_dim: int, attend_current: bool = False,
               remainder: str = HEAD_BIAS, rngs: nnx.Rngs | None = None):
    del rngs  # constants, as the source initialises them
    if remainder not in REMAINDERS:
      raise ValueError(_refusal(remainder))
    self.attend_current, self.remainder = attend_current, remainder
    if remainder == HEAD_BIAS:
      shape, axes = (num_heads, head_dim), ("heads", "head_dim")
      self.head_bias_HxK = nnx.Param(jnp.zeros(shape, jnp.float32), logical_axes=axes)
      self.norm_scale_HxK = nnx.Param(jnp.ones(shape, jnp.float32), logical_axes=axes)
      self.norm_bias_HxK = nnx.Param(jnp.zeros(shape, jnp.float32), logical_axes=axes)

  def attend_values(self, x_BxLxD, q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, positions_BxL, valid_BxL=None,
                    *, causal: bool, query_chunk: int = 1024):
    """The part of `attend` linear in the values (what its weights do to them):
    `o_i` in the model's form, `attend` itself in the `own_value` form."""
    del x_BxLxD
    return stickbreaking_attention(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, positions_BxL, valid_BxL,
                                   remainder=OWN_VALUE if self.remainder == OWN_VALUE else None,
                                   causal=causal, attend_current=self.attend_current,
                                   query_chunk=query_chunk)

  def finish(self, values_BxLxHxK, remainder_BxLxH):
    """`attend` from `attend_values`'s output and `rem = 1 - sum_j A_ij`:
    `GroupNorm(values + rem * head_bias)` in the model's form (float32), the
    values unchanged in the `own_value` form."""
    if self.remainder == OWN_VALUE:
      return values_BxLxHxK
    out = (values_BxLxHxK.astype(jnp.float32) +
           remainder_BxLxH[..., None].astype(jnp.float32) * self.head_bias_HxK[...])
    return head_group_norm(out, self.norm_scale_HxK[...], self.norm_bias_HxK[...])

  def attend(self, x_BxLxD, q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, positions_BxL, valid_BxL=None, *,
             causal: bool, query_chunk: int = 1024):
    del x_BxLxD
    if self.remainder == OWN_VALUE:
      return stickbreaking_attention(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, positions_BxL, valid_BxL,
                                     remainder=OWN_VALUE, causal=causal,
                                     attend_current=self.attend_current, query_chunk=query_chunk)
    if not causal:
      raise ValueError("position.kind='stickbreaking' is defined for causal attention only")
    out = _stick_values(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, valid_BxL,
                        attend_current=self.attend_current, query_chunk=query_chunk,
                        remainder=self.head_bias_HxK[...])
    out = head_group_norm(out, self.norm_scale_HxK[...], self.norm_bias_HxK[...])
    return out.astype(v_BxLxHxK.dtype)


def _remainder(position) -> str:
  """`position.stickbreaking_remainder` resolved (None: "head_bias", the model's),
  or a ValueError naming the key."""
  value = position.get("stickbreaking_remainder")
  if value is None:
    return HEAD_BIAS
  if not isinstance(value, str) or value not in REMAINDERS:
    raise ValueError(_refusal(value))
  return value


def _refusal(value) -> str:
  return (f"position.stickbreaking_remainder={value!r}: must be None or {HEAD_BIAS!r} (the "
          f"model's SBAttention) or {OWN_VALUE!r} (the kernel tests' ref_fwd)")


def _check(position, *, num_heads, head_dim):
  del num_heads, head_dim
  _remainder(position)


def _layer(position, *, d_model, num_heads, head_dim, causal, rngs):
  del d_model, causal
  return StickBreaking(num_heads=num_heads, head_dim=head_dim,
                       attend_current=bool(position.stickbreaking_attend_current),
                       remainder=_remainder(position), rngs=rngs)


SCHEMES = (base.Scheme(
    "stickbreaking", base.ATTENTION,
    "Tan et al. 2024, IBM/dolomite-engine SBAttention (shawntan/stickbreaking-attention sb_attn)",
    encoder=False, layer=_layer, check=_check,
    why_not="the stick breaks from the nearest key along the causal past"),)

CONFIG_KEYS = {
    # let a query take a share of its own key (None: False, sb_attn's default)
    "stickbreaking_attend_current": ml_collections.config_dict.placeholder(bool),
    # where the remainder 1 - sum_j A_ij goes (None: "head_bias", SBAttention's
    # learned per-head vector then a per-head GroupNorm; "own_value": the query's
    # value, the kernel tests' ref_fwd, no parameters)
    "stickbreaking_remainder": ml_collections.config_dict.placeholder(str),
}
