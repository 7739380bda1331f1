"""Stick-breaking attention (`bifocal_jax/positions/stickbreaking.py`) against
float64 references written from shawntan/stickbreaking-attention
(`stickbreaking_attention/sb_ref.py` and `tests/test_attn.py`'s `ref_fwd`)."""

import numpy as np
import pytest

import position_checks as checks
from bifocal_jax.positions import stickbreaking


def sigmoid(x):
  return 1 / (1 + np.exp(-x))


def reference_loops(q, k, v, valid, attend_current):
  """Direct loops in float64: A_ij = sigmoid(z_ij) prod_{j<l, l allowed} (1 - sigmoid(z_il)),
  out_i = sum_j A_ij v_j + (1 - sum_j A_ij) v_i."""
  q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
  b_, l_, h_, d = q.shape
  out = np.zeros_like(q)
  for b in range(b_):
    for h in range(h_):
      for i in range(l_):
        def allowed(j, i=i, b=b):
          return (j <= i if attend_current else j < i) and (valid is None or valid[b, j])
        z = np.array([q[b, i, h] @ k[b, j, h] / np.sqrt(d) for j in range(l_)])
        att = np.zeros(l_)
        for j in range(l_):
          if allowed(j):
            att[j] = sigmoid(z[j]) * np.prod([1 - sigmoid(z[l]) for l in range(j + 1, l_)
                                              if allowed(l)])
        out[b, i, h] = att @ v[b, :, h] + (1 - att.sum()) * v[b, i, h]
  return out


def reference_source(q, k, v, attend_current):
  """`sb_ref.stickbreaking` and `ref_fwd`, line by line in numpy (no padding)."""
  q, k, v = (np.asarray(x, np.float64).transpose(0, 2, 1, 3) for x in (q, k, v))
  length = q.shape[2]
  cm = np.tril(np.ones((length, length)), -1)
  mask = np.triu(np.ones((length, length)), 1 if attend_current else 0).astype(bool)
  logits = q @ k.swapaxes(-1, -2) / np.sqrt(q.shape[-1])
  log_z = np.where(mask, -1e5, np.log(sigmoid(logits)))
  log_beta = np.where(mask, 0, np.log(sigmoid(-logits)))
  re_cum_log_beta = np.einsum("bhij,jk->bhik", log_beta, cm)
  att = np.exp(log_z + re_cum_log_beta)
  o, rem = att @ v, 1 - att.sum(-1)
  return (o + rem[..., None] * v).transpose(0, 2, 1, 3)


def make_fn(attend_current=False):
  def fn(tokens, valid, query_chunk):
    return stickbreaking.stickbreaking_attention(tokens["q"], tokens["k"], tokens["v"], None, valid,
                                                 attend_current=attend_current,
                                                 query_chunk=query_chunk)
  return fn


@pytest.fixture
def case():
  rng = np.random.default_rng(3)
  return rng, checks.random_qkv(rng, scale=1.5)


@pytest.mark.parametrize("attend_current", [False, True])
def test_matches_references(case, attend_current):
  _, tokens = case
  fn = make_fn(attend_current)
  got = np.asarray(fn(tokens, None, 4))
  np.testing.assert_allclose(got, reference_source(tokens["q"], tokens["k"], tokens["v"],
                                                   attend_current), atol=2e-5, rtol=2e-5)
  valid = checks.right_padding([13, 9])
  valid[0, 3] = False
  got = np.asarray(fn(tokens, valid, 4))
  want = reference_loops(tokens["q"], tokens["k"], tokens["v"], valid, attend_current)
  np.testing.assert_allclose(got[valid], want[valid], atol=2e-5, rtol=2e-5)


def test_long_sequence_is_stable():
  # 600 keys with gates near 0: the stick's products underflow in linear
  # space, not in log space; the output stays a finite convex combination.
  rng = np.random.default_rng(4)
  tokens = checks.random_qkv(rng, length=600, scale=2.0)
  out = np.asarray(make_fn()(tokens, None, 128))
  assert np.all(np.isfinite(out))
  assert np.abs(out).max() <= np.abs(tokens["v"]).max() + 1e-5


def test_chunked_equals_unchunked(case):
  _, tokens = case
  checks.check_chunked_equals_unchunked(make_fn(), tokens, checks.right_padding([13, 7]))


def test_causal(case):
  _, tokens = case
  checks.check_causal(make_fn(), tokens)
  checks.check_causal(make_fn(attend_current=True), tokens)


def test_gradients_finite(case):
  _, tokens = case
  valid = checks.right_padding([13, 5])
  valid[1, 0] = False
  checks.check_gradients_finite(make_fn(), tokens, valid)


def test_padding(case):
  rng, tokens = case
  checks.check_padding(make_fn(), tokens, checks.right_padding([13, 8]), rng)


def test_encoder_refused(case):
  _, tokens = case
  with pytest.raises(ValueError, match="'stickbreaking' is defined for causal attention only"):
    stickbreaking.stickbreaking_attention(tokens["q"], tokens["k"], tokens["v"], None, None,
                                          causal=False)
