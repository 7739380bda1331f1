"""The transformer (`bifocal_jax/nn/model.py`) for every `position.kind`.

Compiles dominate the run time, so each model structure is compiled once, by
`run_model`, and its causal and padding tests reuse that compile.
"""

import chex
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from flax import nnx

from bifocal_jax.nn import attention
from bifocal_jax.nn import model as model_lib
from bifocal_jax.nn import positions as positions_lib
from bifocal_jax.nn import rope

VOCAB, BATCH, SEQ = 16, 2, 6
# The model here is the causal decoder: every kind defined there.
KINDS = tuple(k for k in attention.POSITION_KINDS if positions_lib.get(k).decoder)


def tiny_config(**overrides):
  # vocab = d_model = mlp_dim: the MLP and unembedding weights share one shape,
  # so eager initialisation compiles its random sampler once for them.
  cfg = ml_collections.ConfigDict(dict(
      num_layers=1, d_model=16, num_heads=2, head_dim=-1, mlp_dim=16, dtype="float32"))
  cfg.update(overrides)
  return cfg


def make_model(position, **overrides):
  return model_lib.Transformer(tiny_config(**overrides), position, vocab_size=VOCAB, causal=True,
                               rngs=nnx.Rngs(0))


def tokens_and_positions(kind, seed=0):
  rng = np.random.default_rng(seed)
  tokens = jnp.asarray(rng.integers(0, VOCAB, (BATCH, SEQ)), jnp.int32)
  if kind == "randomized_rope":
    positions = jnp.asarray(np.sort(rng.choice(64, (BATCH, SEQ), replace=False), axis=-1))
  else:
    positions = jnp.broadcast_to(jnp.arange(SEQ, dtype=jnp.int32), (BATCH, SEQ))
  return tokens, positions


def next_token_loss(logits_BxLxV, tokens_BxL):
  targets = jax.nn.one_hot(tokens_BxL[:, 1:], VOCAB)
  return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits_BxLxV[:, :-1]) * targets, axis=-1))


@nnx.jit
def run_model(model, tokens, valid, positions):
  """(logits, gradients of the next-token loss, logits of vmap over the batch).

  One compile per model structure, reused by every test of that structure.
  """
  def loss(model):
    logits = model(tokens, valid, positions_BxL=positions)
    return next_token_loss(logits, tokens), logits
  (_, logits), grads = nnx.value_and_grad(loss, has_aux=True)(model)
  # vmap over the batch axis of a pure function of the split state.
  graphdef, state = nnx.split(model)

  def one_sequence(state, tokens_L, valid_L, positions_L):
    model = nnx.merge(graphdef, state)
    return model(tokens_L[None], valid_L[None], positions_BxL=positions_L[None])[0]
  per_sequence = jax.vmap(one_sequence, in_axes=(None, 0, 0, 0))(state, tokens, valid, positions)
  return logits, grads, per_sequence


def logits(model, tokens, valid, positions):
  return run_model(model, tokens, valid, positions)[0]


@pytest.mark.parametrize("kind", KINDS)
def test_jit_grad_and_vmap(kind, position_config):
  model = make_model(position_config(kind))
  tokens, positions = tokens_and_positions(kind)
  out, grads, per_sequence = run_model(model, tokens, jnp.ones((BATCH, SEQ), bool), positions)
  chex.assert_shape(out, (BATCH, SEQ, VOCAB))
  chex.assert_type(out, jnp.float32)
  chex.assert_tree_all_finite(out)
  np.testing.assert_allclose(per_sequence, out, atol=1e-5)

  grads = {path: np.asarray(grad[...]) for path, grad in grads.flat_state()}
  assert list(grads) == [path for path, _ in nnx.state(model, nnx.Param).flat_state()]
  for path, grad in grads.items():
    assert np.all(np.isfinite(grad)) and np.any(grad != 0), path
  spectral = [path for path, _ in nnx.state(model, rope.SpectralFrequency).flat_state()]
  assert len(spectral) == (1 if kind in ("spectral", "bifocal") else 0)
  for path in spectral:  # every spectral frequency receives a gradient
    assert np.all(grads[path] != 0), path


@pytest.mark.parametrize("kind", KINDS)
def test_causal_output_ignores_later_tokens(kind, position_config):
  model = make_model(position_config(kind))
  tokens, positions = tokens_and_positions(kind)
  valid = jnp.ones((BATCH, SEQ), bool)
  t = SEQ // 2
  changed = tokens.at[:, t + 1:].set((tokens[:, t + 1:] + 1) % VOCAB)
  before, after = logits(model, tokens, valid, positions), logits(model, changed, valid, positions)
  np.testing.assert_allclose(after[:, :t + 1], before[:, :t + 1], atol=1e-6)
  assert np.max(np.abs(after[:, t + 1:] - before[:, t + 1:])) > 1e-3  # control


@pytest.mark.parametrize("kind", ["nope", "rope"])
def test_bidirectional_nope_cannot_tell_equal_tokens_apart(kind, position_config):
  """Why NoPE scores the same in every seed on the Chomsky-hierarchy tasks.

  Their encoder is bidirectional, so without a position signal the layers are
  permutation-equivariant: every output slot holds the same query token and
  gets the same prediction. RoPE is the control.
  """
  model = model_lib.Transformer(tiny_config(), position_config(kind), vocab_size=VOCAB, causal=False,
                                rngs=nnx.Rngs(0))
  tokens = jnp.asarray([[3, 5, 7, 1, 1, 1]], jnp.int32)  # an input, then three equal query tokens
  positions = jnp.arange(SEQ, dtype=jnp.int32)[None]
  out = np.asarray(nnx.jit(lambda m, t, p: m(t, jnp.ones_like(t, bool), positions_BxL=p))(
      model, tokens, positions))[0]
  spread = np.max(np.abs(out[3:] - out[3]))
  if kind == "nope":
    assert spread < 1e-5
  else:
    assert spread > 1e-3


@pytest.mark.parametrize("kind", KINDS)
def test_valid_outputs_ignore_padded_tokens(kind, position_config):
  """Padding before and between valid tokens, which a causal mask alone would let through."""
  model = make_model(position_config(kind))
  tokens, positions = tokens_and_positions(kind)
  valid = jnp.asarray([[0, 0, 1, 1, 1, 1], [1, 0, 1, 0, 1, 1]], bool)
  changed = jnp.where(valid, tokens, (tokens + 1) % VOCAB)
  before, after = logits(model, tokens, valid, positions), logits(model, changed, valid, positions)
  np.testing.assert_allclose(after[valid], before[valid], atol=1e-6)
  # Control: unmasked, the same change reaches the valid positions.
  all_valid = jnp.ones_like(valid)
  unmasked = (logits(model, changed, all_valid, positions) -
              logits(model, tokens, all_valid, positions))
  assert np.max(np.abs(unmasked[valid])) > 1e-3


def test_randomized_rope_draws_positions_from_the_rng(position_config):
  """One sorted draw for the batch, anew in every layer (the source's
  `hk.next_rng_key()` in each layer's `apply_rotary_encoding`)."""
  model = make_model(position_config("randomized_rope"), num_layers=2)
  tokens, _ = tokens_and_positions("randomized_rope")
  draw = nnx.jit(lambda model, tokens, rng: (
      model.draw(tokens, None, rng, train=True)[0], model(tokens, rng=rng, train=True)))
  positions, drawn_logits = draw(model, tokens, jax.random.key(7))
  assert positions.shape == (2, BATCH, SEQ)
  assert np.all(np.diff(np.asarray(positions), axis=-1) > 0)
  assert 0 <= int(positions.min()) and int(positions.max()) < model.max_position
  np.testing.assert_array_equal(positions[:, 0], positions[:, 1])  # shared by the batch
  assert not np.array_equal(positions[0], positions[1])  # each layer its own
  np.testing.assert_allclose(drawn_logits, model(tokens, positions_BxL=positions), atol=1e-5)
  assert np.max(np.abs(draw(model, tokens, jax.random.key(8))[1] - drawn_logits)) > 1e-4
  with pytest.raises(ValueError, match="rng"):
    model(tokens, train=True)
  # Positions need no parameters: an abstract model is enough.
  eval_model = nnx.eval_shape(
      lambda: make_model(position_config("randomized_rope", randomize_eval=False)))
  in_order = np.broadcast_to(np.arange(SEQ), (BATCH, SEQ))
  np.testing.assert_array_equal(eval_model.positions((BATCH, SEQ), None, train=False), in_order)
  # Training still randomizes.
  drawn = eval_model.positions((BATCH, SEQ), jax.random.key(0), train=True)
  assert not np.array_equal(drawn, in_order)


RANDOMIZED = [(k, causal) for k in attention.POSITION_KINDS if positions_lib.get(k).randomized
              for causal in (True, False)
              if (positions_lib.get(k).decoder if causal else positions_lib.get(k).encoder)]


@pytest.mark.parametrize("kind,causal", RANDOMIZED)
def test_padding_changes_no_real_tokens_randomized_draw(position_config, kind, causal):
  """A sequence's real tokens get the draw of its unpadded length, whatever
  the batch is padded to and whatever else is in it: the source draws for the
  batch's own length (one length a batch, no padding), and the bucketed
  pipelines pad batches of mixed lengths."""
  model = model_lib.Transformer(tiny_config(), position_config(kind), vocab_size=VOCAB,
                                causal=causal, rngs=nnx.Rngs(0))
  real = jnp.asarray(np.random.default_rng(0).integers(1, VOCAB, (BATCH, 5)), jnp.int32)
  run = nnx.jit(lambda model, tokens, valid, rng: model(tokens, valid, rng=rng, train=True))
  valid = jnp.ones((BATCH, 5), bool)
  unpadded = run(model, real, valid, jax.random.key(3))
  padded = run(model, jnp.pad(real, ((0, 0), (0, 11))), jnp.pad(valid, ((0, 0), (0, 11))),
               jax.random.key(3))
  np.testing.assert_allclose(padded[:, :5], unpadded, atol=2e-5)
  # Nor does a longer sequence beside it (the source's batches have one
  # length): 3 real tokens beside 5 get the draw they get beside 3.
  tokens = jnp.pad(real, ((0, 0), (0, 11)))
  mixed = run(model, tokens, jnp.arange(16)[None, :] < jnp.asarray([[5], [3]]), jax.random.key(3))
  alike = run(model, tokens, jnp.arange(16)[None, :] < jnp.asarray([[3], [3]]), jax.random.key(3))
  np.testing.assert_allclose(mixed[1, :3], alike[1, :3], atol=2e-5)
  # Control: the draw matters (another key, other logits).
  assert np.max(np.abs(run(model, real, valid, jax.random.key(4)) - unpadded)) > 1e-4


@pytest.mark.parametrize("kind,per_layer", [("randomized_alibi", None), ("randomized_rope", None)])
def test_a_draw_per_layer(position_config, kind, per_layer):
  """`position.draw_per_layer` (default: the source's way; randomized ALiBi's
  attention module draws anew in every layer): layer i draws with the i-th of
  the call's keys split per layer, and each layer reads its own draw."""
  model = model_lib.Transformer(tiny_config(num_layers=2), position_config(
      kind, draw_per_layer=per_layer), vocab_size=VOCAB, causal=True, rngs=nnx.Rngs(0))
  assert model.draw_per_layer
  tokens = jnp.asarray(np.random.default_rng(0).integers(1, VOCAB, (BATCH, SEQ)), jnp.int32)
  valid = jnp.arange(SEQ)[None, :] < jnp.asarray([[SEQ], [4]])
  key = jax.random.key(5)
  positions, distances = model.draw(tokens, valid, key, True)
  drawn = distances if kind == "randomized_alibi" else positions
  assert drawn.shape == (2, BATCH, SEQ) and not np.array_equal(drawn[0], drawn[1])
  shared = model_lib.Transformer(tiny_config(num_layers=2), position_config(
      kind, draw_per_layer=False), vocab_size=VOCAB, causal=True, rngs=nnx.Rngs(0))
  assert not shared.draw_per_layer
  for layer, layer_key in enumerate(jax.random.split(key, 2)):
    p, d = shared.draw(tokens, valid, layer_key, True)
    np.testing.assert_array_equal(drawn[layer], d if kind == "randomized_alibi" else p)
  logits = model(tokens, valid, rng=key, train=True)
  np.testing.assert_allclose(logits, model(tokens, valid, positions_BxL=positions,
                                           distances_BxL=distances), atol=1e-6)
  # Both layers on layer 0's draw: other logits.
  first = dict(positions_BxL=positions, distances_BxL=distances[0]) if kind == "randomized_alibi" \
      else dict(positions_BxL=positions[0], distances_BxL=None)
  assert np.max(np.abs(model(tokens, valid, **first) - logits)) > 1e-4


@pytest.mark.parametrize("kind,message", [("rope", "draws no positions"),
                                          ("randomized_sin_cos", "draws its positions once")])
def test_a_draw_per_layer_needs_a_kind_that_draws_in_the_layers(position_config, kind, message):
  with pytest.raises(ValueError, match=rf"position\.draw_per_layer=True: position\.kind="
                     rf"'{kind}' {message}"):
    model_lib.Transformer(tiny_config(), position_config(kind, draw_per_layer=True),
                          vocab_size=VOCAB, causal=True, rngs=nnx.Rngs(0))
  defaults = {k: positions_lib.get(k).draws_per_layer(position_config(k))
              for k in ("randomized_rope", "randomized_alibi", "randomized_relative", "rope")}
  assert defaults == dict(randomized_rope=True, randomized_alibi=True, randomized_relative=True,
                          rope=False)


def test_a_padded_sequence_draws_as_its_unpadded_length():
  """The first n of a padded sequence's positions are a uniform n-subset of
  `[0, M)`: their largest is n/(n+1) M on average (the first n of a width-W
  draw would be n/(W+1) M)."""
  n, width, m = 4, 32, 256
  draw = jax.jit(lambda key: rope.randomized_positions(key, (64, width), m,
                                                       lengths=jnp.full((64,), n)))
  top = np.concatenate([np.asarray(draw(jax.random.key(i)))[:, n - 1] for i in range(8)])
  assert abs(top.mean() - n / (n + 1) * m) < 8, top.mean()  # sd of the mean ~1.5
  prefix = np.asarray(draw(jax.random.key(0)))
  assert np.all(np.diff(prefix[:, :n], axis=-1) > 0)
  assert all(len(set(row)) == width and 0 <= row.min() and row.max() < m for row in prefix)


# ----------------------------------------------------------------------------
# Counting: parameters, FLOPs, spectral frequencies.
# ----------------------------------------------------------------------------

# A config where heads * head_dim (12) differs from d_model (16), so the counts
# cannot confuse the two: V=11, D=16, H=2, K=6, F=32, 2 layers.
COUNT_CONFIG = dict(num_layers=2, d_model=16, num_heads=2, head_dim=6, mlp_dim=32)
V, D, H, K, F, LAYERS, PAIRS = 11, 16, 2, 6, 32, 2, 3


@pytest.mark.parametrize("name, kind, overrides, spectral_per_layer", [
    ("nope", "nope", {}, 0),
    ("rope", "rope", {}, 0),
    ("alibi", "alibi", {}, 0),  # slopes are a buffer, not a parameter
    ("spectral", "spectral", {}, H * PAIRS),
    ("bifocal_heads", "bifocal", {}, 1 * PAIRS),  # one of two heads spectral
    ("bifocal_pairs", "bifocal", {"split": "pairs"}, H * 1),  # one of three pairs spectral
])
def test_count_params_by_hand(name, kind, overrides, spectral_per_layer, position_config):
  # Counting needs only shapes: an abstract model, no initialisation.
  model = nnx.eval_shape(lambda: model_lib.Transformer(
      tiny_config(**COUNT_CONFIG), position_config(kind, **overrides), vocab_size=V, causal=True,
      rngs=nnx.Rngs(0)))
  embed = unembed = V * D
  layer_norm = 2 * D
  attention_weights = D * 3 * H * K + H * K * D
  mlp = D * F + F + F * D + D
  per_layer = 2 * layer_norm + attention_weights + mlp + spectral_per_layer
  assert model_lib.count_params(model) == embed + LAYERS * per_layer + layer_norm + unembed


def test_flops_per_token_by_hand():
  seq_len = 8
  # Matmul weights per layer: QKV (D x 3HK), output (HK x D), MLP (D x F, F x D);
  # plus the unembedding (D x V). 2 FLOPs per weight forward, 6 with backward.
  matmul_weights = LAYERS * (D * 3 * H * K + H * K * D + 2 * D * F) + D * V
  # Attention: QK^T and AV, 2 * seq_len * H * K FLOPs each forward, x3 with backward.
  attention_flops = LAYERS * 3 * 2 * (2 * seq_len * H * K)
  assert model_lib.flops_per_token(tiny_config(**COUNT_CONFIG), vocab_size=V, seq_len=seq_len) == (
      6 * matmul_weights + attention_flops)


@pytest.mark.parametrize("name, kind, overrides, spectral_shape", [
    ("nope", "nope", {}, None),
    ("rope", "rope", {}, None),
    ("partial_rope", "partial_rope", {}, None),
    ("randomized_rope", "randomized_rope", {}, None),
    ("alibi", "alibi", {}, None),
    ("spectral", "spectral", {}, (H, 4)),
    ("bifocal_heads", "bifocal", {}, (1, 4)),
    ("bifocal_pairs", "bifocal", {"split": "pairs"}, (H, 2)),
])
def test_spectral_frequencies_per_kind(name, kind, overrides, spectral_shape, position_config):
  """`[layers, spectral heads, spectral pairs]`, geometric at initialisation."""
  model = make_model(position_config(kind, **overrides), num_layers=2)
  frequencies = model_lib.spectral_frequencies(model)
  if spectral_shape is None:
    assert frequencies is None
    return
  shape = (2,) + spectral_shape
  chex.assert_shape(frequencies, shape)
  # The tiny model's head_dim is 8 (4 pairs); spectral pairs are the lowest frequencies.
  geometric = rope.geometric_frequencies(8)[4 - shape[-1]:]
  np.testing.assert_allclose(frequencies, jnp.broadcast_to(geometric, shape), rtol=3e-7)
  model.blocks[1].attn.rope.log_frequency[...] += 1.0  # follows the parameters, per layer
  np.testing.assert_allclose(
      model_lib.spectral_frequencies(model)[1], np.e * frequencies[1], rtol=1e-6)
  np.testing.assert_array_equal(model_lib.spectral_frequencies(model)[0], frequencies[0])


# ----------------------------------------------------------------------------
# Bad configs.
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("overrides, match", [
    (dict(head_dim=7), r"model\.head_dim.*7"),
    (dict(d_model=12, num_heads=4), r"model\.head_dim.*3"),  # 12 / 4 is odd
    (dict(num_heads=0), r"model\.num_heads.*0"),
    (dict(dtype="float16"), r"model\.dtype.*float16"),
])
def test_bad_model_configs_raise(overrides, match, position_config):
  with pytest.raises(ValueError, match=match):
    make_model(position_config("rope"), **overrides)


def test_mismatched_positions_raise(position_config):
  model = make_model(position_config("rope"))
  tokens, _ = tokens_and_positions("rope")
  with pytest.raises(ValueError, match=r"positions.*\(2, 5\)"):
    logits(model, tokens, jnp.ones((BATCH, SEQ), bool), jnp.zeros((BATCH, SEQ - 1), jnp.int32))


def _numpy_layer_norm(x, scale, bias):
  mean = x.mean(-1, keepdims=True)
  return (x - mean) / np.sqrt(((x - mean)**2).mean(-1, keepdims=True) + 1e-6) * scale + bias


def _central_differences(f, arrays, h=1e-6):
  """The gradient of scalar `f(*arrays)` with respect to each array, float64."""
  grads = []
  for i, a in enumerate(arrays):
    g = np.zeros_like(a)
    for index in np.ndindex(a.shape):
      up, down = [b.copy() for b in arrays], [b.copy() for b in arrays]
      up[i][index] += h
      down[i][index] -= h
      g[index] = (f(*up) - f(*down)) / (2 * h)
    grads.append(g)
  return grads


@pytest.mark.parametrize("dtype, rtol", [(jnp.float32, 1e-4), (jnp.bfloat16, 3e-2)])
def test_layer_norm_and_its_written_out_backward_against_float64(dtype, rtol):
  """`layer_norm`'s value and its hand-written gradients (x, scale, bias)
  against a float64 numpy LayerNorm and its gradients by central differences
  (at the bfloat16-rounded input for bfloat16)."""
  rng = np.random.default_rng(0)
  x = np.asarray(jnp.asarray(rng.standard_normal((3, 5, 8)) * 2 + 1, dtype), np.float64)
  scale, bias = 1 + 0.3 * rng.standard_normal(8), 0.3 * rng.standard_normal(8)
  dy = np.asarray(jnp.asarray(rng.standard_normal((3, 5, 8)), dtype), np.float64)
  expected_y = _numpy_layer_norm(x, scale, bias)
  expected = _central_differences(lambda *a: float((_numpy_layer_norm(*a) * dy).sum()),
                                  [x, scale, bias])

  args = (jnp.asarray(x, dtype), jnp.asarray(scale, jnp.float32), jnp.asarray(bias, jnp.float32))
  y, vjp = jax.vjp(lambda *a: model_lib.layer_norm(*a, 1e-6), *args)
  grads = vjp(jnp.asarray(dy, dtype))
  assert y.dtype == dtype and grads[0].dtype == dtype
  assert grads[1].dtype == grads[2].dtype == jnp.float32
  np.testing.assert_allclose(np.asarray(y, np.float64), expected_y, rtol=rtol, atol=rtol)
  for name, ours, theirs in zip(("x", "scale", "bias"), grads, expected):
    np.testing.assert_allclose(np.asarray(ours, np.float64), theirs, rtol=rtol,
                               atol=rtol * np.abs(theirs).max(), err_msg=name)


def test_layer_norm_gradients_come_in_each_arguments_dtype():
  x = jnp.linspace(-1, 1, 16, dtype=jnp.float32).reshape(2, 8)
  scale, bias = jnp.ones(8, jnp.bfloat16), jnp.zeros(8, jnp.float16)
  grads = jax.grad(lambda *a: model_lib.layer_norm(*a, 1e-6).sum(), argnums=(0, 1, 2))(x, scale,
                                                                                        bias)
  assert [g.dtype for g in grads] == [jnp.float32, jnp.bfloat16, jnp.float16]
