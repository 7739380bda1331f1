"""PaTH attention (`bifocal_jax/nn/positions/path.py`) against float64 references
written from fla-org/flash-linear-attention (`fla/ops/path_attn/naive.py`,
`fla/layers/path_attn.py`)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import position_checks as checks
from bifocal_jax.nn.positions import path


def reference_loops(q, k, v, w, beta, valid):
  """Direct loops in float64: score_ij = q_i . (H_i ... H_{j+1} k_j), H_s = I - beta_s w_s w_s^T
  (the key carried forward one reflection at a time, as the source's decoding
  step `rank_one_update` does), a padded token's reflection removed."""
  q, k, v, w, beta = (np.asarray(x, np.float64) for x in (q, k, v, w, beta))
  b_, l_, h_, d = q.shape
  out = np.zeros_like(q)
  for b in range(b_):
    for h in range(h_):
      for i in range(l_):
        logits = np.full(l_, -np.inf)
        for j in range(i + 1):
          if valid is not None and not valid[b, j]:
            continue
          key = k[b, j, h].copy()
          for s in range(j + 1, i + 1):
            if valid is None or valid[b, s]:
              key = key - beta[b, s, h] * (w[b, s, h] @ key) * w[b, s, h]
          logits[j] = q[b, i, h] @ key / np.sqrt(d)
        if np.isfinite(logits).any():
          p = np.exp(logits - logits.max())
          out[b, i, h] = (p / p.sum()) @ v[b, :, h]
  return out


def reference_naive(q, k, v, w, beta, chunk_size):
  """`naive_path_attn` (g = 0) line by line in numpy."""
  q, k, v, w = (np.asarray(x, np.float64).transpose(0, 2, 1, 3) for x in (q, k, v, w))
  beta = np.asarray(beta, np.float64).transpose(0, 2, 1)
  b, h, l, d = q.shape
  bt = chunk_size
  if l % bt:
    pad = bt - l % bt
    q, k, w = (np.pad(x, ((0, 0), (0, 0), (0, pad), (0, 0))) for x in (q, k, w))
    beta = np.pad(beta, ((0, 0), (0, 0), (0, pad)))
  seq_len = q.shape[2]
  n = seq_len // bt

  def chunks(x):
    return x.reshape(b, h, n, bt, d)

  w_beta = w * beta[..., None]
  q, k, w, w_beta = map(chunks, (q, k, w, w_beta))
  mask = np.triu(np.ones((bt, bt), bool), 0)
  t_mat = -np.where(mask, 0, w_beta @ w.swapaxes(-1, -2))
  for i in range(1, bt):
    t_mat[..., i, :i] = t_mat[..., i, :i] + (t_mat[..., i, :, None] * t_mat[..., :, :i]).sum(-2)
  t_mat = t_mat + np.eye(bt)
  twbk = t_mat @ np.where(mask, 0, w_beta @ k.swapaxes(-1, -2))
  qw = np.tril(q @ w.swapaxes(-1, -2))
  twb = t_mat @ w_beta
  a_local = np.tril(q @ k.swapaxes(-1, -2)) - qw @ twbk
  q = q - qw @ twb
  k = k - twbk.swapaxes(-1, -2) @ w
  h_mat = w.swapaxes(-1, -2) @ twb
  a = np.zeros((b, h, seq_len, seq_len))
  q, k = (x.reshape(b, h, seq_len, d) for x in (q, k))
  for i in range(0, seq_len, bt):
    q_i = q[:, :, i:i + bt].copy()
    for j in range(i - bt, -bt, -bt):
      a[:, :, i:i + bt, j:j + bt] = q_i @ k[:, :, j:j + bt].swapaxes(-1, -2)
      q_i = q_i - q_i @ h_mat[:, :, j // bt]
  for i in range(n):
    a[:, :, i * bt:(i + 1) * bt, i * bt:(i + 1) * bt] = a_local[:, :, i]
  a = np.where(np.tril(np.ones((seq_len, seq_len), bool)), a, -np.inf)[:, :, :l, :l]
  a = a / np.sqrt(d)
  p = np.exp(a - a.max(-1, keepdims=True))
  return ((p / p.sum(-1, keepdims=True)) @ v).transpose(0, 2, 1, 3)


def unit(x):
  return x / np.linalg.norm(x, axis=-1, keepdims=True)


def make_fn(block_size=4):
  def fn(tokens, valid, query_chunk):
    w = tokens["w"] * jax.lax.rsqrt(jnp.sum(tokens["w"]**2, -1, keepdims=True))
    return path.path_attention(tokens["q"], tokens["k"], tokens["v"], None, valid, w_BxLxHxK=w,
                               beta_BxLxH=2 * jax.nn.sigmoid(tokens["beta_logit"]),
                               query_chunk=query_chunk, block_size=block_size)
  return fn


@pytest.fixture
def case():
  rng = np.random.default_rng(5)
  tokens = checks.random_qkv(rng)
  tokens["w"] = rng.standard_normal(tokens["q"].shape).astype(np.float32)
  tokens["beta_logit"] = rng.uniform(-3, 3, (checks.B, checks.L, checks.H)).astype(np.float32)
  return rng, tokens


def inputs64(tokens):
  beta = 2 / (1 + np.exp(-np.asarray(tokens["beta_logit"], np.float64)))
  return (tokens["q"], tokens["k"], tokens["v"], unit(np.asarray(tokens["w"], np.float64)), beta)


@pytest.mark.parametrize("block_size", [4, 5, 64])
def test_matches_references(case, block_size):
  _, tokens = case
  got = np.asarray(make_fn(block_size)(tokens, None, 1024))
  np.testing.assert_allclose(got, reference_loops(*inputs64(tokens), None), atol=2e-5, rtol=2e-5)
  np.testing.assert_allclose(got, reference_naive(*inputs64(tokens), chunk_size=4), atol=2e-5,
                             rtol=2e-5)


def test_padding_matches_reference(case):
  _, tokens = case
  valid = checks.right_padding([13, 9])
  valid[0, 5] = False  # inside a row: its reflection must be the identity
  got = np.asarray(make_fn()(tokens, valid, 8))
  want = reference_loops(*inputs64(tokens), valid)
  np.testing.assert_allclose(got[valid], want[valid], atol=2e-5, rtol=2e-5)


def test_chunked_equals_unchunked(case):
  _, tokens = case
  checks.check_chunked_equals_unchunked(make_fn(), tokens, checks.right_padding([13, 7]))
  checks.check_chunked_equals_unchunked(make_fn(), tokens, None, chunk=5)  # rounded up to blocks


def test_causal(case):
  _, tokens = case
  checks.check_causal(make_fn(), tokens)


def test_gradients_finite(case):
  _, tokens = case
  valid = checks.right_padding([13, 5])
  valid[1, 0] = False
  checks.check_gradients_finite(make_fn(), tokens, valid)


def test_padding(case):
  rng, tokens = case
  checks.check_padding(make_fn(), tokens, checks.right_padding([13, 8]), rng)


def test_long_sequence_is_stable():
  # 700 tokens, beta near 2 (reflections near -1 eigenvalue): the products stay
  # orthogonal-like and the output finite; blocks and chunks agree.
  rng = np.random.default_rng(6)
  tokens = checks.random_qkv(rng, length=700, heads=1)
  tokens["w"] = rng.standard_normal(tokens["q"].shape).astype(np.float32)
  tokens["beta_logit"] = np.full((checks.B, 700, 1), 6.0, np.float32)
  fn = make_fn(block_size=64)
  whole, chunked = np.asarray(fn(tokens, None, 1024)), np.asarray(fn(tokens, None, 128))
  assert np.all(np.isfinite(whole))
  np.testing.assert_allclose(chunked, whole, atol=1e-5)


def test_encoder_refused(case):
  _, tokens = case
  with pytest.raises(ValueError, match="'path' is defined for causal attention only"):
    path.path_attention(tokens["q"], tokens["k"], tokens["v"], None, None, w_BxLxHxK=tokens["w"],
                        beta_BxLxH=tokens["beta_logit"], causal=False)


def test_short_convolution_is_torch_conv1d():
  # PyTorch Conv1d(groups=C, padding=W-1) keeps the first L outputs:
  # y[t, c] = sum_m weight[c, 0, m] * x_padded[t + m, c].
  rng = np.random.default_rng(7)
  x = rng.standard_normal((2, 6, 3))
  weight = rng.standard_normal((3, 3))  # [width, channels]
  padded = np.pad(x, ((0, 0), (2, 2), (0, 0)))
  want = np.stack([sum(weight[m] * padded[:, t + m] for m in range(3)) for t in range(6)], 1)
  want = want / (1 + np.exp(-want))
  got = path.short_convolution(jnp.asarray(x, jnp.float32), jnp.asarray(weight, jnp.float32))
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-6)


def test_module_reflections():
  layer = path.PaTH(d_model=32, num_heads=4, head_dim=8, rngs=nnx.Rngs(0))
  assert layer.w_down_DxR[...].shape == (32, path.LOW_RANK)
  assert abs(float(np.asarray(layer.beta_DxH[...]).std()) - 0.02) < 0.005
  x = jnp.asarray(np.random.default_rng(0).standard_normal((2, 5, 32)), jnp.float32)
  w, beta = layer.reflections(x)
  assert w.shape == (2, 5, 4, 8) and beta.shape == (2, 5, 4)
  # numpy: low-rank projection, causal conv of width 3, silu, l2norm with eps
  # inside the root (at N(0, 0.02) initialisation |w| is far below 1, as in the source).
  params = {name: np.asarray(getattr(layer, name)[...], np.float64)
            for name in ("w_down_DxR", "w_up_RxF", "w_conv_WxF", "beta_DxH", "beta_bias_H")}
  x64 = np.asarray(x, np.float64)
  proj = np.pad(x64 @ params["w_down_DxR"] @ params["w_up_RxF"], ((0, 0), (2, 0), (0, 0)))
  conv = sum(params["w_conv_WxF"][m] * proj[:, m:m + 5] for m in range(3))
  conv = (conv / (1 + np.exp(-conv))).reshape(2, 5, 4, 8)
  want_w = conv / np.sqrt((conv**2).sum(-1, keepdims=True) + 1e-6)
  np.testing.assert_allclose(np.asarray(w), want_w, rtol=1e-4, atol=1e-7)
  want_beta = 2 / (1 + np.exp(-(x64 @ params["beta_DxH"] + params["beta_bias_H"])))
  np.testing.assert_allclose(np.asarray(beta), want_beta, rtol=1e-5)
  # causal: the convolution sees no later token
  w_cut, _ = layer.reflections(x[:, :3])
  np.testing.assert_allclose(np.asarray(w_cut), np.asarray(w[:, :3]), atol=1e-6)
