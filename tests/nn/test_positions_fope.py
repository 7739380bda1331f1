"""FoPE (`bifocal_jax/nn/positions/fope.py`) against a float64 reference written from
yiju-zhao/Fourier-Position-Embedding `olmo/model.py` (`FourierEmbedding`)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import helpers
import position_checks as checks
from bifocal_jax.training import state as state_lib
from bifocal_jax import tasks
from bifocal_jax.nn.positions import fope


MAX_LEN = 100


def reference_frequencies(head_dim, base, max_len):
  inv_freq = 1.0 / base**(np.arange(0, head_dim, 2) / head_dim)
  inv_freq[inv_freq < 2 * np.pi / max_len] = 0.0  # rope_clamp_floor_freq, to zero
  return inv_freq[inv_freq != 0.0]  # fourier_ignore_zero


def reference(q, k, v, positions, freqs, sin_coef, cos_coef, valid, causal):
  """Loops in float64: per token and head, the Fourier cos/sin of each output
  pair (padded with 1), `t * cos + rotate_half(t) * sin`, then softmax attention."""
  q, k, v, sin_coef, cos_coef = (np.asarray(x, np.float64) for x in (q, k, v, sin_coef, cos_coef))
  b_, l_, h_, d = q.shape
  half = d // 2

  def transform(x, t, h):
    out = np.empty(d)
    for p in range(half):
      if p < cos_coef.shape[-1]:
        c = sum(np.cos(t * f) * cos_coef[h, n, p] for n, f in enumerate(freqs))
        s = sum(np.sin(t * f) * sin_coef[h, n, p] for n, f in enumerate(freqs))
      else:
        c = s = 1.0
      out[p] = x[p] * c - x[p + half] * s
      out[p + half] = x[p + half] * c + x[p] * s
    return out

  out = np.zeros_like(q)
  for b in range(b_):
    for h in range(h_):
      qs = [transform(q[b, i, h], positions[b % positions.shape[0], i], h) for i in range(l_)]
      ks = [transform(k[b, j, h], positions[b % positions.shape[0], j], h) for j in range(l_)]
      for i in range(l_):
        mask = np.array([(j <= i or not causal) and (valid is None or valid[b, j])
                         for j in range(l_)])
        logits = np.where(mask, [qs[i] @ ks[j] / np.sqrt(d) for j in range(l_)], -np.inf)
        if mask.any():
          p_ = np.exp(logits - logits.max())
          out[b, i, h] = (p_ / p_.sum()) @ v[b, :, h]
  return out


@pytest.fixture
def case():
  rng = np.random.default_rng(8)
  tokens = checks.random_qkv(rng, head_dim=16)
  layer = fope.FoPE(num_heads=checks.H, head_dim=16, max_sequence_length=MAX_LEN, init_gain=0.6,
                    rngs=nnx.Rngs(0))
  return rng, tokens, layer


def make_fn(layer, causal=True, positions=None):
  def fn(tokens, valid, query_chunk):
    pos = jnp.arange(tokens["q"].shape[1])[None] if positions is None else positions
    return layer.attend(None, tokens["q"], tokens["k"], tokens["v"], pos, valid, causal=causal,
                 query_chunk=query_chunk)
  return fn


def test_frequencies_and_shapes():
  freqs = fope.fope_frequencies(16, max_sequence_length=MAX_LEN)
  np.testing.assert_allclose(freqs, reference_frequencies(16, 10_000.0, MAX_LEN), rtol=1e-6)
  assert len(freqs) == 3  # 1, 0.316, 0.1 >= 2 pi / 100
  layer = fope.FoPE(num_heads=4, head_dim=32, max_sequence_length=1000, rngs=nnx.Rngs(0))
  assert layer.frequencies[...].shape == (9,)
  assert layer.sin_coef_HxPxO[...].shape == (4, 9, 8)  # out = min(kept, head_dim / 4)
  assert not isinstance(layer.sin_coef_HxPxO, nnx.Param)  # fixed, as fourier_learnable=False
  assert isinstance(fope.FoPE(num_heads=4, head_dim=32, max_sequence_length=1000, learnable=True,
                              rngs=nnx.Rngs(0)).cos_coef_HxPxO, nnx.Param)


def test_initialisation_is_xavier_plus_step_eye():
  coef = np.asarray(fope.eye_xavier_normal(jax.random.key(0), 64, 9, 8, 0.3))
  eye = np.zeros((9, 8))
  for i, row in enumerate([0, 2, 4, 6, 8]):  # step ceil(9 / 8) = 2, rows < 9 only
    eye[row, i] = 1.0
  noise = coef - eye
  std = 0.3 * np.sqrt(2 / (9 * 8 + 64 * 8))  # torch fans of [64, 9, 8]
  assert abs(noise.std() / std - 1) < 0.05
  assert abs(noise.mean()) < 3 * std / np.sqrt(noise.size)
  square = np.asarray(fope.eye_xavier_normal(jax.random.key(1), 2, 3, 3, 0.3))
  assert np.all(np.abs(np.diagonal(square, axis1=1, axis2=2) - 1) < 0.5)


@pytest.mark.parametrize("causal", [True, False])
def test_matches_reference(case, causal):
  _, tokens, layer = case
  valid = checks.right_padding([13, 9])
  positions = np.stack([np.arange(13), np.arange(13) * 3 + 5])  # arbitrary positions too
  got = make_fn(layer, causal, jnp.asarray(positions))(tokens, valid, 1024)
  want = reference(tokens["q"], tokens["k"], tokens["v"], positions,
                   np.asarray(layer.frequencies[...], np.float64), layer.sin_coef_HxPxO[...],
                   layer.cos_coef_HxPxO[...], valid, causal)
  np.testing.assert_allclose(np.asarray(got)[valid], want[valid], atol=2e-5, rtol=2e-5)


def test_chunked_equals_unchunked(case):
  _, tokens, layer = case
  checks.check_chunked_equals_unchunked(make_fn(layer), tokens, checks.right_padding([13, 7]))


def test_causal(case):
  _, tokens, layer = case
  checks.check_causal(make_fn(layer), tokens)


def test_gradients_finite(case):
  _, tokens, layer = case
  checks.check_gradients_finite(make_fn(layer), tokens, checks.right_padding([13, 5]))
  grads = nnx.grad(lambda m: jnp.sum(make_fn(m)(tokens, None, 4)**2))(
      fope.FoPE(num_heads=checks.H, head_dim=16, max_sequence_length=MAX_LEN, learnable=True,
                rngs=nnx.Rngs(0)))
  g = np.asarray(grads.sin_coef_HxPxO[...])
  assert np.all(np.isfinite(g)) and np.any(g != 0)


@pytest.mark.parametrize("causal", [True, False])
def test_padding(case, causal):
  rng, tokens, layer = case
  checks.check_padding(make_fn(layer, causal), tokens, checks.right_padding([13, 8]), rng)


def test_build_model_sets_the_floor_from_the_training_context():
  config = helpers.tiny_config({"position.kind": "fope"})
  task = tasks.get_task(config.task)
  model = nnx.eval_shape(lambda: state_lib.build_model(config, task))
  want = fope.fope_frequencies(8, max_sequence_length=task.max_sequence_length("train"))
  assert model.blocks[0].attn.position.frequencies.shape == want.shape
