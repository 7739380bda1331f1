"""The rotary roster against its sources' code: `p_rope` against gemma's own
`apply_rope` (`rope_proportion`), `partial_rope` as GPT-NeoX's `rotary_pct`,
and `randomized_rope` against the randomized-encodings benchmark's
NOISY_ROTARY code (vendored in `tests/vendor/`) at a patched draw."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from flax import nnx

from bifocal_jax.nn import model as model_lib
from bifocal_jax.nn import positions
from bifocal_jax.nn import rope
from vendor import randomized_positional_encodings as randomized

BASE, HEAD_DIM, HEADS = 10_000.0, 16, 2


def _rope_of(position_config, kind, **overrides):
  return positions.get(kind).rope(position_config(kind, **overrides), num_heads=HEADS,
                                  head_dim=HEAD_DIM)


def _qk(seed=0, shape=(2, 9, HEADS, HEAD_DIM)):
  return jnp.asarray(np.random.default_rng(seed).normal(size=shape), jnp.float32)


@pytest.mark.parametrize("fraction", [0.25, 0.5, 1.0])
def test_p_rope_is_gemmas_apply_rope(position_config, fraction):
  gemma_rope = pytest.importorskip("gemma.gm.math._positional_embeddings")
  module = _rope_of(position_config, "p_rope", rotary_fraction=fraction)
  x = _qk()
  pos = jnp.asarray(np.sort(np.random.default_rng(1).choice(500, (2, 9), replace=False)))
  ours = rope.apply_rope(x, pos, module.frequencies(), layout=module.layout)
  theirs = gemma_rope.apply_rope(x, pos, base_frequency=BASE, rope_proportion=fraction)
  np.testing.assert_allclose(ours, theirs, atol=2e-5)
  # The unrotated pairs are the slowest ones, left exactly as they were.
  rotated = int(fraction * HEAD_DIM // 2)
  half = HEAD_DIM // 2
  for start in (rotated, half + rotated):
    np.testing.assert_array_equal(ours[..., start:start + half - rotated],
                                  x[..., start:start + half - rotated])


def test_the_two_partial_conventions_differ_as_their_sources_do(position_config):
  """At head dimension 16 and fraction 0.5 both rotate 4 pairs; NeoX's
  slowest turns 10000^(-6/8) rad/token, Gemma's 10000^(-6/16)."""
  neox = np.asarray(_rope_of(position_config, "partial_rope", rotary_fraction=0.5).frequencies())
  gemma = np.asarray(_rope_of(position_config, "p_rope", rotary_fraction=0.5).frequencies())
  np.testing.assert_allclose(neox, BASE**(-np.arange(4) / 4), rtol=1e-6)
  np.testing.assert_allclose(gemma[:4], BASE**(-np.arange(4) / 8), rtol=1e-6)
  np.testing.assert_array_equal(gemma[4:], 0.0)
  assert neox[-1] == pytest.approx(0.00100, rel=0.01) and gemma[3] == pytest.approx(0.0316, rel=0.01)
  # partial_rope rotates the first 8 channels as a head of 8 (NeoX pairs i, i + 4).
  x = _qk()
  module = _rope_of(position_config, "partial_rope", rotary_fraction=0.5)
  out = rope.apply_rope(x, jnp.arange(9)[None], module.frequencies(), layout=module.layout)
  np.testing.assert_array_equal(out[..., 8:], x[..., 8:])
  np.testing.assert_allclose(
      out[..., :8], rope.apply_rope(x[..., :8], jnp.arange(9)[None],
                                    rope.geometric_frequencies(8, BASE)), atol=1e-6)


def test_spectral_p_rope_trains_only_the_rotated_pairs():
  module = rope.SpectralRoPE(BASE, HEAD_DIM, num_heads=HEADS, rope_proportion=0.5)
  assert module.log_frequency.shape == (HEADS, 4)
  np.testing.assert_allclose(module.frequencies(),
                             np.broadcast_to(rope.proportional_frequencies(HEAD_DIM, 0.5, BASE),
                                             (HEADS, 8)), rtol=1e-6)
  with pytest.raises(ValueError, match="two conventions"):
    rope.GeometricRoPE(BASE, HEAD_DIM, rotary_fraction=0.5, rope_proportion=0.5)


def _patched_choice(monkeypatch, values):
  """Their `jrandom.choice(..., replace=False)` returns `values` (shuffled: they sort)."""
  shuffled = np.random.default_rng(0).permutation(np.asarray(values))

  class Random:
    choice = staticmethod(lambda *a, shape, **k: jnp.asarray(shuffled[:shape[0]]))

  monkeypatch.setattr(randomized, "jrandom", Random)


def test_randomized_rope_is_their_noisy_rotary(position_config, monkeypatch):
  """Each layer rotates queries and keys at one sorted draw of positions
  for the whole batch, its own draw (the source calls
  `apply_rotary_encoding(..., noisy=True, rng=hk.next_rng_key())` in every
  layer, with one key for q and k); the rotation is theirs at that draw."""
  max_position, layers, length = 64, 3, 9
  position = position_config("randomized_rope", layout="interleaved", max_position=max_position)
  cfg = dict(num_layers=layers, d_model=32, num_heads=HEADS, head_dim=HEAD_DIM, mlp_dim=32,
             dtype="float32")
  model = model_lib.Transformer(ml_collections.ConfigDict(cfg), position, vocab_size=8,
                                causal=True, rngs=nnx.Rngs(0))
  tokens = jnp.ones((2, length), jnp.int32)
  drawn, _ = model.draw(tokens, None, jax.random.key(4), True)
  assert drawn.shape == (layers, 2, length)
  assert len({tuple(np.asarray(d[0])) for d in drawn}) == layers  # anew in every layer
  module = model.blocks[0].attn.rope
  x = _qk(seed=2, shape=(2, length, HEADS, HEAD_DIM))
  for layer in range(layers):
    np.testing.assert_array_equal(drawn[layer, 0], drawn[layer, 1])  # one draw for the batch
    _patched_choice(monkeypatch, np.asarray(drawn[layer, 0]))
    theirs = randomized.apply_rotary_encoding(x, position=jnp.arange(max_position)[None],
                                              max_time=BASE, noisy=True,
                                              rng=jax.random.key(0))
    ours = rope.apply_rope(x, drawn[layer], module.frequencies(), layout=module.layout)
    np.testing.assert_allclose(ours, theirs, atol=2e-5)
  # Control: another layer's draw is not theirs at this one's.
  assert np.max(np.abs(rope.apply_rope(x, drawn[0], module.frequencies(), layout="interleaved")
                       - theirs)) > 1e-2
