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

and the field's schemes of `bifocal_jax/nn/positions/` (absolute embeddings,
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

from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
from flax import nnx

from bifocal_jax.nn import kernels
from bifocal_jax.nn import positions as positions_lib
from bifocal_jax.nn import rope as rope_lib
from bifocal_jax.nn import rotation

POSITION_KINDS = positions_lib.POSITION_KINDS
ROTARY_KINDS = tuple(k for k in POSITION_KINDS if positions_lib.get(k).rope is not None)


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
    qk_2xBxLxHxK = rotation.rotate_queries_keys(qk_2xBxLxHxK, positions_BxL, rope.frequencies(),
                                                rope.layout)
  if interface == positions_lib.ATTENTION:
    return position.attend(x_BxLxD, qk_2xBxLxHxK[0], qk_2xBxLxHxK[1], qkv_TxBxLxHxK[2],
                           positions_BxL, valid_BxL, causal=causal, query_chunk=query_chunk)
  bias_module = position if position is not None else shared
  bias_fn = (None if bias_module is None or interface != positions_lib.BIAS else
             bias_module.bias_fn(causal=causal, distances_BxL=distances_BxL))
  return kernels.attend(qk_2xBxLxHxK[0], qk_2xBxLxHxK[1], qkv_TxBxLxHxK[2], positions_BxL,
                        valid_BxL, causal=causal, bias_fn=bias_fn, query_chunk=query_chunk)
