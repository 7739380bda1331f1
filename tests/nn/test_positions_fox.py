"""FoX (`bifocal_jax/nn/positions/fox.py`) against a float64 reference written from
zhixuan-lin/forgetting-transformer (`ops/forgetting_attention.py`'s `test_op`,
`ForgettingAttentionLayer`)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import position_checks as checks
from bifocal_jax.nn.positions import fox


def reference(q, k, v, fgate_logit, valid):
  """Direct loops in float64: weight_ij = exp(q_i.k_j / sqrt(d)) * prod_{j<s<=i} f_s,
  the forget gates f = sigmoid(logit) as a product (the source's cumsum of
  logs, written out), padded tokens removed (their gate is 1)."""
  q, k, v, fgate_logit = (np.asarray(x, np.float64) for x in (q, k, v, fgate_logit))
  b_, l_, h_, d = q.shape
  f = 1 / (1 + np.exp(-fgate_logit))
  out = np.zeros_like(q)
  for b in range(b_):
    for h in range(h_):
      for i in range(l_):
        weights = np.zeros(l_)
        for j in range(i + 1):
          if valid is not None and not valid[b, j]:
            continue
          decay = np.prod([f[b, s, h] for s in range(j + 1, i + 1)
                           if valid is None or valid[b, s]])
          weights[j] = np.exp(q[b, i, h] @ k[b, j, h] / np.sqrt(d)) * decay
        if weights.sum() > 0:
          out[b, i, h] = (weights / weights.sum()) @ v[b, :, h]
  return out


def fn(tokens, valid, query_chunk):
  return fox.fox_attention(tokens["q"], tokens["k"], tokens["v"], None, valid,
                           log_fgate_BxLxH=jax.nn.log_sigmoid(tokens["fgate_logit"]), causal=True,
                           query_chunk=query_chunk)


@pytest.fixture
def case():
  rng = np.random.default_rng(1)
  tokens = checks.random_qkv(rng)
  tokens["fgate_logit"] = rng.uniform(-3, 3, (checks.B, checks.L, checks.H)).astype(np.float32)
  return rng, tokens


def test_matches_reference(case):
  _, tokens = case
  valid = checks.right_padding([13, 9])
  valid[0, 4] = False  # padding inside a row too: its gate must not decay the others
  got = fn(tokens, valid, 4)
  want = reference(tokens["q"], tokens["k"], tokens["v"], tokens["fgate_logit"], valid)
  np.testing.assert_allclose(np.asarray(got)[valid], want[valid], atol=2e-5, rtol=2e-5)


def test_strong_forgetting_is_stable():
  # log f = -30 per token: the decays underflow in linear space (exp(-30 * 300))
  # but stay finite in log space; each query then attends to itself alone.
  rng = np.random.default_rng(2)
  tokens = checks.random_qkv(rng, length=300)
  tokens["fgate_logit"] = np.full((checks.B, 300, checks.H), -30.0, np.float32)
  out = np.asarray(fn(tokens, None, 64))
  np.testing.assert_allclose(out, tokens["v"], atol=1e-5)


def test_chunked_equals_unchunked(case):
  _, tokens = case
  checks.check_chunked_equals_unchunked(fn, tokens, checks.right_padding([13, 7]))


def test_causal(case):
  _, tokens = case
  checks.check_causal(fn, tokens)


def test_gradients_finite(case):
  _, tokens = case
  valid = checks.right_padding([13, 5])
  valid[1, 0] = False
  checks.check_gradients_finite(fn, tokens, valid)


def test_padding(case):
  rng, tokens = case
  checks.check_padding(fn, tokens, checks.right_padding([13, 8]), rng)


def test_encoder_refused(case):
  _, tokens = case
  with pytest.raises(ValueError, match="'fox' is defined for causal attention only"):
    fox.fox_attention(tokens["q"], tokens["k"], tokens["v"], None, None,
                      log_fgate_BxLxH=tokens["fgate_logit"], causal=False)


def test_module_initialisation_and_gate():
  layer = fox.FoX(d_model=32, num_heads=4, rngs=nnx.Rngs(0))
  weight = np.asarray(layer.fgate_DxH[...])
  assert weight.shape == (32, 4) and abs(weight.std() - 0.02) < 0.005
  assert not np.any(np.asarray(layer.fgate_bias_H[...]))
  x = jnp.asarray(np.random.default_rng(0).standard_normal((1, 3, 32)), jnp.float32)
  want = np.log(1 / (1 + np.exp(-(np.asarray(x, np.float64) @ weight))))
  np.testing.assert_allclose(np.asarray(layer.log_fgate(x)), want, rtol=1e-5, atol=1e-6)
