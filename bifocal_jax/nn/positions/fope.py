"""FoPE, Fourier position embedding (Hua et al. 2024, arXiv 2412.17739).

As yiju-zhao/Fourier-Position-Embedding `olmo/model.py` (`FourierEmbedding`
over `RotaryEmbedding.get_inv_freq`) with the settings of the repository's
FoPE configs (`configs/*/ce-fourier/*.yaml`: `rope_clamp_floor_freq`,
`rope_clamp_floor_to_zero`, `fourier_separate_basis`, `fourier_separate_head`,
`fourier_ignore_zero`, `fourier_init: eye_xavier_norm`, gain 0.3 for the
60M model, also `OLMoConfig`'s default):

  omega_i    = base^(-2i / head_dim), i < head_dim / 2     (RoPE's spectrum)
  floor      = 2 pi / max_sequence_length                  (the frequency floor)
  kept       = the omega_i >= floor (those below are zeroed, then dropped)
  cos'_t     = cos(t * kept) @ C_cos[h]    sin'_t = sin(t * kept) @ C_sin[h]
               ([kept] -> [min(kept, head_dim / 4)] per head), then padded
               with the value 1 up to head_dim / 2 pairs
  x'         = x * [cos', cos'] + rotate_half(x) * [sin', sin']   (queries and keys)

and ordinary softmax attention on the transformed queries and keys
(`kernels.attend`, so the memory is `query_chunk x L` per head). The
padded pairs get cos' = sin' = 1, a fixed position-independent map, exactly
as the source's `F.pad(..., value=1)`. The coefficients start as
`xavier_normal(gain) + eye` (a strided eye when fewer outputs than inputs,
`get_step_eye`), drawn separately for sin and cos.

The source's `fourier_learnable` defaults to False and its configs do not
set it: the coefficients stay at their random initialisation. That is the
default here too (`learnable=False`); `learnable=True` trains them. FoPE
transforms queries and keys position by position, like RoPE, so it applies
unchanged in the encoder (our direct extension; the source trains causal
language models).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx

from bifocal_jax.nn import kernels
from bifocal_jax.nn.positions import base


def fope_frequencies(head_dim: int, *, base: float = 10_000.0, max_sequence_length: int,
                     floor_ratio: float = 1.0) -> np.ndarray:
  """The kept (nonzero) frequencies, float32: RoPE's spectrum with the
  frequencies under `2 pi / max_sequence_length * floor_ratio` removed."""
  if head_dim % 2:
    raise ValueError(f"fope: head_dim={head_dim} must be even")
  inv_freq = 1.0 / base**(np.arange(0, head_dim, 2, dtype=np.float32) / head_dim)
  floor = 2 * math.pi / max_sequence_length * floor_ratio
  return inv_freq[inv_freq >= np.float32(floor)].astype(np.float32)


def fope_cos_sin(positions_BxL, frequencies_P, sin_coef_HxPxO, cos_coef_HxPxO, head_dim: int):
  """`(cos', sin')`, each `[B|1, L, H, head_dim // 2]` float32 (see the module doc)."""
  angles = positions_BxL.astype(jnp.float32)[..., None] * frequencies_P.astype(jnp.float32)
  cos = jnp.einsum("blp,hpo->blho", jnp.cos(angles), cos_coef_HxPxO.astype(jnp.float32))
  sin = jnp.einsum("blp,hpo->blho", jnp.sin(angles), sin_coef_HxPxO.astype(jnp.float32))
  pad = head_dim // 2 - cos.shape[-1]
  cos = jnp.pad(cos, ((0, 0), (0, 0), (0, 0), (0, pad)), constant_values=1.0)
  sin = jnp.pad(sin, ((0, 0), (0, 0), (0, 0), (0, pad)), constant_values=1.0)
  return cos, sin


def apply_fope(x_BxLxHxK, cos_BxLxHxP, sin_BxLxHxP):
  """`x * [cos, cos] + rotate_half(x) * [sin, sin]`, rotate_half(x1, x2) = (-x2, x1)."""
  half = x_BxLxHxK.shape[-1] // 2
  x = x_BxLxHxK.astype(jnp.float32)
  x1, x2 = x[..., :half], x[..., half:]
  out = jnp.concatenate([x1 * cos_BxLxHxP - x2 * sin_BxLxHxP, x2 * cos_BxLxHxP + x1 * sin_BxLxHxP],
                        axis=-1)
  return out.astype(x_BxLxHxK.dtype)


def fope_attention(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, positions_BxL, valid_BxL=None, *, frequencies_P,
                   sin_coef_HxPxO, cos_coef_HxPxO, causal: bool,
                   query_chunk: int = 1024) -> jax.Array:
  """Softmax attention over FoPE-transformed queries and keys, `[B, L, H, K]` out."""
  cos, sin = fope_cos_sin(positions_BxL, frequencies_P, sin_coef_HxPxO, cos_coef_HxPxO,
                          q_BxLxHxK.shape[-1])
  return kernels.attend(apply_fope(q_BxLxHxK, cos, sin), apply_fope(k_BxLxHxK, cos, sin), v_BxLxHxK,
                        positions_BxL, valid_BxL, causal=causal, query_chunk=query_chunk)


def eye_xavier_normal(key, num_heads: int, inputs: int, outputs: int, gain: float) -> jax.Array:
  """The source's `eye_xavier_norm` initialisation of one `[H, inputs, outputs]`
  coefficient tensor: `torch.nn.init.xavier_normal_` (PyTorch's fans for a 3-d
  tensor: fan_in = inputs * outputs, fan_out = H * outputs) plus the eye
  (`get_step_eye` when inputs != outputs: a 1 at (i * ceil(in / out), i))."""
  fan_in, fan_out = inputs * outputs, num_heads * outputs
  std = gain * math.sqrt(2.0 / (fan_in + fan_out))
  coef = std * jax.random.normal(key, (num_heads, inputs, outputs), jnp.float32)
  eye = np.zeros((inputs, outputs), np.float32)
  if inputs == outputs:
    eye = np.eye(inputs, dtype=np.float32)
  else:
    step = math.ceil(inputs / outputs)
    for i in range(outputs):
      if i * step < inputs:
        eye[i * step, i] = 1.0
  return coef + eye


class FoPE(nnx.Module):
  """One layer's FoPE coefficients, `sin_coef` and `cos_coef` `[H, kept, out]`.

  Trainable (`nnx.Param`) only with `learnable=True`; by default they are
  fixed `nnx.Variable`s, as the source's `fourier_learnable=False`.
  """

  def __init__(self, *, num_heads: int, head_dim: int, max_sequence_length: int,
               base: float = 10_000.0, init_gain: float = 0.3, learnable: bool = False,
               rngs: nnx.Rngs):
    if max_sequence_length < 1:
      raise ValueError(f"fope: max_sequence_length={max_sequence_length!r} must be >= 1")
    self.head_dim = head_dim
    self.frequencies = nnx.Variable(
        jnp.asarray(fope_frequencies(head_dim, base=base, max_sequence_length=max_sequence_length)))
    inputs = int(self.frequencies[...].shape[0])
    outputs = min(inputs, head_dim // 4)
    kind = nnx.Param if learnable else nnx.Variable
    self.sin_coef_HxPxO = kind(
        eye_xavier_normal(rngs.params(), num_heads, inputs, outputs, init_gain),
        logical_axes=("heads", None, None))
    self.cos_coef_HxPxO = kind(
        eye_xavier_normal(rngs.params(), num_heads, inputs, outputs, init_gain),
        logical_axes=("heads", None, None))

  def cos_sin(self, positions_BxL):
    return fope_cos_sin(positions_BxL, self.frequencies[...], self.sin_coef_HxPxO[...],
                        self.cos_coef_HxPxO[...], self.head_dim)

  def attend(self, x_BxLxD, q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, positions_BxL, valid_BxL=None, *,
             causal: bool, query_chunk: int = 1024):
    del x_BxLxD
    return fope_attention(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, positions_BxL, valid_BxL,
                          frequencies_P=self.frequencies[...],
                          sin_coef_HxPxO=self.sin_coef_HxPxO[...],
                          cos_coef_HxPxO=self.cos_coef_HxPxO[...], causal=causal,
                          query_chunk=query_chunk)


def _layer(position, *, d_model, num_heads, head_dim, causal, rngs):
  del d_model, causal
  if position.fope_max_length is None:
    raise ValueError("position.fope_max_length=None: unresolved (state.build_model sets it to "
                     "the training context length; give it to build a layer alone)")
  gain = 0.3 if position.fope_init_gain is None else float(position.fope_init_gain)
  return FoPE(num_heads=num_heads, head_dim=head_dim,
              max_sequence_length=int(position.fope_max_length), base=position.base, init_gain=gain,
              learnable=bool(position.fope_learnable), rngs=rngs)


SCHEMES = (base.Scheme(
    "fope", base.ATTENTION,
    "Hua et al. 2024, yiju-zhao/Fourier-Position-Embedding olmo/model.py FourierEmbedding "
    "(encoder: ours, the same per-token transform)", layer=_layer),)

CONFIG_KEYS = {
    # the frequency floor's length, floor = 2 pi / fope_max_length (None: the training
    # context length, the source's max_sequence_length)
    "fope_max_length": ml_collections.config_dict.placeholder(int),
    # train the Fourier coefficients (None: False, the source's fourier_learnable)
    "fope_learnable": ml_collections.config_dict.placeholder(bool),
    # eye_xavier_norm gain (None: 0.3, the source's default and its 60M config)
    "fope_init_gain": ml_collections.config_dict.placeholder(float),
}
CONTEXT_KEYS = {"fope_max_length": lambda length: length}
