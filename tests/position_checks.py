"""Checks shared by the data-dependent attention tests (`tests/test_positions_*.py`).

Each scheme is given as `fn(tokens, valid_BxL, query_chunk) -> [B, L, H, K]`,
where `tokens` is a dict of per-token float arrays `[B, L, ...]` (queries,
keys, values, and the scheme's own per-token inputs such as gates): the
checks differentiate through every one of them.
"""

import jax
import jax.numpy as jnp
import numpy as np

B, L, H, K = 2, 13, 2, 8


def random_qkv(rng: np.random.Generator, *, batch=B, length=L, heads=H, head_dim=K, scale=1.0):
  return {name: (scale * rng.standard_normal((batch, length, heads, head_dim))).astype(np.float32)
          for name in ("q", "k", "v")}


def right_padding(lengths, length=L):
  return np.arange(length)[None, :] < np.asarray(lengths)[:, None]


def check_chunked_equals_unchunked(fn, tokens, valid, *, chunk=4, atol=1e-6):
  whole = fn(tokens, valid, 1024)
  chunked = fn(tokens, valid, chunk)
  np.testing.assert_allclose(np.asarray(chunked), np.asarray(whole), atol=atol, rtol=1e-5)


def check_causal(fn, tokens, *, query=None):
  """No gradient reaches query `t`'s output from any token after `t`."""
  length = next(iter(tokens.values())).shape[1]
  t = length // 2 if query is None else query
  grads = jax.grad(lambda toks: jnp.sum(fn(toks, None, 1024)[:, t]**2))(tokens)
  for name, g in grads.items():
    g = np.asarray(g)
    assert np.all(np.isfinite(g)), name
    assert np.all(g[:, t + 1:] == 0), f"{name}: gradient from tokens after {t}"
    assert np.any(g[:, :t + 1] != 0), f"{name}: no gradient at all (the check cannot fail)"


def check_gradients_finite(fn, tokens, valid, *, query_chunk=4):
  """Finite gradients, padding (and fully masked rows) included, chunked."""
  grads = jax.grad(lambda toks: jnp.sum(jnp.sin(fn(toks, valid, query_chunk))))(tokens)
  for name, g in grads.items():
    assert np.all(np.isfinite(np.asarray(g))), name
  out = fn(tokens, valid, query_chunk)
  assert np.all(np.isfinite(np.asarray(out)))


def check_padding(fn, tokens, valid, rng):
  """Padded tokens' contents do not change the valid tokens' outputs, and a
  right-padded row equals the same row run alone at its own length."""
  out = np.asarray(fn(tokens, valid, 1024))
  garbage = {name: np.where(valid.reshape(valid.shape + (1,) * (x.ndim - 2)), x,
                            10 * rng.standard_normal(x.shape).astype(x.dtype))
             for name, x in tokens.items()}
  out_garbage = np.asarray(fn(garbage, valid, 1024))
  np.testing.assert_allclose(out_garbage[valid], out[valid], atol=1e-5, rtol=1e-5)
  assert not np.allclose(out_garbage[~valid], out[~valid])  # the garbage did arrive
  for row in range(valid.shape[0]):
    n = int(valid[row].sum())
    if np.all(valid[row, :n]) and n < valid.shape[1]:
      alone = np.asarray(fn({name: x[row:row + 1, :n] for name, x in tokens.items()}, None, 1024))
      np.testing.assert_allclose(alone[0], out[row, :n], atol=1e-5, rtol=1e-5)
