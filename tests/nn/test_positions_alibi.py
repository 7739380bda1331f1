"""ALiBi and randomized ALiBi (`bifocal_jax/nn/positions/alibi.py`) against a
float64 numpy reference and against the benchmark's own Haiku code
(vendored in `tests/vendor/`)."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bifocal_jax.nn.positions import alibi
from vendor import chomsky_positional_encodings as chomsky
from vendor import randomized_positional_encodings as randomized

HEADS, L = 4, 7


def reference(distance_fn, slopes, offset, length=L):
  """float64: `slope * (-r(|i - j|) + offset * [i > j])` as [H, L, L]."""
  out = np.zeros((len(slopes), length, length))
  for h, slope in enumerate(np.asarray(slopes, np.float64)):
    for i in range(length):
      for j in range(length):
        out[h, i, j] = slope * (-distance_fn(abs(i - j)) + offset * (i > j))
  return out


def test_decoder_alibi_is_press_et_al():
  pos = jnp.arange(L)[None]
  got = alibi.alibi_bias(pos, pos, alibi.alibi_slopes(HEADS), offset=0.0)[0]
  np.testing.assert_allclose(got, reference(float, alibi.alibi_slopes(HEADS), 0.0), rtol=1e-6)


@pytest.mark.parametrize("heads", [4, 6, 8])
def test_encoder_alibi_equals_the_chomsky_benchmark(heads):
  pos = jnp.arange(L)[None]
  got = alibi.alibi_bias(pos, pos, alibi.alibi_slopes(heads), offset=alibi.ENCODER_OFFSET)[0]
  theirs = np.asarray(chomsky.compute_alibi_encodings_biases((heads, L, L)))
  np.testing.assert_allclose(got, theirs, rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose(got, reference(float, alibi.alibi_slopes(heads), 0.5), rtol=1e-6)


def test_offset_defaults(position_config):
  assert alibi.resolved_offset(position_config("alibi"), causal=False) == 0.5
  assert alibi.resolved_offset(position_config("alibi"), causal=True) == 0.0
  assert alibi.resolved_offset(position_config("alibi", alibi_offset=0.0), causal=False) == 0.0


def _patched_choice(monkeypatch, module, values):
  """Their `jrandom.choice(..., replace=False)` returns `values` (shuffled: they sort)."""
  shuffled = np.random.default_rng(0).permutation(np.asarray(values))

  class Random:
    choice = staticmethod(lambda *a, shape, **k: jnp.asarray(shuffled[:shape[0]]))

  monkeypatch.setattr(module, "jrandom", Random)


def test_randomized_alibi_equals_their_noisy_alibi(monkeypatch):
  rng = np.random.default_rng(1)
  r = np.concatenate([[0], np.sort(rng.choice(np.arange(1, 100), L - 1, replace=False))])
  _patched_choice(monkeypatch, randomized, r[1:])
  import haiku as hk
  theirs = hk.transform(lambda: randomized.compute_noisy_alibi_encodings_biases(
      (HEADS, L, L), noise_max_length=100)).apply({}, jax.random.key(0))
  idx = jnp.arange(L)[None]
  got = alibi.randomized_alibi_bias(idx, idx, jnp.asarray(r), alibi.alibi_slopes(HEADS),
                                    offset=0.5)[0]
  np.testing.assert_allclose(got, theirs, rtol=1e-6, atol=1e-5)
  np.testing.assert_allclose(got, reference(lambda d: r[d], alibi.alibi_slopes(HEADS), 0.5),
                             rtol=1e-6, atol=1e-5)


def test_drawn_distances_are_sorted_distinct_and_in_range():
  (d,) = np.asarray(alibi.draw_distances(jax.random.key(3), 50, 64))
  assert d[0] == 0 and np.all(np.diff(d) > 0) and d[-1] < 64
  assert not np.array_equal(d, np.asarray(alibi.draw_distances(jax.random.key(4), 50, 64)))
  with pytest.raises(ValueError, match="max_position=8"):
    alibi.draw_distances(jax.random.key(0), 9, 8)


def test_each_sequence_draws_the_distances_of_its_real_length():
  """With `lengths_B`, a row of n real tokens gets a uniform draw of n - 1
  distances from `[1, M)` (largest n/(n+1) M on average, where the first n - 1
  of a longer row's draw would sit low), rows of one length the same one, and
  the full-length row the unpadded draw."""
  n, width, m = 4, 32, 256
  lengths = jnp.asarray([n, width, n, width // 2])
  draw = jax.jit(lambda key: alibi.draw_distances(key, width, m, lengths_B=lengths))
  d = np.asarray(draw(jax.random.key(0)))
  assert d.shape == (4, width) and np.all(d[:, 0] == 0)
  np.testing.assert_array_equal(d[0], d[2])
  unpadded = np.asarray(alibi.draw_distances(jax.random.key(0), width, m))[0]
  np.testing.assert_array_equal(d[1], unpadded)
  for row, length in zip(d, np.asarray(lengths)):
    assert np.all(np.diff(row[:length]) > 0) and len(set(row)) == width and row.max() < m
  top = np.asarray(jax.vmap(draw)(jax.random.split(jax.random.key(1), 300))[:, 0, n - 1])
  # r_{n-1}, the largest of n - 1 uniform draws from [1, M): mean ~1 + (n-1)/n (M-1),
  # sd of the mean ~3 (the first 3 of 31 draws: ~25).
  assert abs(top.mean() - (1 + (n - 1) / n * (m - 1))) < 12, top.mean()


def test_alibi_slopes_power_of_two_and_the_interleaving_rule():
  np.testing.assert_array_equal(alibi.alibi_slopes(8), 2.0 ** -np.arange(1, 9))
  # Not a power of two: the slopes of the closest power below (4), then every
  # other slope of twice that (8): 2^-1, 2^-3 (Press et al. 2022).
  np.testing.assert_array_equal(alibi.alibi_slopes(6), 2.0 ** -np.array([2, 4, 6, 8, 1, 3]))
  np.testing.assert_allclose(  # float32 rounding of 2^-0.5 etc.
      alibi.alibi_slopes(12), 2.0 ** -np.r_[np.arange(1, 9), np.arange(0.5, 4, 1.0)], rtol=1e-7)


def test_alibi_bias_is_minus_slope_times_distance():
  positions = jnp.array([[0, 1, 5], [3, 4, 6]])
  slopes = alibi.alibi_slopes(2)
  bias = alibi.alibi_bias(positions, positions, slopes)
  chex.assert_shape(bias, (2, 2, 3, 3))
  p = np.asarray(positions)
  expected = -slopes[None, :, None, None] * np.abs(p[:, None, :, None] - p[:, None, None, :])
  np.testing.assert_allclose(bias, expected)


def test_alibi_slopes_need_a_positive_head_count():
  with pytest.raises(ValueError, match=r"num_heads.*0"):
    alibi.alibi_slopes(0)
