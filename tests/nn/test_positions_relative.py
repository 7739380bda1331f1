"""Transformer-XL relative encodings (`bifocal_jax/nn/positions/relative.py`)
against a float64 numpy reference and the benchmark's own Haiku code
(`tests/vendor/`), with the same parameters."""

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from bifocal_jax.nn import kernels
from bifocal_jax.nn.positions import absolute
from bifocal_jax.nn.positions import relative
from vendor import chomsky_positional_encodings as chomsky
from vendor import randomized_positional_encodings as randomized

B, L, H, K = 2, 6, 2, 4
NOISE = 20  # noise_max_length


def qk(seed=0):
  rng = np.random.default_rng(seed)
  return (jnp.asarray(rng.standard_normal((B, L, H, K)), jnp.float32) for _ in range(2))


def their_logits(fn, q, k, **kwargs):
  """Their logits `(b, h, t, T)` (before 1/sqrt(d)) and their parameters."""
  f = hk.transform(lambda q, k: fn(q, k, **kwargs))
  params = f.init(jax.random.key(1), q, k)
  return np.asarray(f.apply(params, jax.random.key(2), q, k)), params


def ours(params, *, randomized_=False, released=False):
  """Our layer module holding their parameters."""
  module = relative.RelativeBias(H, K, max_time=10_000.0, randomized=randomized_,
                                 released_lookup=released, max_position=NOISE, rngs=nnx.Rngs(0))
  flat = {name: value for scope in params.values() for name, value in scope.items()}
  module.u_HxK[...] = flat["relpos_contentbias"]
  module.v_HxK[...] = flat["relpos_relativebias"]
  module.w_r[...] = flat["w"]
  return module


def our_logits(module, q, k, distances=None):
  """`q.k / sqrt(K) + bias`, heads-major, as `attend` adds them."""
  qh, kh = (jnp.swapaxes(x, 1, 2) for x in (q, k))
  pos = jnp.arange(L)[None]
  bias = module.bias_fn(causal=False, distances_BxL=distances)(qh, kh, pos, pos)
  return np.asarray(jnp.einsum("bhqk,bhsk->bhqs", qh, kh) * K**-0.5 + bias)


def reference(q, k, u, v, w, rel_value):
  """float64 Transformer-XL: ((q_i + u).k_j + (q_i + v).W s(rel_value(i, j))) / sqrt(K)."""
  q, k, u, v, w = (np.asarray(x, np.float64) for x in (q, k, u, v, w))
  length = q.shape[1]
  hidden = H * K
  inv = 10_000.0**(-np.arange(0, hidden, 2) / hidden)
  out = np.zeros((B, H, length, length))
  for i in range(length):
    for j in range(length):
      t = rel_value(i, j) * inv
      r = (np.concatenate([np.sin(t), np.cos(t)]) @ w).reshape(H, K)
      out[:, :, i, j] = (np.einsum("bhk,bhk->bh", q[:, i] + u, k[:, j]) +
                         np.einsum("bhk,hk->bh", q[:, i] + v, r)) / np.sqrt(K)
  return out


@pytest.mark.parametrize("queries, width, keys", [(5, 5, 5), (5, 6, 5), (4, 9, 6), (4, 10, 6),
                                                 (1, 3, 3)])
def test_relative_shift_reads_each_rows_distances(queries, width, keys):
  # W = Q = S (a causal diagonal: padded first), with a spare column, the
  # Q + S - 1 distances of a block, with a spare one, and one query.
  x = np.random.default_rng(0).standard_normal((2, queries, width)).astype(np.float32)
  y = np.asarray(relative.relative_shift(jnp.asarray(x), keys))
  assert y.shape == (2, queries, keys)
  for i in range(queries):
    for j in range(keys):
      if queries - 1 - i + j < width and (width > queries or j <= i):
        assert y[:, i, j].tolist() == x[:, i, queries - 1 - i + j].tolist(), (i, j)


@pytest.mark.parametrize("spare", [0, 1])
def test_per_head_and_batched_position_products_agree(spare):
  rng = np.random.default_rng(3)
  q, k = (jnp.asarray(rng.standard_normal((B, H, L, K)), jnp.float32) for _ in range(2))
  r = jnp.asarray(rng.standard_normal((2 * L - 1 + spare, H, K)), jnp.float32)
  u, v = (jnp.asarray(rng.standard_normal((H, K)), jnp.float32) for _ in range(2))

  def loss(per_head):
    return lambda *a: jnp.sum(jnp.sin(relative.relative_logits(*a, per_head=per_head)))

  for per_head in (True, False):
    np.testing.assert_allclose(relative.relative_logits(q, k, r, u, v, per_head=per_head),
                               relative.relative_logits(q, k, r[:2 * L - 1], u, v, per_head=True),
                               rtol=1e-6, atol=1e-6)
  grads = [jax.grad(loss(p), argnums=(0, 1, 2, 3, 4))(q, k, r, u, v) for p in (True, False)]
  for a, b in zip(*grads):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_per_sequence_encodings_are_each_rows_shared_ones():
  """`[B, W, H, K]` encodings (each sequence its own distances) give row `b`
  what the shared `[W, H, K]` encodings of row `b` give it, per head or batched."""
  rng = np.random.default_rng(4)
  q, k = (jnp.asarray(rng.standard_normal((B, H, L, K)), jnp.float32) for _ in range(2))
  r = jnp.asarray(rng.standard_normal((B, 2 * L, H, K)), jnp.float32)
  u, v = (jnp.asarray(rng.standard_normal((H, K)), jnp.float32) for _ in range(2))
  for per_head in (True, False):
    got = relative.relative_logits(q, k, r, u, v, per_head=per_head)
    for b in range(B):
      np.testing.assert_allclose(got[b], relative.relative_logits(q, k, r[b], u, v)[b],
                                 rtol=1e-6, atol=1e-6)
  assert np.max(np.abs(got[1] - relative.relative_logits(q, k, r[0], u, v)[1])) > 1e-3


def test_relative_equals_the_chomsky_benchmark():
  q, k = qk()
  theirs, params = their_logits(chomsky.compute_attention_with_relative_encodings, q, k)
  module = ours(params)
  np.testing.assert_allclose(our_logits(module, q, k), theirs * K**-0.5, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(
      our_logits(module, q, k),
      reference(q, k, module.u_HxK[...], module.v_HxK[...], module.w_r[...], lambda i, j: i - j),
      rtol=1e-5, atol=1e-5)


def test_causal_relative_reads_i_minus_j():
  q, k = qk(1)
  module = relative.RelativeBias(H, K, max_time=10_000.0, rngs=nnx.Rngs(3))
  qh, kh = (jnp.swapaxes(x, 1, 2) for x in (q, k))
  pos = jnp.arange(L)[None]
  got = np.asarray(jnp.einsum("bhqk,bhsk->bhqs", qh, kh) * K**-0.5 +
                   module.bias_fn(causal=True)(qh, kh, pos, pos))
  want = reference(q, k, module.u_HxK[...], module.v_HxK[...], module.w_r[...], lambda i, j: i - j)
  lower = np.tril(np.ones((L, L), bool))
  np.testing.assert_allclose(got[..., lower], want[..., lower], rtol=1e-5, atol=1e-5)
  # The causal diagonal form computes only the distances L-1 .. 0 the mask keeps.
  diagonal = module.bias_fn(causal=True).causal_diagonal
  got = np.asarray(jnp.einsum("bhqk,bhsk->bhqs", qh, kh) * K**-0.5 +
                   diagonal(qh, kh, pos, pos))
  np.testing.assert_allclose(got[..., lower], want[..., lower], rtol=1e-5, atol=1e-5)


def test_causal_attention_with_the_diagonal_form_equals_the_full_distances():
  """`attend` uses the diagonal form on the whole causal path and on the
  diagonal blocks of the blocked path: same outputs and gradients as the
  form over all `2L - 1` distances."""
  length = 21
  module = relative.RelativeBias(H, K, max_time=10_000.0, rngs=nnx.Rngs(3))
  rng = np.random.default_rng(2)
  q, k, v = (jnp.asarray(rng.standard_normal((B, length, H, K)), jnp.float32) for _ in range(3))
  pos = jnp.arange(length)[None]
  with_diagonal = module.bias_fn(causal=True)
  assert kernels.diagonal_bias_fn(with_diagonal) is not with_diagonal
  full_only = lambda *args: with_diagonal(*args)  # no causal_diagonal attribute

  def loss(fn, chunk):
    return lambda q, k, v: jnp.sum(
        jnp.sin(kernels.attend(q, k, v, pos, causal=True, bias_fn=fn, query_chunk=chunk)))

  for chunk in (1024, 8):  # whole, and blocks of 8 (two diagonal blocks, padded)
    want = jax.value_and_grad(loss(full_only, chunk), argnums=(0, 1, 2))(q, k, v)
    got = jax.value_and_grad(loss(with_diagonal, chunk), argnums=(0, 1, 2))(q, k, v)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
      np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-5)


def _draws(seed=4):
  rng = np.random.default_rng(seed)
  return np.concatenate([[0], np.sort(rng.choice(np.arange(1, NOISE), L - 1, replace=False))])


def _patch_choice(monkeypatch, values):
  shuffled = np.random.default_rng(0).permutation(np.asarray(values))

  class Random:
    choice = staticmethod(lambda *a, shape, **kw: jnp.asarray(shuffled[:shape[0]]))

  monkeypatch.setattr(randomized, "jrandom", Random)


def test_randomized_relative_released_equals_their_released_code(monkeypatch):
  """Issue #2 behaviour, as released: the table lookup clamped past its end."""
  q, k = qk(2)
  r = _draws()
  _patch_choice(monkeypatch, r[1:])
  theirs, params = their_logits(randomized.compute_attention_with_noisy_relative_encodings, q, k,
                                noise_max_length=NOISE)
  got = our_logits(ours(params, randomized_=True, released=True), q, k, jnp.asarray(r))
  np.testing.assert_allclose(got, theirs * K**-0.5, rtol=1e-5, atol=1e-5)


def test_randomized_relative_fixed_equals_their_code_with_the_fixed_table(monkeypatch):
  """The fix of issue #2: the sin/cos table covers [-noise_max_length, noise_max_length)."""
  q, k = qk(3)
  r = _draws(5)
  _patch_choice(monkeypatch, r[1:])
  original = randomized.sinusoid_position_encoding
  monkeypatch.setattr(randomized, "sinusoid_position_encoding",
                      lambda **kw: original(**kw, add_negative_side=True))
  theirs, params = their_logits(randomized.compute_attention_with_noisy_relative_encodings, q, k,
                                noise_max_length=NOISE)
  module = ours(params, randomized_=True)
  got = our_logits(module, q, k, jnp.asarray(r))
  np.testing.assert_allclose(got, theirs * K**-0.5, rtol=1e-5, atol=1e-5)
  d_value = lambda i, j: np.sign(j - i) * r[abs(j - i)]  # their d = j - i
  np.testing.assert_allclose(
      got, reference(q, k, module.u_HxK[...], module.v_HxK[...], module.w_r[...], d_value),
      rtol=1e-5, atol=1e-5)


def test_in_order_randomized_relative_is_relative_with_the_sign_of_their_repository():
  module = relative.RelativeBias(H, K, max_time=10_000.0, randomized=True, rngs=nnx.Rngs(0))
  q, k = qk(4)
  want = reference(q, k, module.u_HxK[...], module.v_HxK[...], module.w_r[...],
                   lambda i, j: j - i)
  np.testing.assert_allclose(our_logits(module, q, k), want, rtol=1e-5, atol=1e-5)


def test_initialisation_scales():
  module = relative.RelativeBias(8, 8, max_time=10_000.0, rngs=nnx.Rngs(0))
  assert abs(float(np.std(module.u_HxK[...])) - 0.02) < 0.006
  w = np.asarray(module.w_r[...])
  assert np.abs(w).max() <= 2.0 / 8 + 1e-6  # truncated at 2 stddev, stddev 1/sqrt(64)
  np.testing.assert_allclose(absolute.sinusoid(jnp.arange(3), 4)[1],
                             [np.sin(1), np.sin(0.01), np.cos(1), np.cos(0.01)], rtol=1e-6)


@pytest.mark.parametrize("kind", ["relative", "randomized_relative"])
def test_parameters_are_per_layer(kind, position_config):
  from bifocal_jax.nn import model as model_lib
  import ml_collections
  cfg = ml_collections.ConfigDict(dict(num_layers=2, d_model=16, num_heads=2, head_dim=-1,
                                       mlp_dim=16, dtype="float32"))
  model = model_lib.Transformer(cfg, position_config(kind), vocab_size=8, causal=False,
                                rngs=nnx.Rngs(0))
  a, b = (blk.attn.position.u_HxK[...] for blk in model.blocks)
  assert not np.allclose(a, b)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("randomized_", [False, True])
def test_blocked_attention_reads_the_distances_of_each_block(causal, randomized_):
  """Past `query_chunk` the keys come in blocks (`kernels._blocked_attention`):
  each block must see its own distances, up to `L - 1`, not those within a
  block (the reference: the whole `[L, L]` logits at once). 37 tokens in
  blocks of 8 also pads the last block."""
  if causal and randomized_:
    pytest.skip("randomized_relative is encoder-only")
  length = 37
  module = relative.RelativeBias(H, K, max_time=10_000.0, randomized=randomized_,
                                 max_position=200, rngs=nnx.Rngs(3))
  rng = np.random.default_rng(5)
  q, k, v = (jnp.asarray(rng.standard_normal((B, length, H, K)), jnp.float32) for _ in range(3))
  pos = jnp.arange(length)[None]
  distances = None
  if randomized_:
    draws = np.sort(rng.choice(np.arange(1, 200), length - 1, replace=False))
    distances = jnp.asarray(np.concatenate([[0], draws]), jnp.float32)
  bias_fn = module.bias_fn(causal=causal, distances_BxL=distances)

  def run(chunk):
    return kernels.attend(q, k, v, pos, causal=causal, bias_fn=bias_fn, query_chunk=chunk)

  np.testing.assert_allclose(np.asarray(run(8)), np.asarray(run(1024)), atol=2e-5, rtol=1e-5)
  # The whole path's logits against the float64 reference (distance i - j).
  rel = ((lambda i, j: np.sign(j - i) * np.asarray(distances)[abs(j - i)]) if randomized_ else
         (lambda i, j: i - j))
  qh, kh = (jnp.swapaxes(x, 1, 2) for x in (q, k))
  got = np.einsum("bhqk,bhsk->bhqs", qh, kh) * K**-0.5 + np.asarray(bias_fn(qh, kh, pos, pos))
  want = reference(q, k, module.u_HxK[...], module.v_HxK[...], module.w_r[...], rel)
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
