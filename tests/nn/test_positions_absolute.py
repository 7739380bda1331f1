"""Absolute encodings (`bifocal_jax/nn/positions/absolute.py`) against a float64
numpy reference and the benchmark's own code (`tests/vendor/`), and the
model's randomized positions (one sorted draw per batch)."""

import haiku as hk
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from flax import nnx

from bifocal_jax.nn import model as model_lib
from bifocal_jax.nn.positions import absolute
from vendor import chomsky_positional_encodings as chomsky
from vendor import randomized_positional_encodings as randomized

L, D = 9, 16


def reference(positions, dim, max_time=10_000.0):
  """float64: [sin(p / max_time^(2i/D)) for i < D/2] + [cos(...)]."""
  p = np.asarray(positions, np.float64)[:, None]
  t = p / max_time**(2 * np.arange(dim // 2) / dim)
  return np.concatenate([np.sin(t), np.cos(t)], axis=-1)


def test_sin_cos_equals_the_randomized_encodings_code():
  got = absolute.SinCos(D)(jnp.arange(L)[None])[0]
  np.testing.assert_allclose(got, randomized.sinusoid_position_encoding(L, D), atol=1e-6)
  np.testing.assert_allclose(got, reference(np.arange(L), D), atol=1e-6)


def test_reverse_sin_cos_equals_the_chomsky_encoder():
  got = absolute.SinCos(D, reverse=True)(jnp.arange(L)[None])[0]
  theirs = chomsky.sinusoid_position_encoding(L, D, max_timescale=10_000, min_timescale=2,
                                              causal=True)
  np.testing.assert_allclose(got, theirs, atol=1e-6)
  np.testing.assert_allclose(got, reference(np.arange(L, 0, -1), D), atol=1e-6)


def test_max_time_is_used():
  got = absolute.SinCos(D, max_time=100.0)(jnp.arange(L)[None])[0]
  np.testing.assert_allclose(got, reference(np.arange(L), D, 100.0), atol=1e-6)


def test_noisy_sin_cos_equals_theirs_at_the_same_draw():
  """Their NOISY_SIN_COS indexes the max_time table at sorted draws; ours
  computes the encodings at the same positions."""
  noise = 64
  table = jnp.asarray(randomized.sinusoid_position_encoding(noise, D))
  key = jax.random.key(5)
  theirs = randomized.noisy_fixed_positional_encodings(table, L, rng=key)
  drawn = jnp.sort(jax.random.choice(key, jnp.arange(noise), shape=(L,), replace=False))
  np.testing.assert_allclose(absolute.SinCos(D)(drawn[None])[0], theirs, atol=1e-5)


def test_learnt_looks_up_its_table_like_hk_embed():
  module = absolute.Learnt(D, 32, rngs=nnx.Rngs(0))
  table = np.asarray(module.table_PxD[...])
  positions = jnp.asarray([[0, 3, 31, 7]])
  theirs = hk.transform(lambda p: hk.Embed(vocab_size=32, embed_dim=D)(p))
  params = {"embed": {"embeddings": jnp.asarray(table)}}
  np.testing.assert_array_equal(module(positions), theirs.apply(params, None, positions))
  # hk.Embed's default initialiser: TruncatedNormal(stddev=1), cut at 2 stddev.
  assert np.abs(table).max() <= 2.0 and 0.8 < table.std() < 0.95


def _model(kind, **position):
  cfg = ml_collections.ConfigDict(dict(num_layers=1, d_model=D, num_heads=2, head_dim=-1,
                                       mlp_dim=16, dtype="float32"))
  pos = model_lib.attention_lib.default_position_config()
  pos.kind = kind
  pos.max_position = 64
  pos.update(position)
  return model_lib.Transformer(cfg, pos, vocab_size=8, causal=True, rngs=nnx.Rngs(0))


@pytest.mark.parametrize("kind", ["randomized_sin_cos", "randomized_learnt"])
def test_randomized_positions_are_one_sorted_draw_per_batch(kind):
  model = _model(kind)
  drawn = np.asarray(model.positions((3, L), jax.random.key(1), train=True))
  assert drawn.shape == (3, L) and np.all(drawn == drawn[:1])  # shared by the batch
  assert np.all(np.diff(drawn[0]) > 0) and drawn.max() < 64
  assert not np.array_equal(drawn, np.asarray(model.positions((3, L), jax.random.key(2), True)))
  # Also at evaluation (randomize_eval, as their code), unless turned off.
  assert not np.array_equal(np.asarray(model.positions((3, L), jax.random.key(1), train=False)),
                            np.broadcast_to(np.arange(L), (3, L)))
  in_order = _model(kind, randomize_eval=False).positions((3, L), None, train=False)
  np.testing.assert_array_equal(in_order, np.broadcast_to(np.arange(L), (3, L)))


def test_the_embedding_is_added_at_the_input():
  """With the embedding zeroed, learnt equals nope with the same parameters."""
  learnt, nope = _model("learnt"), _model("nope")
  tokens = jnp.asarray([[1, 2, 3, 4]])
  learnt.position_embedding.table_PxD[...] = jnp.zeros_like(learnt.position_embedding.table_PxD[...])
  state = nnx.state(learnt, nnx.Param)
  nnx.update(nope, {k: v for k, v in state.items() if k != "position_embedding"})
  np.testing.assert_allclose(learnt(tokens), nope(tokens), atol=1e-6)
  learnt.position_embedding.table_PxD[...] = jax.random.normal(jax.random.key(0), (64, D))
  assert not np.allclose(learnt(tokens), nope(tokens), atol=1e-3)
