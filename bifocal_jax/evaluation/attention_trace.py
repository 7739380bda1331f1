"""A model's residual stream and attention weights, recomputed by looping its
blocks (`trace`), for the probes (`probe`): the stream is the blocks' own outputs, and the weights are
`softmax(q.k / sqrt(K) + masks + bias)` from the layer's QKV projection, its
rotary module and its logit bias, as `attention.attend_heads` computes them.
Kinds whose attention is data-dependent (interface `attention`: CoPE, FoX,
stick-breaking, PaTH, FoPE) have no such formula; their weights are read off
their own attention, as far as it is linear in the values (`values_part`), by
attending to one-hot values (`weights_from_basis_values`). Stick-breaking's
weights are its stick `A_ij`: in its model's form (`head_bias`) they sum to
one less the remainder, which goes to no key (to `head_bias`, then the
per-head norm, after the weights); in the kernel tests' form (`own_value`)
the remainder lands on the query's own key, as that form puts it on the
query's value. Tests check that the loop's logits and `weights @ values` reproduce the model's, for
every interface (`none`, `absolute`, `rotary`, `bias`, `attention`, mixed).
Randomized kinds are traced at the positions the evaluation draws (the
evaluator's key).
"""

from __future__ import annotations

import types

import jax
import jax.numpy as jnp

from bifocal_jax.nn import attention as attention_lib
from bifocal_jax.nn import kernels
from bifocal_jax.nn import model as model_lib
from bifocal_jax.nn import positions as positions_lib
from bifocal_jax.nn import rope as rope_lib
from bifocal_jax.nn import rotation


def _head_groups(attn) -> list[tuple[int, int, object, object, str, str]]:
  """`(start, stop, rope, position, interface, kind)` of each scheme's heads."""
  if attn.groups is None:
    return [(0, attn.num_heads, attn.rope, attn.position, attn.interface, attn.kind)]
  out, start = [], 0
  for kind in attn.group_kinds:
    g = attn.groups[kind]
    out.append((start, start + g.num_heads, g.rope, g.position, g.interface, kind))
    start += g.num_heads
  return out


def head_eyes(attn) -> list[str]:
  """Each head's eye: `geometric`/`spectral` (rotary), `pairs` (bifocal split
  by pairs: both in every head), or the position kind of a head without rotation."""
  eyes = []
  for start, stop, rope, _, _, kind in _head_groups(attn):
    if isinstance(rope, rope_lib.BifocalRoPE):
      if rope.split == "pairs":
        eyes += ["pairs"] * (stop - start)
      else:
        eyes += [
            "spectral" if h in rope.spectral_heads else "geometric" for h in range(stop - start)
        ]
    elif isinstance(rope, rope_lib.SpectralRoPE):
      eyes += ["spectral"] * (stop - start)
    elif rope is not None:
      eyes += ["geometric"] * (stop - start)
    else:
      eyes += [kind] * (stop - start)
  return eyes


def weights_from_basis_values(x_BxLxD, qkv_TxBxLxHxK, positions_BxL, valid_BxL, **attend_kwargs):
  """`[B, H, L, L]` float32 weights of one scheme's heads, read off the
  layer's own `attention.attend_heads` (`attend_kwargs`: its keywords) by
  attending to one-hot values: the output for values `e_j` (every key's value
  zero but key `j`'s, a one in column `j`) is each query's weight on key `j`.
  Exact for any attention linear in its values, whatever makes its weights
  (CoPE's counts, FoX's forget gates, stick-breaking's stick, PaTH's
  reflections, FoPE's spectra: pass a module's `values_part`); the values' width is the
  head's, so `ceil(L / K)` calls, mapped, read `K` keys each."""
  _, batch, length, heads, width = qkv_TxBxLxHxK.shape
  starts = jnp.arange(0, length, width)
  # Each attention casts its output to the values' dtype: in float32 (exact
  # for bfloat16 inputs) the weights keep float32 precision, as the softmax
  # written out does.
  x_BxLxD, qkv_TxBxLxHxK = x_BxLxD.astype(jnp.float32), qkv_TxBxLxHxK.astype(jnp.float32)

  def keys_from(start):  # one-hot values for keys start .. start + width - 1
    basis_LxK = (jnp.arange(length)[:, None] == start + jnp.arange(width)[None, :])
    v_BxLxHxK = jnp.broadcast_to(basis_LxK[None, :, None, :], (batch, length, heads, width))
    qkv = qkv_TxBxLxHxK.at[2].set(v_BxLxHxK.astype(jnp.float32))
    out_BxLxHxK = attention_lib.attend_heads(x_BxLxD, qkv, positions_BxL, valid_BxL,
                                             **attend_kwargs)
    return out_BxLxHxK.astype(jnp.float32)

  out_NxBxLxHxK = jax.lax.map(keys_from, starts)
  # [N, B, Lq, H, K] -> [B, H, Lq, N * K]: the keys in order, the last block's overhang dropped
  w = jnp.moveaxis(out_NxBxLxHxK, 0, 3).reshape(batch, length, heads, -1)[..., :length]
  return jnp.swapaxes(w, 1, 2)


def values_part(module):
  """A data-dependent attention module (interface `attention`) as far as its
  output is linear in the values: a stand-in whose `attend` is the module's
  `attend_values` where it has one (stick-breaking's model form: its remainder
  on `head_bias` and its per-head norm follow the weights), else the module."""
  attend_values = getattr(module, "attend_values", None)
  return module if attend_values is None else types.SimpleNamespace(attend=attend_values)


def attention_weights(attn, x_BxLxD, positions_BxL, valid_BxL=None, *, shared=None,
                      distances_BxL=None):
  """`[B, H, L, L]` float32 attention weights of layer `attn` on its input
  `x_BxLxD` (after `ln_attn`), as `attention.attend_heads` computes them: for
  a rotary or bias scheme the softmax written out, for a data-dependent one
  (interface `attention`) read off its own attention (`weights_from_basis_values`)."""
  qkv_TxBxLxHxK = jnp.einsum("bld,dthk->tblhk", x_BxLxD, attn.qkv_DxTxHxK[...].astype(attn.dtype))
  length = x_BxLxD.shape[1]
  mask = jnp.ones((1, 1, length, length), bool)
  if attn.causal:  # by index, as `kernels._mask_bias`
    mask = mask & (jnp.arange(length)[:, None] >= jnp.arange(length)[None, :])
  if valid_BxL is not None:
    mask = mask & valid_BxL[:, None, None, :]
  mask_bias = jnp.where(mask, 0.0, kernels.MASKED).astype(jnp.float32)
  weights = []
  for start, stop, rope, position, interface, kind in _head_groups(attn):
    if interface == positions_lib.ATTENTION:
      weights.append(
          weights_from_basis_values(x_BxLxD, qkv_TxBxLxHxK[:, :, :, start:stop], positions_BxL,
                                    valid_BxL, rope=rope, position=values_part(position),
                                    interface=interface, shared=None, causal=attn.causal,
                                    query_chunk=attn.query_chunk, distances_BxL=distances_BxL))
      continue
    qk = qkv_TxBxLxHxK[:2, :, :, start:stop]
    if rope is not None:
      qk = rotation.rotate_queries_keys(qk, positions_BxL, rope.frequencies(), rope.layout)
    q, k = (jnp.swapaxes(x, 1, 2) for x in (qk[0], qk[1]))  # heads-major, unscaled
    scale = jnp.asarray(q.shape[-1]**-0.5, q.dtype)
    scores = jnp.einsum("bhqk,bhsk->bhqs", q * scale, k, preferred_element_type=jnp.float32)
    scores = scores + mask_bias
    module = position if position is not None else (
        shared if attn.groups is None or shared is None else shared.get(kind))
    if module is not None and interface == positions_lib.BIAS:
      bias_fn = module.bias_fn(causal=attn.causal, distances_BxL=distances_BxL)
      scores = scores + bias_fn(q, k, positions_BxL, positions_BxL).astype(jnp.float32)
    weights.append(jax.nn.softmax(scores, axis=-1))
  return jnp.concatenate(weights, axis=1)


def trace(model, tokens_BxL, valid_BxL, *, rng=None, match_BxL=None, top_BxL=None) -> dict:
  """The model's forward pass, block by block:

    residuals  `[layers + 1, B, L, D]`: after the embedding, after each block
    logits     `[B, L, V]` (ln_final and unembed of the last residual)
    match_mass, top_mass  `[layers, B, H, L]`: each head's weight on position
               `match_BxL` / `top_BxL` (where >= 0; 0 elsewhere), if given
  """
  positions_BxL, distances_BxL = model.draw(tokens_BxL, valid_BxL, rng, False)
  x = jnp.take(model.embed_VxD[...], tokens_BxL, axis=0).astype(model.dtype)
  if model.position_embedding is not None:
    x = x + model.position_embedding(positions_BxL).astype(model.dtype)
  residuals, masses = [x], {"match_mass": [], "top_mass": []}
  targets = {"match_mass": match_BxL, "top_mass": top_BxL}
  for i, block in enumerate(model.blocks):
    layer = dict(positions_BxL=model_lib.layer_input(positions_BxL, i),
                 distances_BxL=model_lib.layer_input(distances_BxL, i))
    if match_BxL is not None or top_BxL is not None:
      w_BxHxLxL = attention_weights(block.attn, block.ln_attn(x), layer["positions_BxL"], valid_BxL,
                                    shared=model.position, distances_BxL=layer["distances_BxL"])
      for name, index_BxL in targets.items():
        if index_BxL is not None:
          at = jnp.maximum(index_BxL, 0)[:, None, :, None]
          picked = jnp.take_along_axis(w_BxHxLxL, jnp.broadcast_to(at, w_BxHxLxL.shape[:3] + (1,)),
                                       axis=-1)[..., 0]
          masses[name].append(jnp.where(index_BxL[:, None, :] >= 0, picked, 0.0))
    x = block(x, layer["positions_BxL"], valid_BxL, shared=model.position,
              distances_BxL=layer["distances_BxL"])
    residuals.append(x)
  logits = (model.ln_final(x) @ model.unembed_DxV[...].astype(model.dtype)).astype(jnp.float32)
  out = dict(residuals=jnp.stack(residuals).astype(jnp.float32), logits=logits)
  out.update({name: jnp.stack(m) for name, m in masses.items() if m})
  return out
