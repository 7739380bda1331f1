"""Multi-head attention whose positional treatment is chosen by `position.kind`.

Kinds (see `POSITION_KINDS`):
  nope             no positional signal (causal masking only).
  rope             geometric RoPE on every channel pair.
  partial_rope     geometric RoPE on the first channels of each head, with the
                   spectrum of their width (GPT-NeoX's `rotary_pct`), the rest
                   position-free.
  p_rope           the whole head's geometric spectrum on its first pairs, the
                   slowest pairs position-free (Gemma's `rope_proportion`).
  randomized_rope  geometric RoPE over randomized positions (Ruoss et al.
                   2023): the model draws the positions (see `model.py`).
  alibi            linear distance biases (Press et al. 2022; in the encoder with
                   the Chomsky-hierarchy benchmark's left/right offset).
  spectral         every head has its own trainable spectrum.
  bifocal          geometric eyes + spectral eyes, split by heads or pairs.

and the field's schemes of `bifocal_jax/positions/` (absolute embeddings,
additive logit biases, data-dependent attention): `positions.POSITION_KINDS`
lists every kind, `positions.get(kind)` says how it reaches this layer.

Whatever the kind, a rotary module is held as `self.rope` and only its
`frequencies()` and `layout` are used: the angles are computed once per layer
and call, and shared by queries and keys. Surgery (`surgery.py`) swaps
`self.rope` for a spectral module with the same spectrum. A scheme's
per-layer module (biases, data-dependent attention) is `self.position`.

A mixed kind `a+b` (`positions/mixed.py`) holds instead one `HeadGroup` per
kind at `self.groups[kind]` (its own `rope` and `position`, built for its
heads); the QKV and output projections still span all heads, each group
attends with its own scheme on its slice of heads, and the outputs are
concatenated along heads before the output projection.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx

from bifocal_jax import positions as positions_lib
from bifocal_jax import rope as rope_lib

POSITION_KINDS = positions_lib.POSITION_KINDS
ROTARY_KINDS = tuple(k for k in POSITION_KINDS if positions_lib.get(k).rope is not None)
# The attention bias of a masked key (added to its score).
MASKED = float(np.finfo(np.float32).min)


def default_position_config() -> ml_collections.ConfigDict:
  """Every key the attention layer understands, with its default."""
  return ml_collections.ConfigDict(
      dict(
          kind="bifocal",
          base=10_000.0,  # geometric spectrum base (theta)
          layout="half",  # "half" (Llama) or "interleaved" (GPT-J)
          rotary_fraction=0.5,  # partial_rope, p_rope: fraction of each head rotated
          max_position=8192,  # randomized_rope: positions drawn from [0, max_position)
          randomize_eval=True,  # randomized_rope: also randomize at evaluation (as Ruoss et al.)
          # randomized kinds: a draw per attention layer (True) or one for all
          # layers (False); None: as the kind's source (`Scheme.layer_draws`)
          draw_per_layer=ml_collections.config_dict.placeholder(bool),
          split="heads",  # bifocal: "heads" or "pairs"
          spectral_heads=-1,  # bifocal/heads: number of spectral heads (-1: half)
          spectral_pairs=-1,  # bifocal/pairs: spectral pairs per head (-1: half)
          **positions_lib.default_config_keys(),
      ))


spectral_eyes = positions_lib.rotary.spectral_eyes


def make_rope(position: ml_collections.ConfigDict, *, num_heads: int, head_dim: int):
  """The rotary module of one layer for a validated `position` config, or None."""
  scheme = positions_lib.get(position.kind)
  return None if scheme.rope is None else scheme.rope(position, num_heads=num_heads,
                                                      head_dim=head_dim)


def layer_position_modules(scheme, position: ml_collections.ConfigDict, *, d_model: int,
                           num_heads: int, head_dim: int, causal: bool, rngs: nnx.Rngs):
  """`(rope, position)`: a scheme's rotary and per-layer modules for `num_heads`
  heads (either may be None)."""
  rope = None if scheme.rope is None else scheme.rope(position, num_heads=num_heads,
                                                      head_dim=head_dim)
  layer = (None if scheme.layer is None else scheme.layer(
      position, d_model=d_model, num_heads=num_heads, head_dim=head_dim, causal=causal, rngs=rngs))
  return rope, layer


class HeadGroup(nnx.Module):
  """One side of a mixed kind: the rotary and per-layer position modules of
  `num_heads` consecutive heads (built as a pure layer of that kind builds
  them for that many heads)."""

  def __init__(self, scheme, position: ml_collections.ConfigDict, *, d_model: int, num_heads: int,
               head_dim: int, causal: bool, rngs: nnx.Rngs):
    self.kind, self.interface = scheme.name, scheme.interface
    self.num_heads, self.head_dim = num_heads, head_dim
    self.rope, self.position = layer_position_modules(scheme, position, d_model=d_model,
                                                      num_heads=num_heads, head_dim=head_dim,
                                                      causal=causal, rngs=rngs)


class Attention(nnx.Module):
  """Multi-head self-attention over `x_BxLxD` with a fused QKV projection.

  Parameters carry `logical_axes` metadata (`sharding.py` maps them to mesh
  axes); nothing here needs a mesh.
  """

  def __init__(self, d_model: int, num_heads: int, head_dim: int,
               position: ml_collections.ConfigDict, *, causal: bool, dtype: Any = jnp.float32,
               query_chunk: int = 1024, rngs: nnx.Rngs):
    if head_dim % 2:
      raise ValueError(f"head_dim must be even for rotary embeddings, got {head_dim}")
    self.num_heads, self.head_dim, self.causal, self.dtype = num_heads, head_dim, causal, dtype
    self.kind = position.kind
    self.query_chunk = query_chunk
    init = jax.nn.initializers.lecun_normal(in_axis=0, out_axis=(1, 2, 3))
    self.qkv_DxTxHxK = nnx.Param(init(rngs.params(), (d_model, 3, num_heads, head_dim)),
                                 logical_axes=("embed", None, "heads", "head_dim"))
    out_init = jax.nn.initializers.lecun_normal(in_axis=(0, 1), out_axis=2)
    self.out_HxKxD = nnx.Param(out_init(rngs.params(), (num_heads, head_dim, d_model)),
                               logical_axes=("heads", "head_dim", "embed"))
    scheme = positions_lib.get(self.kind)
    self.interface = scheme.interface
    self.rope, self.position = layer_position_modules(scheme, position, d_model=d_model,
                                                      num_heads=num_heads, head_dim=head_dim,
                                                      causal=causal, rngs=rngs)
    groups, self.group_kinds = None, ()
    if self.interface == positions_lib.MIXED:
      parts = positions_lib.parts(self.kind)
      sizes = positions_lib.mixed.head_split(position, num_heads=num_heads)
      self.group_kinds = tuple(p.name for p in parts)  # head order: the first kind's heads first
      groups = nnx.Dict({
          p.name:
              HeadGroup(p, position, d_model=d_model, num_heads=n, head_dim=head_dim, causal=causal,
                        rngs=rngs) for p, n in zip(parts, sizes)
      })
    self.groups = groups

  def __call__(self, x_BxLxD: jax.Array, positions_BxL: jax.Array,
               valid_BxL: jax.Array | None = None, *, shared: nnx.Module | None = None,
               distances_BxL: jax.Array | None = None) -> jax.Array:
    """`positions_BxL` may be `[1, L]` (shared by the batch: the model passes
    in-order positions so), which makes the rotary angles `[L, heads, pairs]`.

    `shared`: the model's position module shared by all layers (T5, Kerple
    biases), if any; `distances_BxL`: the randomized distances of this call
    (`randomized_relative`, `randomized_alibi`), drawn by the model.
    """
    qkv_TxBxLxHxK = jnp.einsum("bld,dthk->tblhk", x_BxLxD, self.qkv_DxTxHxK[...].astype(self.dtype))
    rope_lib.check_positions(qkv_TxBxLxHxK.shape[1:], positions_BxL.shape)
    common = dict(causal=self.causal, query_chunk=self.query_chunk, distances_BxL=distances_BxL)
    if self.groups is None:
      out_BxLxHxK = attend_heads(x_BxLxD, qkv_TxBxLxHxK, positions_BxL, valid_BxL, rope=self.rope,
                                 position=self.position, interface=self.interface, shared=shared,
                                 **common)
    else:
      outs, start = [], 0
      for kind in self.group_kinds:
        group = self.groups[kind]
        stop = start + group.num_heads
        outs.append(
            attend_heads(x_BxLxD, qkv_TxBxLxHxK[:, :, :, start:stop], positions_BxL, valid_BxL,
                         rope=group.rope, position=group.position, interface=group.interface,
                         shared=None if shared is None else shared.get(kind), **common))
        start = stop
      out_BxLxHxK = jnp.concatenate(outs, axis=2)
    return jnp.einsum("blhk,hkd->bld", out_BxLxHxK, self.out_HxKxD[...].astype(self.dtype))


def attend_heads(x_BxLxD, qkv_TxBxLxHxK, positions_BxL, valid_BxL, *, rope, position,
                 interface: str, shared, causal: bool, query_chunk: int, distances_BxL=None):
  """One scheme's attention over the heads of `qkv_TxBxLxHxK` (all of a
  layer's, or a mixed kind's group): rotary `rope`, then the scheme's
  `attend` (interface `attention`) or `attend` with its bias (`position`, or
  the model's `shared` module). Returns `out_BxLxHxK`."""
  qk_2xBxLxHxK = qkv_TxBxLxHxK[:2]
  if rope is not None:
    qk_2xBxLxHxK = rotate_queries_keys(qk_2xBxLxHxK, positions_BxL, rope.frequencies(), rope.layout)
  if interface == positions_lib.ATTENTION:
    return position.attend(x_BxLxD, qk_2xBxLxHxK[0], qk_2xBxLxHxK[1], qkv_TxBxLxHxK[2],
                           positions_BxL, valid_BxL, causal=causal, query_chunk=query_chunk)
  bias_module = position if position is not None else shared
  bias_fn = (None if bias_module is None or interface != positions_lib.BIAS else
             bias_module.bias_fn(causal=causal, distances_BxL=distances_BxL))
  return attend(qk_2xBxLxHxK[0], qk_2xBxLxHxK[1], qkv_TxBxLxHxK[2], positions_BxL, valid_BxL,
                causal=causal, bias_fn=bias_fn, query_chunk=query_chunk)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def rotate_queries_keys(qk_2xBxLxHxK, positions_BxL, frequencies, layout: str = "half"):
  """`rope.apply_rope` of stacked queries and keys, with a hand-written backward.

  The angles are computed once per call (per layer), shared by queries and
  keys, and saved for the backward pass, which needs only the rotated
  outputs: the gradient of a rotation by theta is the rotation by -theta, and
  d loss / d theta = sum(d_out2 * out1 - d_out1 * out2) over the batch. Left
  to autodiff and XLA, cos/sin are recomputed in each fusion that uses them
  (per sequence, query/key and gradient) and the unrotated inputs are kept
  for the frequency gradient.
  """
  cos, sin = rope_lib.rotary_cos_sin(positions_BxL, frequencies)
  return rope_lib.rotate(qk_2xBxLxHxK, cos, sin, layout)


def _rotate_queries_keys_fwd(qk, positions, frequencies, layout):
  # The barrier materialises the [B|1, L, H|1, pairs] angles once.
  cos, sin = jax.lax.optimization_barrier(rope_lib.rotary_cos_sin(positions, frequencies))
  out = rope_lib.rotate(qk, cos, sin, layout)
  return out, (out, cos, sin, positions, frequencies)


def _rotate_queries_keys_bwd(layout, residuals, d_out):
  out, cos, sin, positions, frequencies = residuals
  pairs = cos.shape[-1]
  d_qk = rope_lib.rotate(d_out, cos, -sin, layout)
  (out1, out2), (d1,
                 d2) = (_pair_halves(x.astype(jnp.float32), pairs, layout) for x in (out, d_out))
  d_angles = d2 * out1 - d1 * out2  # [2, B, L, H, pairs]
  # angles = positions * frequencies: d_frequencies = sum over (q|k, batch, seq) of
  # positions * d_angles, as a matrix-vector product (XLA:CPU reduces the major
  # dimensions of d_angles several times slower).
  weight = jnp.broadcast_to(positions.astype(jnp.float32), d_angles.shape[:3]).reshape(-1)
  d_frequencies = jnp.dot(weight, d_angles.reshape(weight.shape[0],
                                                   -1)).reshape(d_angles.shape[-2:])  # [H, pairs]
  if frequencies.ndim == 1 or frequencies.shape[0] != d_frequencies.shape[0]:
    d_frequencies = d_frequencies.sum(0)  # one spectrum shared by the heads
  return d_qk, _zero_cotangent(positions), d_frequencies.reshape(frequencies.shape)


rotate_queries_keys.defvjp(_rotate_queries_keys_fwd, _rotate_queries_keys_bwd)


def _pair_halves(x, pairs: int, layout: str):
  """The two members of each rotated channel pair (see `rope.rotate`)."""
  if layout == "half":
    return x[..., :pairs], x[..., pairs:2 * pairs]
  return x[..., 0:2 * pairs:2], x[..., 1:2 * pairs:2]


def _zero_cotangent(x):
  if jnp.issubdtype(x.dtype, jnp.inexact):
    return jnp.zeros_like(x)
  return np.zeros(x.shape, jax.dtypes.float0)


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
      fn = positions_lib.diagonal_bias_fn(bias_fn) if causal else bias_fn
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
    fn = positions_lib.diagonal_bias_fn(bias_fn) if causal else bias_fn
    extra = fn(q, k, positions_BxL, positions_BxL).astype(jnp.float32)
    bias = extra if bias is None else bias + extra
  scale = jnp.asarray(q.shape[-1]**-0.5, q.dtype)
  return jnp.swapaxes(softmax_attention(q * scale, k, v, bias), 1, 2)


# Query and key block of `_blocked_attention` (sequences longer than
# `query_chunk`). XLA:CPU runs each block's softmax as a few kernels with the
# `[B, H, block, block]` float32 scores between them, so the block is sized for
# them to stay in a core's L2 (1 MB at 4 heads, batch 1): at 4,096-16,384
# tokens, head_dim 16, 256 took 0.65-0.9x the CPU time of 512 and of 128.
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
      block_bias_fn = positions_lib.diagonal_bias_fn(bias_fn) if diagonal else bias_fn

      def fn(carry, j, k_j, v_j, k_pos, valid_j):
        del j
        m, l, o = carry
        scores = jnp.einsum("bhqk,bhsk->bhqs", q_scaled, k_j, preferred_element_type=jnp.float32)
        if bias_fn is not None:
          scores = scores + block_bias_fn(q_BxHxQxK, k_j, q_pos, k_pos).astype(jnp.float32)
        mask = None
        if diagonal:
          mask = (jnp.arange(block)[:, None] >= jnp.arange(block)[None, :])[None, None]
        if needs_valid:
          mask = valid_j[:, None, None, :] if mask is None else mask & valid_j[:, None, None, :]
        if mask is not None:
          scores = scores + jnp.where(mask, 0.0, MASKED).astype(jnp.float32)
        # The block's own softmax first (one fused kernel on XLA:CPU), then
        # the merge into the running statistics ([Q, K]-sized work).
        m_j = jnp.max(scores, axis=-1, keepdims=True)
        e = jnp.exp(scores - m_j)
        l_j = jnp.sum(e, axis=-1, keepdims=True)
        o_j = jnp.einsum("bhqs,bhsk->bhqk", e.astype(v_j.dtype), v_j,
                         preferred_element_type=jnp.float32)
        m_new = jnp.maximum(m, m_j)
        c, c_j = jnp.exp(m - m_new), jnp.exp(m_j - m_new)
        return m_new, l * c + l_j * c_j, o * c + o_j * c_j

      return fn

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
  passes (`_sum_over_queries`). ~2x faster than autodiff of the forward at
  head_dim 8, ~1.3x at head_dim 16 (measured before `_sum_over_queries`,
  which made it faster still).
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
  pass over `a` with no `[Q, S, K]` intermediate. Its dot kernels, which must
  contract the major Q dimension, took 1.4-2.1x longer at head_dim 8-64, and
  the whole attention forward + backward 1.1-1.7x (`benchmarks/attention_kernels.py`).
  Accumulates in float32.
  """
  a, x = a_BxHxQxS.astype(jnp.float32), x_BxHxQxK.astype(jnp.float32)
  return jnp.sum(a[..., :, :, None] * x[..., :, None, :], axis=-3)


def _cudnn_applies(q, bias) -> bool:
  """cuDNN's fused attention: GPU, half precision, head_dim a multiple of 8."""
  return (jax.default_backend() == "gpu" and q.dtype in (jnp.bfloat16, jnp.float16) and
          q.shape[-1] % 8 == 0 and q.shape[-1] <= 128 and bias is None)
