"""The rotary core (`bifocal_jax/nn/rope.py`) against an independent float64 reference."""

import functools
import re

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from bifocal_jax.nn import rope

BASE = 10_000.0


def reference_frequencies(rotary_dim, base=BASE):
  return base ** (-np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim)


def reference_rope(x, positions, frequencies, layout):
  """RoPE in float64 as complex multiplication: pair (a, b) -> (a + ib) * e^{i omega p}.

  `x: [..., seq, heads, head_dim]`, `positions: [..., seq]` with the batch dims
  of `x`, `frequencies: [pairs]` or `[heads, pairs]`.
  """
  x = np.asarray(x, np.float64)
  frequencies = np.asarray(frequencies, np.float64)
  pairs = frequencies.shape[-1]
  rotary, rest = x[..., :2 * pairs], x[..., 2 * pairs:]
  if layout == "half":
    z = rotary[..., :pairs] + 1j * rotary[..., pairs:]
  else:
    z = rotary[..., 0::2] + 1j * rotary[..., 1::2]
  angles = np.asarray(positions, np.float64)[..., :, None, None] * np.atleast_2d(frequencies)
  z = z * np.exp(1j * angles)
  if layout == "half":
    rotated = np.concatenate([z.real, z.imag], axis=-1)
  else:
    rotated = np.stack([z.real, z.imag], axis=-1).reshape(rotary.shape)
  return np.concatenate([rotated, rest], axis=-1)


# Everything under jit: one compile per shape is far cheaper than eager
# dispatch, which compiles every primitive separately.
apply_rope = jax.jit(rope.apply_rope, static_argnames="layout")
call = nnx.jit(lambda module, *args: module(*args))
randomized_positions = jax.jit(rope.randomized_positions, static_argnums=(1, 2))


def normal(seed, shape, dtype=jnp.float32):
  return jnp.asarray(np.random.default_rng(seed).standard_normal(shape), dtype)


def random_spectrum(seed, shape):
  """An arbitrary 'learned' spectrum: log-uniform in [1e-3, 3] radians per token."""
  log_frequency = np.random.default_rng(seed).uniform(np.log(1e-3), np.log(3.0), shape)
  return np.exp(log_frequency).astype(np.float32)


def random_positions(seed, shape, high):
  return np.random.default_rng(seed).integers(0, high, shape)


@jax.jit
def scores(q, k):
  return jnp.einsum("...qhd,...khd->...hqk", q, k)


# ----------------------------------------------------------------------------
# Pure functions.
# ----------------------------------------------------------------------------


def test_geometric_frequencies_match_reference():
  freqs = rope.geometric_frequencies(16, 500.0)
  chex.assert_type(freqs, jnp.float32)
  chex.assert_shape(freqs, (8,))
  np.testing.assert_allclose(freqs, reference_frequencies(16, 500.0), rtol=1e-7)


@pytest.mark.parametrize("layout", rope.LAYOUTS)
@pytest.mark.parametrize("per_head", [False, True], ids=["shared", "per_head"])
@pytest.mark.parametrize("pairs", [4, 2], ids=["full", "partial"])
def test_apply_rope_matches_float64_reference(layout, per_head, pairs):
  batch, seq, heads, head_dim = 2, 6, 3, 8
  x = normal(0, (batch, seq, heads, head_dim))
  positions = random_positions(1, (batch, seq), 100)
  frequencies = random_spectrum(2, (heads, pairs) if per_head else (pairs,))
  out = apply_rope(x, positions, frequencies, layout=layout)
  chex.assert_shape(out, x.shape)
  chex.assert_type(out, jnp.float32)
  np.testing.assert_allclose(out, reference_rope(x, positions, frequencies, layout), atol=2e-5)
  if pairs < head_dim // 2:  # partial rotary: the tail channels pass through untouched
    np.testing.assert_array_equal(out[..., 2 * pairs:], x[..., 2 * pairs:])


def test_apply_rope_broadcasts_shared_positions_over_batch():
  x = normal(0, (2, 5, 2, 4))
  positions = jnp.arange(5) + 7
  frequencies = rope.geometric_frequencies(4)
  out = apply_rope(x, positions, frequencies)
  np.testing.assert_allclose(
      out, reference_rope(x, np.broadcast_to(positions, (2, 5)), frequencies, "half"), atol=1e-5)


def test_apply_rope_equals_flax_rope_in_half_layout():
  head_dim, seq = 8, 12
  x_BxLxK = normal(0, (2, seq, head_dim))
  flax_rope = nnx.RoPE(theta=BASE)
  positions = jnp.arange(seq) + 3
  frequencies = rope.geometric_frequencies(head_dim)
  ours = apply_rope(x_BxLxK[..., None, :], positions, frequencies)[..., 0, :]
  np.testing.assert_allclose(ours, call(flax_rope, x_BxLxK, positions), atol=1e-5)
  # Flax's cached-table path (positions 0 .. seq - 1) too.
  cached = nnx.RoPE(theta=BASE, embedding_size=head_dim, max_seq_len=32)
  np.testing.assert_allclose(
      call(rope.GeometricRoPE(BASE, head_dim), x_BxLxK), call(cached, x_BxLxK), atol=1e-5)


@pytest.mark.parametrize("per_head", [False, True], ids=["geometric", "learned_per_head"])
def test_scores_depend_only_on_relative_position(per_head):
  batch, seq, heads, head_dim = 2, 7, 4, 8
  q, k = normal(0, (batch, seq, heads, head_dim)), normal(1, (batch, seq, heads, head_dim))
  frequencies = random_spectrum(2, (heads, 4)) if per_head else rope.geometric_frequencies(head_dim)
  positions = random_positions(3, (batch, seq), 50)
  offset = int(random_positions(4, (), 1000)) + 1
  apply = functools.partial(apply_rope, frequencies=frequencies)
  before = scores(apply(q, positions), apply(k, positions))
  after = scores(apply(q, positions + offset), apply(k, positions + offset))
  np.testing.assert_allclose(after, before, atol=2e-3)
  # Control: shifting only the keys changes the scores, so the check above can fail.
  keys_only = scores(apply(q, positions), apply(k, positions + offset))
  assert np.max(np.abs(keys_only - before)) > 0.1


def test_packed_sequences_restart_positions():
  """Positions restarting inside a row rotate each segment as if it started the row."""
  x = normal(0, (1, 8, 2, 8))
  frequencies = random_spectrum(1, (2, 4))
  segments = (3, 5)
  packed_positions = jnp.concatenate([jnp.arange(n) for n in segments])[None]
  packed = apply_rope(x, packed_positions, frequencies)
  start = 0
  for n in segments:
    alone = apply_rope(x[:, start:start + n], jnp.arange(n), frequencies)
    np.testing.assert_allclose(packed[:, start:start + n], alone, atol=1e-6)
    start += n


@pytest.mark.parametrize("layout", rope.LAYOUTS)
def test_decoding_one_token_at_an_offset_equals_full_sequence(layout):
  x = normal(0, (2, 6, 2, 8))
  frequencies = rope.geometric_frequencies(8)
  offsets = jnp.array([0, 37])  # each sequence has its own cache length
  full = apply_rope(x, offsets[:, None] + jnp.arange(6), frequencies, layout=layout)
  for t in range(6):
    step = apply_rope(x[:, t:t + 1], offsets[:, None] + t, frequencies, layout=layout)
    np.testing.assert_allclose(step[:, 0], full[:, t], atol=1e-6)


def test_bfloat16_in_bfloat16_out_with_float32_angles():
  x = normal(0, (1, 32, 2, 16), jnp.bfloat16)
  positions = 4000 + jnp.arange(32)
  frequencies = rope.geometric_frequencies(16)
  out = apply_rope(x, positions, frequencies)
  chex.assert_type(out, jnp.bfloat16)
  expected = reference_rope(np.asarray(x, np.float32), positions, frequencies, "half")
  # Only the output's own bfloat16 rounding (8 significant bits) remains.
  np.testing.assert_allclose(np.asarray(out, np.float64), expected, rtol=2**-7, atol=2**-7)
  # Control: angles from bfloat16 positions (4001 is not a bfloat16) are far off.
  naive = apply_rope(x, positions.astype(jnp.bfloat16), frequencies)
  assert np.max(np.abs(np.asarray(naive, np.float64) - expected)) > 0.5


def test_randomized_positions_are_sorted_distinct_and_in_range():
  positions = np.asarray(randomized_positions(jax.random.key(0), (4, 16), 64))
  assert positions.shape == (4, 16) and np.issubdtype(positions.dtype, np.integer)
  assert np.all(np.diff(positions, axis=-1) > 0)  # increasing, hence distinct
  assert positions.min() >= 0 and positions.max() < 64
  assert len({tuple(row) for row in positions}) == 4  # each sequence draws its own
  np.testing.assert_array_equal(randomized_positions(jax.random.key(0), (4, 16), 64), positions)
  # Drawing every position there is leaves only 0 .. seq - 1.
  np.testing.assert_array_equal(randomized_positions(jax.random.key(1), (8,), 8), np.arange(8))


def test_a_shared_draw_gives_each_length_its_subset_of_one_draw():
  """`shared`: rows of one length get the same positions, a shorter row a
  subset of a longer row's (one draw, each row its real length's share of
  it); full-length rows are the unpadded draw."""
  lengths = jnp.asarray([5, 5, 12, 16])
  drawn = np.asarray(rope.randomized_positions(jax.random.key(2), (4, 16), 64, lengths=lengths,
                                               shared=True))
  np.testing.assert_array_equal(drawn[0], drawn[1])
  assert set(drawn[0, :5]) < set(drawn[2, :12]) < set(drawn[3])
  # A uniform 5-subset of the draw, not its 5 smallest (what a padded row got before).
  assert not np.array_equal(drawn[0, :5], drawn[3, :5])
  for row, n in zip(drawn, lengths):
    assert np.all(np.diff(row[:n]) > 0) and len(set(row)) == 16 and row.max() < 64
  np.testing.assert_array_equal(
      drawn[3], rope.randomized_positions(jax.random.key(2), (1, 16), 64, shared=True)[0])


# ----------------------------------------------------------------------------
# Modules.
# ----------------------------------------------------------------------------


def test_spectral_rope_starts_geometric():
  geometric, spectral = rope.GeometricRoPE(BASE, 8), rope.SpectralRoPE(BASE, 8)
  assert isinstance(spectral.log_frequency, rope.SpectralFrequency)
  assert isinstance(spectral.log_frequency, nnx.Param)
  # Equal up to the log/exp round trip of float32.
  np.testing.assert_allclose(spectral.frequencies(), geometric.frequencies(), rtol=3e-7)
  x = normal(0, (2, 16, 8))
  np.testing.assert_allclose(call(spectral, x), call(geometric, x), rtol=1e-6, atol=1e-6)
  assert nnx.state(geometric, nnx.Param) == nnx.State({})


def test_spectral_rope_handles_per_sequence_positions():
  """`[batch, seq]` positions rotate each sequence by its own positions."""
  x_BxLxK = normal(0, (3, 5, 8))
  positions = jnp.array([0, 10, 1000])[:, None] + jnp.arange(5)
  out = call(rope.SpectralRoPE(BASE, 8), x_BxLxK, positions)
  expected = reference_rope(x_BxLxK[..., None, :], positions, reference_frequencies(8), "half")
  np.testing.assert_allclose(out, expected[..., 0, :], atol=1e-4)


def test_spectral_rope_in_flax_multi_head_attention_equals_flax_rope():
  def layer(rope_module):
    return nnx.MultiHeadAttention(
        num_heads=2, in_features=16, qkv_features=16, decode=False, rngs=nnx.Rngs(0),
        attention_fn=functools.partial(nnx.dot_product_attention_with_rope, rope=rope_module))
  x = normal(1, (2, 6, 16))
  flax_out = call(layer(nnx.RoPE(theta=BASE)), x)
  spectral_out = call(layer(rope.SpectralRoPE(theta=BASE, embedding_size=8)), x)
  np.testing.assert_allclose(spectral_out, flax_out, atol=1e-5)
  # The rope matters: without it the output differs.
  assert np.max(np.abs(call(layer(lambda x, positions=None: x), x) - flax_out)) > 1e-3


def test_per_head_spectral_rope_shapes_and_heads():
  module = rope.SpectralRoPE(BASE, 8, num_heads=3)
  chex.assert_shape(module.log_frequency[...], (3, 4))
  module.log_frequency[...] = jnp.log(random_spectrum(0, (3, 4)))
  x = normal(1, (2, 5, 3, 8))
  out = call(module, x)
  chex.assert_shape(out, x.shape)
  for h in range(3):  # each head is rotated by its own spectrum
    alone = apply_rope(x[:, :, h:h + 1], jnp.arange(5), module.frequencies()[h])
    np.testing.assert_allclose(out[:, :, h:h + 1], alone, atol=1e-6)

  weights = normal(2, x.shape)

  def loss(m):
    return jnp.sum(m(x) * weights)
  grads = nnx.jit(nnx.grad(loss))(module)
  assert np.all(np.asarray(grads["log_frequency"][...]) != 0)  # every head's spectrum trains


def bifocal_loss(module, x, weights):
  return jnp.sum(module(x) * weights)


# Gradients with respect to every Variable, Params or not.
all_variable_grads = nnx.jit(nnx.grad(bifocal_loss, argnums=nnx.DiffState(0, nnx.Variable)))


@pytest.mark.parametrize("spectral_heads", [None, (0, 2)], ids=["default", "explicit"])
def test_bifocal_split_by_heads(spectral_heads):
  heads, head_dim = 4, 8
  module = rope.BifocalRoPE(BASE, head_dim, num_heads=heads, split="heads",
                            spectral_heads=spectral_heads)
  expected_heads = (2, 3) if spectral_heads is None else spectral_heads
  geometric_heads = [h for h in range(heads) if h not in expected_heads]
  assert module.spectral_heads == expected_heads
  assert not isinstance(module.geometric, nnx.Param)
  assert set(nnx.state(module, nnx.Param).keys()) == {"log_frequency"}
  geometric = rope.geometric_frequencies(head_dim)
  np.testing.assert_allclose(
      module.frequencies(), np.broadcast_to(geometric, (heads, 4)), rtol=3e-7)

  learned = random_spectrum(0, (2, 4))
  module.log_frequency[...] = jnp.log(learned)
  frequencies = module.frequencies()
  chex.assert_shape(frequencies, (heads, 4))
  np.testing.assert_allclose(frequencies[np.array(expected_heads)], learned, rtol=1e-6)
  np.testing.assert_array_equal(
      frequencies[np.array(geometric_heads)], np.broadcast_to(geometric, (2, 4)))

  x = normal(1, (2, 5, heads, head_dim))
  weights = normal(2, x.shape)
  grads = all_variable_grads(module, x, weights)
  np.testing.assert_array_equal(grads["geometric"][...], 0.0)
  assert np.all(np.asarray(grads["log_frequency"][...]) != 0)
  # A loss on the geometric heads alone gives the spectral frequencies no gradient.
  only_geometric = weights * np.isin(np.arange(heads), geometric_heads)[:, None]
  only_geometric_grads = all_variable_grads(module, x, only_geometric)
  np.testing.assert_array_equal(only_geometric_grads["log_frequency"][...], 0.0)


@pytest.mark.parametrize("layout", rope.LAYOUTS)
def test_bifocal_split_by_pairs(layout):
  heads, head_dim, pairs = 2, 12, 6
  module = rope.BifocalRoPE(BASE, head_dim, num_heads=heads, split="pairs", layout=layout)
  spectral_pairs = pairs // 2  # the default: the low-frequency half
  chex.assert_shape(module.log_frequency[...], (heads, spectral_pairs))
  assert not isinstance(module.geometric, nnx.Param)
  learned = random_spectrum(0, (heads, spectral_pairs))
  module.log_frequency[...] = jnp.log(learned)
  frequencies = module.frequencies()
  geometric = rope.geometric_frequencies(head_dim)
  np.testing.assert_array_equal(
      frequencies[:, :pairs - spectral_pairs],
      np.broadcast_to(geometric[:pairs - spectral_pairs], (heads, pairs - spectral_pairs)))
  np.testing.assert_allclose(frequencies[:, pairs - spectral_pairs:], learned, rtol=1e-6)

  x = normal(1, (2, 5, heads, head_dim))
  weights = normal(2, x.shape)
  grads = all_variable_grads(module, x, weights)
  np.testing.assert_array_equal(grads["geometric"][...], 0.0)
  assert np.all(np.asarray(grads["log_frequency"][...]) != 0)
  # A loss on the channels of the high-frequency (geometric) pairs gives no spectral gradient.
  channel_pair = np.arange(head_dim) % pairs if layout == "half" else np.arange(head_dim) // 2
  only_geometric = weights * (channel_pair < pairs - spectral_pairs)
  only_geometric_grads = all_variable_grads(module, x, only_geometric)
  np.testing.assert_array_equal(only_geometric_grads["log_frequency"][...], 0.0)


def test_bifocal_custom_spectral_counts():
  by_heads = rope.BifocalRoPE(BASE, 8, num_heads=4, spectral_heads=3)
  assert by_heads.spectral_heads == (1, 2, 3)
  chex.assert_shape(by_heads.log_frequency[...], (3, 4))
  by_pairs = rope.BifocalRoPE(BASE, 8, num_heads=4, split="pairs", spectral_pairs=1)
  chex.assert_shape(by_pairs.log_frequency[...], (4, 1))


@pytest.mark.parametrize("module", ["spectral", "per_head", "bifocal"])
def test_modules_keep_bfloat16(module):
  x = normal(0, (1, 4, 2, 8), jnp.bfloat16)
  if module == "spectral":
    out = call(rope.SpectralRoPE(BASE, 8), x[:, :, 0])
  elif module == "per_head":
    out = call(rope.SpectralRoPE(BASE, 8, num_heads=2), x)
  else:
    out = call(rope.BifocalRoPE(BASE, 8, num_heads=2), x)
  chex.assert_type(out, jnp.bfloat16)


# ----------------------------------------------------------------------------
# Bad arguments: a ValueError naming the argument and its value.
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("make, match", [
    (lambda: rope.SpectralRoPE(BASE, 7), r"embedding_size.*7"),
    (lambda: rope.GeometricRoPE(BASE, 7), r"embedding_size.*7"),
    (lambda: rope.BifocalRoPE(BASE, 9, num_heads=2), r"embedding_size.*9"),
    (lambda: rope.geometric_frequencies(5), r"rotary_dim.*5"),
    (lambda: rope.GeometricRoPE(BASE, 8, rotary_fraction=0.0), r"rotary_fraction.*0\.0"),
    (lambda: rope.SpectralRoPE(BASE, 8, rotary_fraction=1.5), r"rotary_fraction.*1\.5"),
    (lambda: rope.BifocalRoPE(BASE, 8, num_heads=2, rotary_fraction=-0.5),
     r"rotary_fraction.*-0\.5"),
    (lambda: rope.BifocalRoPE(BASE, 8, num_heads=4, spectral_heads=5), r"spectral_heads.*5"),
    (lambda: rope.BifocalRoPE(BASE, 8, num_heads=4, spectral_heads=0), r"spectral_heads.*0"),
    (lambda: rope.BifocalRoPE(BASE, 8, num_heads=4, spectral_heads=(1, 4)), r"spectral_heads.*4"),
    (lambda: rope.BifocalRoPE(BASE, 8, num_heads=4, split="pairs", spectral_pairs=5),
     r"spectral_pairs.*5"),
    (lambda: rope.BifocalRoPE(BASE, 8, num_heads=4, split="channels"), r"split.*channels"),
    (lambda: rope.BifocalRoPE(BASE, 8, num_heads=0), r"num_heads.*0"),
    (lambda: rope.SpectralRoPE(BASE, 8, init_frequencies=jnp.array([1.0, -1.0, 1.0, 1.0])),
     r"init_frequencies"),
    (lambda: rope.SpectralRoPE(BASE, 8, init_frequencies=jnp.ones((2, 4))),
     r"init_frequencies.*\(2, 4\)"),
    (lambda: rope.BifocalRoPE(BASE, 8, num_heads=2, init_frequencies=jnp.zeros(4)),
     r"init_frequencies"),
    (lambda: rope.randomized_positions(jax.random.key(0), (2, 9), 8), r"max_position.*8"),
])
def test_bad_module_arguments_raise(make, match):
  with pytest.raises(ValueError, match=match):
    make()


@pytest.mark.parametrize("x_batch, positions_shape", [
    ((2,), (7,)), ((2,), (3, 8)), ((2,), (2, 2, 8)), ((2,), ()), ((1,), (3, 8))])
def test_mismatched_positions_raise(x_batch, positions_shape):
  """Positions must be `[..., seq]`, broadcasting to (never beyond) the batch of `x`."""
  x = jnp.zeros(x_batch + (8, 2, 4))
  shape = re.escape(str(positions_shape))
  with pytest.raises(ValueError, match=rf"positions.*{shape}"):
    rope.apply_rope(x, jnp.zeros(positions_shape, jnp.int32), rope.geometric_frequencies(4))


def test_mismatched_module_positions_and_heads_raise():
  with pytest.raises(ValueError, match=r"input_positions.*\(7,\)"):
    rope.SpectralRoPE(BASE, 4)(jnp.zeros((2, 8, 4)), jnp.arange(7))
  with pytest.raises(ValueError, match=r"positions.*\(2, 7\)"):
    rope.SpectralRoPE(BASE, 4, num_heads=2)(jnp.zeros((2, 8, 2, 4)), jnp.zeros((2, 7)))
  with pytest.raises(ValueError, match=r"frequencies.*3 heads.*2"):
    rope.apply_rope(jnp.zeros((1, 8, 2, 4)), jnp.arange(8), jnp.ones((3, 2)))
  with pytest.raises(ValueError, match=r"3 pairs.*head_dim is 4"):
    rope.apply_rope(jnp.zeros((1, 8, 2, 4)), jnp.arange(8), jnp.ones((3,)))
  with pytest.raises(ValueError, match=r"layout.*diagonal"):
    rope.apply_rope(jnp.zeros((1, 8, 2, 4)), jnp.arange(8), jnp.ones((2,)), layout="diagonal")
