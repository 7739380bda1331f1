"""Rotary position embeddings: the pure math, and thin NNX modules over it.

Everything positional in the project reduces to three pure functions:

* `geometric_frequencies(rotary_dim, base)`: the fixed RoPE spectrum.
* `rotary_cos_sin(positions, frequencies)`: the rotation angles, in float32,
  computed once and shared by queries and keys (and by every head that uses
  the same spectrum).
* `rotate(x, cos, sin, layout)`: applies a rotation to the first `2 * pairs`
  channels of each head and passes the rest through (partial rotary).

`apply_rope` composes the last two. The modules (`GeometricRoPE`,
`SpectralRoPE`) only own frequencies: geometric ones as
constants, spectral ones as `SpectralFrequency` parameters holding
`log omega` (so omega stays positive and gradient steps are relative).
"""

from __future__ import annotations

from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

Layout = Literal["half", "interleaved"]
LAYOUTS = ("half", "interleaved")

# ----------------------------------------------------------------------------
# Pure functions.
# ----------------------------------------------------------------------------


def geometric_frequencies(rotary_dim: int, base: float = 10_000.0) -> jax.Array:
  """Angular frequencies `base ** (-2i / rotary_dim)`, i < rotary_dim // 2, float32."""
  if not isinstance(rotary_dim, (int, np.integer)) or rotary_dim <= 0 or rotary_dim % 2:
    raise ValueError(f"rotary_dim must be a positive even integer, got {rotary_dim!r}")
  if not base > 1.0:
    raise ValueError(f"base must be > 1, got {base!r}")
  # Computed in float64 on the host so every caller gets the same float32 values.
  i = np.arange(rotary_dim // 2, dtype=np.float64)
  return jnp.asarray(base**(-2.0 * i / rotary_dim), dtype=jnp.float32)


def proportional_frequencies(head_dim: int, rope_proportion: float,
                             base: float = 10_000.0) -> jax.Array:
  """Gemma's p-RoPE spectrum (`rope_proportion`), `[head_dim // 2]` float32.

  The first `int(rope_proportion * head_dim // 2)` pairs keep the full
  head's geometric frequencies `base ** (-2i / head_dim)`; the remaining,
  lowest-frequency pairs get frequency 0 (angle 0: position-free), as gemma's
  `apply_rope` pads its timescales with infinity. Contrast GPT-NeoX's
  `rotary_pct` (`GeometricRoPE(rotary_fraction=...)`), which recomputes the
  spectrum over the rotated channels alone.
  """
  if not 0.0 < rope_proportion <= 1.0:
    raise ValueError(f"rope_proportion must be in (0, 1], got {rope_proportion!r}")
  rotated = proportional_pairs(head_dim, rope_proportion)
  full = geometric_frequencies(head_dim, base)
  return jnp.concatenate([full[:rotated], jnp.zeros((head_dim // 2 - rotated,), jnp.float32)])


def proportional_pairs(head_dim: int, rope_proportion: float) -> int:
  """How many pairs p-RoPE rotates: gemma's `int(rope_proportion * head_dim // 2)`."""
  rotated = int(rope_proportion * head_dim // 2)
  if rotated < 1:
    raise ValueError(f"rope_proportion={rope_proportion} rotates no channel pair of "
                     f"head_dim={head_dim}")
  return rotated


def rotary_cos_sin(positions: jax.Array, frequencies: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Cosines and sines of `positions * frequencies`, in float32.

  Args:
    positions: `[..., seq]`, integer or float.
    frequencies: `[pairs]` (shared by all heads) or `[heads, pairs]`.

  Returns:
    `(cos, sin)`, each `[..., seq, 1, pairs]` or `[..., seq, heads, pairs]`:
    laid out to broadcast against `x: [..., seq, heads, head_dim]`.
  """
  frequencies = jnp.asarray(frequencies, jnp.float32)
  if frequencies.ndim == 1:
    frequencies = frequencies[None, :]
  if frequencies.ndim != 2:
    raise ValueError(
        f"frequencies must be [pairs] or [heads, pairs], got shape {frequencies.shape}")
  pos = jnp.asarray(positions).astype(jnp.float32)
  angles = pos[..., :, None, None] * frequencies  # [..., seq, heads|1, pairs]
  return jnp.cos(angles), jnp.sin(angles)


def rotate(x: jax.Array, cos: jax.Array, sin: jax.Array, layout: Layout = "half") -> jax.Array:
  """Rotates channel pairs of `x: [..., seq, heads, head_dim]` by precomputed angles.

  `cos`/`sin` are `[..., seq, heads|1, pairs]` from `rotary_cos_sin`. Only the
  first `2 * pairs` channels are rotated. The arithmetic is float32; the
  result has the dtype of `x`.
  """
  if layout not in LAYOUTS:
    raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
  pairs = cos.shape[-1]
  head_dim = x.shape[-1]
  if 2 * pairs > head_dim:
    raise ValueError(
        f"frequencies have {pairs} pairs but head_dim is {head_dim}: at most head_dim // 2 pairs")
  dtype = x.dtype
  xr = x[..., :2 * pairs].astype(jnp.float32)
  if layout == "half":
    x1, x2 = xr[..., :pairs], xr[..., pairs:]
    out = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
  else:
    xp = xr.reshape(xr.shape[:-1] + (pairs, 2))
    x1, x2 = xp[..., 0], xp[..., 1]
    out = jnp.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    out = out.reshape(xr.shape)
  out = out.astype(dtype)
  if 2 * pairs == head_dim:
    return out
  return jnp.concatenate([out, x[..., 2 * pairs:]], axis=-1)


def check_positions(x_shape: tuple[int, ...], positions_shape: tuple[int, ...]) -> None:
  """Raises ValueError unless `positions: [..., seq]` fits `x: [..., seq, heads, dim]`."""
  batch, seq = tuple(x_shape[:-3]), x_shape[-3]
  ok = len(positions_shape) >= 1 and positions_shape[-1] == seq
  if ok:
    # Broadcasting must leave the batch of x as it is (never widen it).
    try:
      ok = np.broadcast_shapes(tuple(positions_shape[:-1]), batch) == batch
    except ValueError:
      ok = False
  if not ok:
    raise ValueError(f"positions has shape {tuple(positions_shape)}, which does not fit x of shape "
                     f"{tuple(x_shape)}: expected [..., {seq}] broadcastable to {batch + (seq,)}")


def apply_rope(
    x: jax.Array,
    positions: jax.Array,
    frequencies: jax.Array,
    *,
    layout: Layout = "half",
) -> jax.Array:
  """Rotary position embedding, a pure function.

  Args:
    x: `[..., seq, heads, head_dim]`.
    positions: `[..., seq]`, int or float; any offsets (packed sequences,
      decoding). Leading dims broadcast against those of `x`.
    frequencies: `[pairs]` shared by all heads, or `[heads, pairs]` per head.
      The first `2 * pairs` channels are rotated, the rest pass through.
    layout: `"half"` pairs channel `i` with `i + pairs` (Llama, Gemma,
      `flax.nnx.RoPE`); `"interleaved"` pairs `2i` with `2i + 1` (GPT-J).

  Returns:
    An array like `x` (same shape and dtype). Angles are float32.
  """
  x = jnp.asarray(x)
  if x.ndim < 3:
    raise ValueError(f"x must be [..., seq, heads, head_dim], got shape {x.shape}")
  positions = jnp.asarray(positions)
  check_positions(x.shape, positions.shape)
  frequencies = jnp.asarray(frequencies)
  if frequencies.ndim == 2 and frequencies.shape[0] not in (1, x.shape[-2]):
    raise ValueError(
        f"per-head frequencies have {frequencies.shape[0]} heads but x has {x.shape[-2]}")
  cos, sin = rotary_cos_sin(positions, frequencies)
  return rotate(x, cos, sin, layout)


def randomized_positions(key: jax.Array, shape: tuple[int, ...], max_position: int, *,
                         lengths: jax.Array | None = None, shared: bool = False) -> jax.Array:
  """Randomized positional encodings (Ruoss et al., 2023).

  For each sequence, an increasing random subset of `[0, max_position)` of the
  sequence's length, instead of `0 .. seq - 1`. `shape` is `[..., seq]`.
  `lengths` (broadcast to `shape[:-1]`; default `seq`): each sequence's real
  tokens, before its padding. A sequence of `n` real tokens gets a uniform
  subset of size `n`, as the source draws it for an unpadded length-`n` batch
  (its padding gets the rest of the draw: distinct, in range, unsorted
  against the real ones). `shared`: one draw for all sequences (the source's
  `noisy_fixed_positional_encodings`); sequences of one length then get the
  same positions.
  """
  *batch, seq = shape
  if seq > max_position:
    raise ValueError(f"sequence length {seq} exceeds position.max_position={max_position}")
  rows = int(np.prod(batch)) if batch else 1

  # Top-k of iid uniforms, largest first: its first n indices are a uniform
  # n-subset for every n, without a full permutation.
  def draw(k):
    return jax.lax.top_k(jax.random.uniform(k, (max_position,)), seq)[1]

  keys = jax.random.split(key, 1 if shared else rows)
  if shared and lengths is None:
    return jnp.broadcast_to(jnp.sort(draw(keys[0])), shape).astype(jnp.int32)
  lengths_R = jnp.broadcast_to(jnp.asarray(seq if lengths is None else lengths, jnp.int32),
                               tuple(batch)).reshape(rows)
  drawn_RxS = jnp.broadcast_to(draw(keys[0]), (rows, seq)) if shared else jax.vmap(draw)(keys)
  sorted_RxS = jax.vmap(sorted_prefix, in_axes=(0, 0, None))(drawn_RxS, lengths_R, max_position)
  return sorted_RxS.reshape(shape).astype(jnp.int32)


def sorted_prefix(drawn_S: jax.Array, n: jax.Array, bound: int) -> jax.Array:
  """The first `n` of `drawn_S` (values in `[0, bound)`) sorted, then the rest sorted."""
  tail = jnp.arange(drawn_S.shape[0]) >= n
  keyed = jnp.sort(drawn_S + jnp.where(tail, bound, 0))
  return jnp.where(keyed >= bound, keyed - bound, keyed)


# ----------------------------------------------------------------------------
# Modules: owners of frequencies.
# ----------------------------------------------------------------------------


class SpectralFrequency(nnx.Param):
  """A trainable rotary spectrum, stored as `log omega` (radians per token).

  Its own Variable type, so optimizers (`optim.spectral_evolution`), analysis
  and checkpoints select spectral frequencies with `nnx.All(SpectralFrequency)`
  or `nnx.state(model, SpectralFrequency)`.
  """


def _check_rotary_dim(embedding_size: int, rotary_fraction: float = 1.0) -> int:
  """The rotated width `2 * round(embedding_size * rotary_fraction) // 2`, or a ValueError."""
  if not isinstance(embedding_size, (int, np.integer)) or embedding_size <= 0 or embedding_size % 2:
    raise ValueError(
        f"embedding_size (head_dim) must be a positive even integer, got {embedding_size!r}")
  if not 0.0 < rotary_fraction <= 1.0:
    raise ValueError(f"rotary_fraction must be in (0, 1], got {rotary_fraction!r}")
  pairs = int(round(embedding_size * rotary_fraction)) // 2
  if pairs < 1:
    raise ValueError(
        f"rotary_fraction={rotary_fraction} rotates no channel pair of head_dim={embedding_size}")
  return 2 * pairs


def _any_nonpositive(frequencies: jax.Array) -> bool:
  """Checks concrete values only: modules are also built under `jit`/`eval_shape`."""
  if isinstance(frequencies, jax.core.Tracer):
    return False
  return bool(np.any(np.asarray(frequencies) <= 0))


def _default_positions(x: jax.Array, input_positions) -> jax.Array:
  if input_positions is None:
    return jnp.arange(x.shape[-2], dtype=jnp.int32)
  input_positions = jnp.asarray(input_positions)
  if input_positions.ndim == 0 or input_positions.shape[-1] != x.shape[-2]:
    raise ValueError(
        f"input_positions has shape {input_positions.shape}; expected [..., {x.shape[-2]}] "
        f"to match x of shape {x.shape}")
  return input_positions


class _RopeBase(nnx.Module):
  """Shared call convention of `flax.nnx.RoPE`: `x: [..., seq, head_dim]`."""

  layout: Layout

  def frequencies(self) -> jax.Array:
    raise NotImplementedError

  def __call__(self, x: jax.Array, input_positions: jax.Array | None = None) -> jax.Array:
    positions = _default_positions(x, input_positions)
    # Treat head_dim as a one-head [..., seq, 1, head_dim] problem.
    out = apply_rope(x[..., None, :], positions, self.frequencies(), layout=self.layout)
    return out[..., 0, :]


def _partial_dims(embedding_size, rotary_fraction: float,
                  rope_proportion: float | None) -> tuple[int, int | None]:
  """`(rotary_dim, rotated pairs of p-RoPE or None)` of a rotary module.

  The two partial-rotary conventions: `rotary_fraction` (GPT-NeoX's
  `rotary_pct`) rotates the first `rotary_dim` channels with the spectrum of
  `rotary_dim`; `rope_proportion` (Gemma's p-RoPE) keeps the whole head's
  spectrum on its first pairs and gives the rest frequency 0.
  """
  if rope_proportion is None:
    return _check_rotary_dim(embedding_size, rotary_fraction), None
  if rotary_fraction != 1.0:
    raise ValueError("rotary_fraction (GPT-NeoX's rotary_pct) and rope_proportion (Gemma's "
                     "p-RoPE) are two conventions: pass one of them")
  rotary_dim = _check_rotary_dim(embedding_size)
  if not 0.0 < rope_proportion <= 1.0:
    raise ValueError(f"rope_proportion must be in (0, 1], got {rope_proportion!r}")
  return rotary_dim, proportional_pairs(rotary_dim, rope_proportion)


class GeometricRoPE(_RopeBase):
  """Fixed RoPE (the geometric eyes). Same call convention as `flax.nnx.RoPE`.

  `rotary_fraction < 1`: GPT-NeoX's `rotary_pct` (the first channels rotate,
  with the spectrum of their own width); `rope_proportion`: Gemma's p-RoPE
  (`proportional_frequencies`). `frequencies()` is `[rotary_dim // 2]`, with
  p-RoPE's position-free pairs at 0.
  """

  def __init__(self, theta: float = 10_000.0, embedding_size: int | None = None, *,
               rotary_fraction: float = 1.0, rope_proportion: float | None = None,
               layout: Layout = "half"):
    if embedding_size is None:
      raise ValueError("GeometricRoPE needs embedding_size (the head dimension)")
    self.theta = float(theta)
    self.embedding_size = int(embedding_size)
    self.rotary_dim, self.rotated_pairs = _partial_dims(embedding_size, rotary_fraction,
                                                        rope_proportion)
    self.rope_proportion = rope_proportion
    self.layout = layout

  def frequencies(self) -> jax.Array:
    if self.rope_proportion is not None:
      return proportional_frequencies(self.rotary_dim, self.rope_proportion, self.theta)
    return geometric_frequencies(self.rotary_dim, self.theta)


class SpectralRoPE(_RopeBase):
  """RoPE with trainable frequencies, initialised to the geometric spectrum.

  A drop-in for `flax.nnx.RoPE`: `SpectralRoPE(theta=..., embedding_size=...)`,
  called as `rope(x, input_positions=None)` on `x: [..., seq, head_dim]`
  (batched `[batch, seq]` positions are handled per sequence), so it serves as
  the `rope=` of `nnx.dot_product_attention_with_rope`. `num_heads` gives every
  head its own spectrum (`frequencies()` is then `[heads, pairs]` and the call
  expects `x: [..., seq, heads, head_dim]`). `rotary_fraction` and
  `rope_proportion` are `GeometricRoPE`'s; under p-RoPE only the rotated
  pairs are trainable and the position-free ones stay at 0.
  """

  def __init__(self, theta: float = 10_000.0, embedding_size: int | None = None, *,
               num_heads: int | None = None, rotary_fraction: float = 1.0,
               rope_proportion: float | None = None, layout: Layout = "half",
               init_frequencies: jax.Array | None = None):
    if embedding_size is None:
      raise ValueError("SpectralRoPE needs embedding_size (the head dimension)")
    if num_heads is not None and num_heads < 1:
      raise ValueError(f"num_heads must be >= 1, got {num_heads!r}")
    self.theta = float(theta)
    self.embedding_size = int(embedding_size)
    self.rotary_dim, self.rotated_pairs = _partial_dims(embedding_size, rotary_fraction,
                                                        rope_proportion)
    self.rope_proportion = rope_proportion
    self.layout = layout
    self.num_heads = num_heads
    pairs = self.rotary_dim // 2 if self.rotated_pairs is None else self.rotated_pairs
    if init_frequencies is None:
      init_frequencies = geometric_frequencies(self.rotary_dim, self.theta)[:pairs]
    init_frequencies = jnp.asarray(init_frequencies, jnp.float32)
    shape = (pairs,) if num_heads is None else (num_heads, pairs)
    if init_frequencies.shape not in ((pairs,), shape) or _any_nonpositive(init_frequencies):
      raise ValueError(f"init_frequencies must be positive, of shape ({pairs},) or {shape}, "
                       f"got shape {init_frequencies.shape}")
    self.log_frequency = SpectralFrequency(jnp.broadcast_to(jnp.log(init_frequencies), shape))

  def frequencies(self) -> jax.Array:
    """Current angular frequencies, `[pairs]` or `[heads, pairs]`, float32."""
    frequencies = jnp.exp(self.log_frequency[...])
    if self.rotated_pairs is None:
      return frequencies
    unrotated = self.rotary_dim // 2 - self.rotated_pairs
    pad = [(0, 0)] * (frequencies.ndim - 1) + [(0, unrotated)]
    return jnp.pad(frequencies, pad)

  def __call__(self, x: jax.Array, input_positions: jax.Array | None = None) -> jax.Array:
    if self.num_heads is None:
      return super().__call__(x, input_positions)
    # Per-head spectrum: x is [..., seq, heads, head_dim].
    if input_positions is None:
      input_positions = jnp.arange(x.shape[-3], dtype=jnp.int32)
    return apply_rope(x, input_positions, self.frequencies(), layout=self.layout)


class BifocalRoPE(nnx.Module):
  """Geometric eyes and spectral eyes in one rotary module.

  `split="heads"`: the heads in `spectral_heads` (an int n = the last n heads,
  or explicit indices; default half) get trainable per-head spectra, the
  others keep the geometric one. `split="pairs"`: in every head, the
  `spectral_pairs` lowest-frequency pairs (default half) are trainable
  (per head), the high-frequency pairs stay geometric, keeping precise local
  position. `frequencies()` is `[heads, pairs]` either way; the trainable
  part, `log_frequency`, is `[spectral heads, spectral pairs]`.
  """

  def __init__(self, theta: float = 10_000.0, embedding_size: int | None = None, *, num_heads: int,
               split: Literal["heads", "pairs"] = "heads",
               spectral_heads: int | tuple[int, ...] | None = None,
               spectral_pairs: int | None = None, rotary_fraction: float = 1.0,
               layout: Layout = "half", init_frequencies: jax.Array | None = None):
    if embedding_size is None:
      raise ValueError("BifocalRoPE needs embedding_size (the head dimension)")
    if not isinstance(num_heads, (int, np.integer)) or num_heads < 1:
      raise ValueError(f"num_heads must be a positive integer, got {num_heads!r}")
    self.theta = float(theta)
    self.embedding_size = int(embedding_size)
    self.rotary_dim = _check_rotary_dim(embedding_size, rotary_fraction)
    self.layout = layout
    self.num_heads = int(num_heads)
    self.split = split
    pairs = self.rotary_dim // 2
    geometric = (geometric_frequencies(self.rotary_dim, self.theta)
                 if init_frequencies is None else jnp.asarray(init_frequencies, jnp.float32))
    if geometric.shape != (pairs,) or _any_nonpositive(geometric):
      raise ValueError(
          f"init_frequencies must be positive with shape ({pairs},), got shape {geometric.shape}")
    if split == "heads":
      if spectral_heads is None:
        spectral_heads = num_heads // 2
      if isinstance(spectral_heads, (int, np.integer)):
        if not 0 < spectral_heads <= num_heads:
          raise ValueError(f"spectral_heads={spectral_heads} must be in [1, num_heads={num_heads}]")
        spectral_heads = tuple(range(num_heads - spectral_heads, num_heads))
      spectral_heads = tuple(sorted(int(h) for h in spectral_heads))
      if (not spectral_heads or len(set(spectral_heads)) != len(spectral_heads) or
          spectral_heads[0] < 0 or spectral_heads[-1] >= num_heads):
        raise ValueError(
            f"spectral_heads={spectral_heads} must be distinct head indices in [0, {num_heads})")
      self.spectral_heads = spectral_heads
      self.spectral_pairs = pairs
      spectral_shape = (len(spectral_heads), pairs)
    elif split == "pairs":
      if spectral_pairs is None:
        spectral_pairs = max(pairs // 2, 1)
      if not 0 < spectral_pairs <= pairs:
        raise ValueError(f"spectral_pairs={spectral_pairs} must be in [1, pairs={pairs}]")
      self.spectral_heads = tuple(range(num_heads))
      self.spectral_pairs = int(spectral_pairs)
      spectral_shape = (num_heads, self.spectral_pairs)
    else:
      raise ValueError(f"split must be 'heads' or 'pairs', got {split!r}")
    self.geometric = nnx.Variable(geometric)  # not an nnx.Param: never trained
    init = jnp.log(geometric[pairs - spectral_shape[1]:])
    self.log_frequency = SpectralFrequency(jnp.broadcast_to(init, spectral_shape))

  def frequencies(self) -> jax.Array:
    """Current angular frequencies, `[heads, pairs]`, float32."""
    geometric = jax.lax.stop_gradient(self.geometric[...])
    spectral = jnp.exp(self.log_frequency[...])
    pairs = geometric.shape[0]
    if self.split == "pairs":
      fixed = jnp.broadcast_to(geometric[:pairs - self.spectral_pairs],
                               (self.num_heads, pairs - self.spectral_pairs))
      return jnp.concatenate([fixed, spectral], axis=-1)
    geometric_heads = [h for h in range(self.num_heads) if h not in self.spectral_heads]
    fixed = jnp.broadcast_to(geometric, (len(geometric_heads), pairs))
    stacked = jnp.concatenate([fixed, spectral], axis=0)
    # Static permutation back to head order.
    order = np.argsort(np.asarray(geometric_heads + list(self.spectral_heads)))
    return stacked[order]

  def __call__(self, x: jax.Array, input_positions: jax.Array | None = None) -> jax.Array:
    """`x: [..., seq, heads, head_dim]`."""
    if input_positions is None:
      input_positions = jnp.arange(x.shape[-3], dtype=jnp.int32)
    return apply_rope(x, input_positions, self.frequencies(), layout=self.layout)
