"""The CPU attention kernel before issue #33 (commit 1ec6100), for before/after runs.

`use_baseline()` makes `kernels.attend` this kernel for the models built and
traced inside it (`long_eval.py --attend=baseline`, `dyck_eval_time.py`): the
queries in chunks of `query_chunk` (1024) under `lax.map`, each chunk against
every key (the causal mask applied to the full `chunk x L` scores, half of
them thrown away), and its `softmax_attention`, whose backward returned a zero
bias gradient. Only `bias_fn=None` is supported (the benchmarks' models).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

import bench_util
from bifocal_jax.nn import attention
from bifocal_jax.nn import kernels


def attend(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, positions_BxL, valid_BxL=None, *, causal: bool,
           bias_fn=None, query_chunk: int = 1024):
  """The CPU path of `kernels.attend` at commit 1ec6100 (no ALiBi)."""
  if bias_fn is not None:
    raise ValueError("baseline attention: bias_fn is not supported (a model without biases)")
  scale = jnp.asarray(q_BxLxHxK.shape[-1]**-0.5, q_BxLxHxK.dtype)
  q, k, v = (jnp.swapaxes(x, 1, 2) for x in (q_BxLxHxK * scale, k_BxLxHxK, v_BxLxHxK))
  length = q.shape[2]

  def block(q_BxHxQxK, q_offset):
    bias = kernels._mask_bias(q_offset, q_BxHxQxK.shape[2], length, valid_BxL, causal)  # pylint: disable=protected-access
    return softmax_attention(q_BxHxQxK, k, v, bias)

  if length <= query_chunk:
    return jnp.swapaxes(block(q, 0), 1, 2)
  num_chunks = -(-length // query_chunk)
  pad = num_chunks * query_chunk - length
  b, h, _, head_dim = q.shape
  q_chunks = jnp.pad(q, ((0, 0), (0, 0), (0, pad), (0, 0))).reshape(
      b, h, num_chunks, query_chunk, head_dim).transpose(2, 0, 1, 3, 4)
  out = jax.lax.map(lambda args: block(args[0], args[1] * query_chunk),
                    (q_chunks, jnp.arange(num_chunks)))
  # [chunks, B, H, chunk, K] -> [B, chunks * chunk, H, K]
  return out.transpose(1, 0, 3, 2, 4).reshape(b, num_chunks * query_chunk, h, -1)[:, :length]


@jax.custom_vjp
def softmax_attention(q, k, v, bias=None):
  """`kernels.softmax_attention` at commit 1ec6100 (a zero bias gradient)."""
  return _fwd(q, k, v, bias)[0]


def _fwd(q, k, v, bias):
  return kernels._softmax_attention_fwd(q, k, v, bias)  # pylint: disable=protected-access


def _bwd(residuals, d_out):
  q, k, v, bias, exp_scores, inv_sum, out = residuals
  d_out_scaled = d_out.astype(jnp.float32) * inv_sum
  d_v = kernels._sum_over_queries(exp_scores, d_out_scaled).astype(v.dtype)  # pylint: disable=protected-access
  d_probs = jnp.einsum("bhqk,bhsk->bhqs", d_out_scaled.astype(v.dtype), v,
                       preferred_element_type=jnp.float32)
  delta = jnp.sum(d_out_scaled * out.astype(jnp.float32), axis=-1, keepdims=True)
  d_scores = (exp_scores * (d_probs - delta)).astype(q.dtype)
  d_q = jnp.einsum("bhqs,bhsk->bhqk", d_scores, k)
  d_k = kernels._sum_over_queries(d_scores, q).astype(k.dtype)  # pylint: disable=protected-access
  return d_q, d_k, d_v, None if bias is None else jnp.zeros_like(bias)


softmax_attention.defvjp(_fwd, _bwd)


def use_baseline(enabled: bool = True):
  """`kernels.attend` is the baseline kernel inside (models traced inside)."""
  return bench_util.replaced(attention, "attend", attend, enabled)
