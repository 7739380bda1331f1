"""PaTH-FoX: PaTH attention with FoX's forget gate (Yang et al. 2025, arXiv 2505.16381).

As fla-org/flash-linear-attention at commit bc3b101dcb713ddc5bd8924b66754eb68b5ccf89,
`fla/layers/path_attn.py` (`PaTHAttention` with `use_forget_gate=True`, its
other defaults) and the PaTH op it calls with `g` (`fla/ops/path_attn/naive.py`,
`naive_path_attn`; the kernels `parallel_path_fwd.py` and
`intra_chunk_preprocess_fwd.py`, and decoding's `attn_decoding_one_step(...,
do_gate_scale=True)`, agree):

  g_t      = log sigmoid(x_t W_g + b_g)                per head (`g_proj`: Linear(hidden, heads, bias=True))
  c_t      = sum_{s <= t} g_s                          (float32, `chunk_global_cumsum`)
  logits   = (q_i^T H_i ... H_{j+1} k_j + c_i - c_j) / sqrt(d)     for keys j <= i
  out_i    = softmax_j(logits) v

with the reflections `H_t = I - beta_t w_t w_t^T` exactly as `path.py` (low-rank
`w`, short convolution, l2norm; `beta = 2 sigmoid`). The decay sits *before*
the `1/sqrt(d)` scaling: the source's naive op scales `A + g_i - g_j` and
its kernels `(b_s + g_q - g_k) * sm_scale`, where the forgetting
transformer (`fox.py`) adds it after. `g_proj` is initialised as the
source's `_init_weights` (weight N(0, 0.02), bias 0): FoX's own gate module
(`fox.FoX`, the same shape, bias and initialisation).

Ours: the composition. The reflections are `path.PaTH`'s, the gate
`fox.FoX`'s, its cumulative sum `fox.cumulative_log_fgate`, and the
attention `path.path_attention` (blockwise, queries in chunks: `chunk x L`
scores per head, never `L x L`) with the decay added to its scores. Padding:
the source removes padded tokens (`unpad_input`, `cu_seqlens`); here a padded
token reflects by the identity (`beta = 0`), forgets nothing (`log f = 0`)
and its key is masked, as removing it would be. Causal only, as PaTH.
"""

from __future__ import annotations

import jax
from flax import nnx

from bifocal_jax.nn.positions import base
from bifocal_jax.nn.positions import fox
from bifocal_jax.nn.positions import path


def path_fox_attention(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, positions_BxL, valid_BxL=None, *,
                       w_BxLxHxK: jax.Array, beta_BxLxH: jax.Array, log_fgate_BxLxH: jax.Array,
                       causal: bool = True, query_chunk: int = 1024,
                       block_size: int = 16) -> jax.Array:
  """PaTH-FoX attention, `[B, L, H, K]` out; `w` unit vectors, `beta` in
  (0, 2), `log_fgate_BxLxH` = log f_t. Memory as `path.path_attention`."""
  if not causal:
    raise ValueError("position.kind='path_fox' is defined for causal attention only")
  return path.path_attention(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, positions_BxL, valid_BxL,
                             w_BxLxHxK=w_BxLxHxK, beta_BxLxH=beta_BxLxH, causal=True,
                             query_chunk=query_chunk, block_size=block_size,
                             decay_BxHxL=fox.cumulative_log_fgate(log_fgate_BxLxH, valid_BxL))


class PaTHFoX(nnx.Module):
  """One layer's PaTH-FoX parameters: PaTH's reflections (`path`) and FoX's
  forget gate (`fgate`, the source's `g_proj`)."""

  def __init__(self, *, d_model: int, num_heads: int, head_dim: int, block_size: int = 16,
               rngs: nnx.Rngs):
    self.path = path.PaTH(d_model=d_model, num_heads=num_heads, head_dim=head_dim,
                          block_size=block_size, rngs=rngs)
    self.fgate = fox.FoX(d_model=d_model, num_heads=num_heads, rngs=rngs)

  def attend(self, x_BxLxD, q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, positions_BxL, valid_BxL=None, *,
             causal: bool, query_chunk: int = 1024):
    w, beta = self.path.reflections(x_BxLxD, valid_BxL)
    return path_fox_attention(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, positions_BxL, valid_BxL,
                              w_BxLxHxK=w, beta_BxLxH=beta,
                              log_fgate_BxLxH=self.fgate.log_fgate(x_BxLxD), causal=causal,
                              query_chunk=query_chunk, block_size=self.path.block_size)


def _layer(position, *, d_model, num_heads, head_dim, causal, rngs):
  del position, causal
  return PaTHFoX(d_model=d_model, num_heads=num_heads, head_dim=head_dim, rngs=rngs)


SCHEMES = (base.Scheme(
    "path_fox", base.ATTENTION,
    "Yang et al. 2025, fla-org/flash-linear-attention fla/layers/path_attn.py "
    "(use_forget_gate=True)", encoder=False, layer=_layer,
    why_not="the Householder products and the forget gate accumulate along the causal past"),)
