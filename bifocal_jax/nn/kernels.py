"""Softmax attention with masks and an additive logit bias (`attend`): whole
for short sequences, in blocks of queries and keys for long ones, with a
custom-gradient softmax for the bias's gradient (`softmax_attention`).

Every position scheme's attention goes through `attend`; schemes that only
bias the logits hand it their `bias_fn`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

# The attention bias of a masked key (added to its score).
MASKED = float(np.finfo(np.float32).min)


def diagonal_bias_fn(bias_fn):
  """`bias_fn`'s form for a causal diagonal block: its `causal_diagonal`, or itself."""
  return getattr(bias_fn, "causal_diagonal", bias_fn)


def attend(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, positions_BxL, valid_BxL=None, *, causal: bool,
           bias_fn=None, query_chunk: int = 1024):
  """Softmax attention with causal/padding masks and an optional logit bias.

  `bias_fn(q_BxHxQxK, k_BxHxSxK, q_positions_BxQ, k_positions_BxS)` returns a
  float32 bias broadcastable to the `[B, H, Q, S]` scores, added to the
  *scaled* scores `q.k / sqrt(K)`; q and k reach it unscaled and heads-major,
  per block of queries and keys (positions may have a leading dim of 1). It
  may be learnable: it is called outside `softmax_attention`, whose backward
  returns the bias's true gradient, so autodiff reaches `bias_fn`'s inputs.
  ALiBi's is `positions.alibi`'s.

  On GPU/TPU this is `jax.nn.dot_product_attention` (cuDNN's fused kernel
  where it applies). On CPU it is `softmax_attention` on heads-major
  operands (batched matmuls in the layout XLA's CPU kernels want) for
  sequences up to `query_chunk` (the training path), and `_blocked_attention`
  beyond: blocks of `min(query_chunk, BLOCK)` queries and keys with an online
  softmax, skipping the key blocks a causal query block cannot see; score
  memory is one `block x block` tile per head, linear overall.
  `positions_BxL` may be `[1, L]` (shared by the batch).

  `valid_BxL` marks real tokens. A query that sees no valid key (a padding
  row) gets some average of values on every path (the loss masks it out).
  cuDNN's kernel takes padding only as sequence lengths, so on that path
  `valid_BxL` must be right padding (each row a prefix of True, as the task
  pipelines make it): rows that are not come out NaN rather than silently
  attending to the wrong keys. Every other path takes any mask.
  """
  if jax.default_backend() != "cpu":
    bias = None
    if bias_fn is not None:
      q_h, k_h = (jnp.swapaxes(x, 1, 2) for x in (q_BxLxHxK, k_BxLxHxK))
      fn = diagonal_bias_fn(bias_fn) if causal else bias_fn
      bias = fn(q_h, k_h, positions_BxL, positions_BxL).astype(q_BxLxHxK.dtype)
    if not _cudnn_applies(q_BxLxHxK, bias):
      mask = None if valid_BxL is None else valid_BxL[:, None, None, :]
      return jax.nn.dot_product_attention(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, bias=bias, mask=mask,
                                          is_causal=causal)
    if valid_BxL is None:
      return jax.nn.dot_product_attention(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, is_causal=causal,
                                          implementation="cudnn")
    lengths_B = jnp.sum(valid_BxL, axis=-1, dtype=jnp.int32)
    # A padding row (no valid token) still attends to one key, so that its
    # output stays finite as on the other paths (the loss masks it out).
    kernel_lengths_B = jnp.maximum(lengths_B, 1)
    out = jax.nn.dot_product_attention(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, is_causal=causal,
                                       query_seq_lengths=kernel_lengths_B,
                                       key_value_seq_lengths=kernel_lengths_B,
                                       implementation="cudnn")
    is_prefix_B = jnp.all(valid_BxL == (jnp.arange(valid_BxL.shape[-1]) < lengths_B[:, None]), -1)
    return jnp.where(is_prefix_B[:, None, None, None], out, jnp.nan)
  q, k, v = (jnp.swapaxes(x, 1, 2) for x in (q_BxLxHxK, k_BxLxHxK, v_BxLxHxK))
  length = q.shape[2]
  if length > query_chunk:
    out = _blocked_attention(q, k, v, positions_BxL, valid_BxL, causal=causal, bias_fn=bias_fn,
                             block=min(query_chunk, BLOCK))
    return jnp.swapaxes(out, 1, 2)
  bias = _mask_bias(0, length, length, valid_BxL, causal)
  if bias_fn is not None:
    fn = diagonal_bias_fn(bias_fn) if causal else bias_fn
    extra = fn(q, k, positions_BxL, positions_BxL).astype(jnp.float32)
    bias = extra if bias is None else bias + extra
  scale = jnp.asarray(q.shape[-1]**-0.5, q.dtype)
  return jnp.swapaxes(softmax_attention(q * scale, k, v, bias), 1, 2)


# Query and key block of `_blocked_attention` (sequences longer than
# `query_chunk`). XLA:CPU runs each block's softmax as a few kernels with the
# `[B, H, block, block]` float32 scores between them, so the block is sized for
# them to stay in a core's L2 (1 MB at 4 heads, batch 1); blocks of 128 and
# 512 were timed against it (docs/performance.md, the long-sequence evaluation).
BLOCK = 256


def _blocked_attention(q, k, v, positions_BxL, valid_BxL, *, causal: bool, bias_fn, block: int):
  """Softmax attention on heads-major `[B, H, L, K]` operands, `block` queries by
  `block` keys at a time, with an online softmax (running max, sum and
  unnormalised output per query, rescaled as each key block arrives).

  Causal: query block i reads key blocks 0..i only (`lax.switch`: blocks
  before the diagonal need no causal mask, the diagonal one does, the rest are
  skipped), about half the work of the full square. Differentiable (scan and
  switch); training takes `softmax_attention`'s path, so this one serves long
  evaluation. The sequence is padded to whole blocks; padded keys are masked.
  """
  b, h, length, head_dim = q.shape
  n = -(-length // block)
  pad = n * block - length
  scale = jnp.asarray(head_dim**-0.5, q.dtype)
  valid = jnp.ones((1, length), bool) if valid_BxL is None else valid_BxL
  if pad:  # padded keys masked; padded queries dropped at the end
    q, k, v = (jnp.pad(x, ((0, 0), (0, 0), (0, pad), (0, 0))) for x in (q, k, v))
    valid = jnp.pad(valid, ((0, 0), (0, pad)))
    positions_BxL = jnp.pad(positions_BxL, ((0, 0), (0, pad)), mode="edge")
  needs_valid = valid_BxL is not None or pad > 0

  def blocks(x, axis):  # [.., n * block, ..] -> [n, .., block, ..]
    x = x.reshape(x.shape[:axis] + (n, block) + x.shape[axis + 1:])
    return jnp.moveaxis(x, axis, 0)

  k_blocks, v_blocks = blocks(k, 2), blocks(v, 2)
  pos_blocks, valid_blocks = blocks(positions_BxL, 1), blocks(valid, 1)

  def query_block(args):
    i, q_BxHxQxK, q_pos = args
    q_scaled = q_BxHxQxK * scale

    def step(diagonal: bool):
      return lambda carry, j, k_j, v_j, k_pos, valid_j: _merge_key_block(
          carry, q_BxHxQxK, q_scaled, q_pos, k_j, v_j, k_pos, valid_j
          if needs_valid else None, bias_fn=diagonal_bias_fn(bias_fn)
          if diagonal and bias_fn is not None else bias_fn, diagonal=diagonal)

    def skip(carry, *_):
      return carry

    def body(carry, xs):
      j = xs[0]
      if not causal:
        return step(False)(carry, *xs), None
      branch = jnp.where(j < i, 0, jnp.where(j == i, 1, 2))
      return jax.lax.switch(branch, (step(False), step(True), skip), carry, *xs), None

    shape = q_BxHxQxK.shape[:-1] + (1,)
    m0 = jnp.full(shape, -jnp.inf, jnp.float32)
    init = (m0, jnp.zeros(shape, jnp.float32), jnp.zeros(q_BxHxQxK.shape, jnp.float32))
    (_, l, o), _ = jax.lax.scan(body, init,
                                (jnp.arange(n), k_blocks, v_blocks, pos_blocks, valid_blocks))
    return (o / l).astype(v.dtype)

  out = jax.lax.map(query_block, (jnp.arange(n), blocks(q, 2), pos_blocks))
  # [n, B, H, block, K] -> [B, H, n * block, K]
  return jnp.moveaxis(out, 0, 2).reshape(b, h, n * block, head_dim)[:, :, :length]


def _merge_key_block(carry, q_BxHxQxK, q_scaled, q_pos, k_j, v_j, k_pos, valid_j, *, bias_fn,
                     diagonal: bool):
  """One key block's scores merged into the running `(max, sum, output)` of
  an online softmax; `diagonal`: the block on the causal diagonal (masked
  within), `valid_j`: the keys' padding mask or None."""
  m, l, o = carry
  block = k_j.shape[2]
  scores = jnp.einsum("bhqk,bhsk->bhqs", q_scaled, k_j, preferred_element_type=jnp.float32)
  if bias_fn is not None:
    scores = scores + bias_fn(q_BxHxQxK, k_j, q_pos, k_pos).astype(jnp.float32)
  mask = None
  if diagonal:
    mask = (jnp.arange(block)[:, None] >= jnp.arange(block)[None, :])[None, None]
  if valid_j is not None:
    mask = valid_j[:, None, None, :] if mask is None else mask & valid_j[:, None, None, :]
  if mask is not None:
    scores = scores + jnp.where(mask, 0.0, MASKED).astype(jnp.float32)
  # The block's own softmax first (one fused kernel on XLA:CPU), then
  # the merge into the running statistics ([Q, K]-sized work).
  m_j = jnp.max(scores, axis=-1, keepdims=True)
  e = jnp.exp(scores - m_j)
  l_j = jnp.sum(e, axis=-1, keepdims=True)
  o_j = jnp.einsum("bhqs,bhsk->bhqk", e.astype(v_j.dtype), v_j, preferred_element_type=jnp.float32)
  m_new = jnp.maximum(m, m_j)
  c, c_j = jnp.exp(m - m_new), jnp.exp(m_j - m_new)
  return m_new, l * c + l_j * c_j, o * c + o_j * c_j


def _mask_bias(q_offset, q_len: int, k_len: int, valid_BxS, causal: bool):
  """`[B|1, 1, Q, S]` float32 biases masking keys (`finfo.min`), or None."""
  mask = None
  if causal:  # by index, not position: randomized positions keep the order
    q_index = q_offset + jnp.arange(q_len)
    mask = (q_index[:, None] >= jnp.arange(k_len)[None, :])[None, None]
  if valid_BxS is not None:
    valid = valid_BxS[:, None, None, :]
    mask = valid if mask is None else mask & valid
  return None if mask is None else jnp.where(mask, 0.0, MASKED).astype(jnp.float32)


@jax.custom_vjp
def softmax_attention(q_BxHxQxK, k_BxHxSxK, v_BxHxSxK, bias=None):
  """`softmax(q k^T + bias) v` on heads-major operands (q pre-scaled).

  `bias` (float32, broadcast against the `[B, H, Q, S]` scores) carries the
  masks as `MASKED` (finfo.min: a row with every key masked averages all
  values) and position biases (`attend`'s `bias_fn`). Its gradient is the
  score gradient summed to the bias's broadcast shape; for a constant bias
  (masks, fixed ALiBi slopes) nothing uses it and XLA drops it as dead code.
  Masking by adding rather than selecting lets XLA:CPU fuse it with the
  score matmul and the softmax. The backward pass is written out
  (flash-attention style): the probabilities stay unnormalised,
  `e = exp(s - max)`, and the normalisation `1 / sum(e)` is applied to the
  `[Q, K]` outputs and output gradients instead of the `[Q, S]` scores; the
  gradients that sum over queries (dV, dK) are broadcast multiply-and-reduce
  passes (`_sum_over_queries`). Written out because, on XLA:CPU, it runs
  faster than autodiff of the forward (docs/performance.md).
  """
  return _softmax_attention_fwd(q_BxHxQxK, k_BxHxSxK, v_BxHxSxK, bias)[0]


def _softmax_attention_fwd(q, k, v, bias):
  scores = jnp.einsum("bhqk,bhsk->bhqs", q, k, preferred_element_type=jnp.float32)
  if bias is not None:
    scores = scores + bias
  exp_scores = jnp.exp(scores - jnp.max(scores, axis=-1, keepdims=True))
  inv_sum = 1.0 / jnp.sum(exp_scores, axis=-1, keepdims=True)
  out = (jnp.einsum("bhqs,bhsk->bhqk", exp_scores.astype(v.dtype), v,
                    preferred_element_type=jnp.float32) * inv_sum).astype(v.dtype)
  return out, (q, k, v, bias, exp_scores, inv_sum, out)


def _softmax_attention_bwd(residuals, d_out):
  q, k, v, bias, exp_scores, inv_sum, out = residuals
  d_out_scaled = d_out.astype(jnp.float32) * inv_sum  # dO / sum(e), per query
  d_v = _sum_over_queries(exp_scores, d_out_scaled).astype(v.dtype)  # P^T dO
  d_probs = jnp.einsum("bhqk,bhsk->bhqs", d_out_scaled.astype(v.dtype), v,
                       preferred_element_type=jnp.float32)
  # Softmax backward with rowsum(dP * P) = rowsum(dO * O) (a [Q, K] sum, not [Q, S]).
  delta = jnp.sum(d_out_scaled * out.astype(jnp.float32), axis=-1, keepdims=True)
  d_scores_f32 = exp_scores * (d_probs - delta)  # = P (dP - rowsum(dP P)): the score gradient
  d_scores = d_scores_f32.astype(q.dtype)
  d_q = jnp.einsum("bhqs,bhsk->bhqk", d_scores, k)
  d_k = _sum_over_queries(d_scores, q).astype(k.dtype)  # dS^T Q
  d_bias = None if bias is None else _sum_to_shape(d_scores_f32, bias.shape).astype(bias.dtype)
  return d_q, d_k, d_v, d_bias


softmax_attention.defvjp(_softmax_attention_fwd, _softmax_attention_bwd)


def _sum_to_shape(x, shape):
  """`x` summed over the dimensions that `shape` broadcasts (numpy rules)."""
  lead = x.ndim - len(shape)
  axes = tuple(range(lead)) + tuple(
      lead + i for i, size in enumerate(shape) if size == 1 and x.shape[lead + i] != 1)
  return jnp.sum(x, axis=axes, keepdims=True).reshape(shape) if axes else x


def _sum_over_queries(a_BxHxQxS, x_BxHxQxK):
  """`a^T x` per batch and head: `[B, H, S, K]`, summed over the queries.

  Written as a broadcast multiply and a sum over Q, which XLA:CPU fuses into one
  pass over `a` with no `[Q, S, K]` intermediate. Its dot kernels must
  contract the major Q dimension, which they do more slowly
  (`python -m benchmarks.attention_kernels`; docs/performance.md, "What made the difference").
  Accumulates in float32.
  """
  a, x = a_BxHxQxS.astype(jnp.float32), x_BxHxQxK.astype(jnp.float32)
  return jnp.sum(a[..., :, :, None] * x[..., :, None, :], axis=-3)


def _cudnn_applies(q, bias) -> bool:
  """cuDNN's fused attention: GPU, half precision, head_dim a multiple of 8."""
  return (jax.default_backend() == "gpu" and q.dtype in (jnp.bfloat16, jnp.float16) and
          q.shape[-1] % 8 == 0 and q.shape[-1] <= 128 and bias is None)
