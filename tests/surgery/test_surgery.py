"""Surgical Integration: fixed RoPE -> spectral RoPE, same function, trainable."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from bifocal_jax.nn import attention, optim
from bifocal_jax import surgery
from bifocal_jax.nn.rope import BifocalRoPE, GeometricRoPE, SpectralFrequency, SpectralRoPE

HEADS, HEAD_DIM, SEQ = 2, 8, 5
FEATURES = HEADS * HEAD_DIM


def _mha(rope, rngs, **kwargs):
  """`nnx.MultiHeadAttention` with RoPE, as the Flax documentation builds it."""
  return nnx.MultiHeadAttention(
      num_heads=HEADS, in_features=FEATURES, qkv_features=FEATURES, decode=False,
      attention_fn=functools.partial(nnx.dot_product_attention_with_rope, rope=rope),
      rngs=rngs, **kwargs)


class DocStack(nnx.Module):
  """Two documented attention layers sharing one rope object."""

  def __init__(self, rngs):
    rope = nnx.RoPE(embedding_size=HEAD_DIM, max_seq_len=16)
    self.layers = nnx.List([_mha(rope, rngs), _mha(rope, rngs)])

  def __call__(self, x):
    for layer in self.layers:
      x = x + layer(x)
    return x


class LlamaBlock(nnx.Module):
  """Hand-written attention with `nnx.RoPE` as an attribute, built without its size."""

  def __init__(self, rngs, rope=None):
    self.qkv = nnx.Linear(FEATURES, 3 * FEATURES, rngs=rngs)
    self.out = nnx.Linear(FEATURES, FEATURES, rngs=rngs)
    self.rope = nnx.RoPE(theta=500.0) if rope is None else rope

  def __call__(self, x):
    b, l, _ = x.shape
    q, k, v = jnp.split(self.qkv(x).reshape(b, l, 3 * HEADS, HEAD_DIM), 3, axis=2)
    # Llama applies RoPE on [batch, heads, seq, head_dim].
    q = self.rope(q.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)
    k = self.rope(k.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)
    attn = jax.nn.dot_product_attention(q, k, v, is_causal=True)
    return x + self.out(attn.reshape(b, l, FEATURES))


def _position_config(kind="rope"):
  config = attention.default_position_config()
  config.kind = kind
  return config


class Nested(nnx.Module):
  """Ropes of every kind, in every kind of container."""

  def __init__(self, rngs):
    self.blocks = nnx.Dict(
        llama=LlamaBlock(rngs),
        partial=LlamaBlock(rngs, GeometricRoPE(100.0, HEAD_DIM, rotary_fraction=0.5,
                                                layout="interleaved")))
    self.doc = nnx.List([_mha(nnx.RoPE(embedding_size=HEAD_DIM, max_seq_len=SEQ), rngs)])
    self.ours = attention.Attention(FEATURES, HEADS, HEAD_DIM, _position_config(), causal=True,
                                    rngs=rngs)
    self.plain = nnx.data([{"rope": nnx.RoPE(embedding_size=HEAD_DIM, max_seq_len=SEQ)}])

  def __call__(self, x):
    x = self.blocks["partial"](self.blocks["llama"](x))
    x = x + self.doc[0](x)
    x = x + self.ours(x, jnp.arange(SEQ)[None])
    rotated = self.plain[0]["rope"](x.reshape(x.shape[:-1] + (HEADS, HEAD_DIM)).swapaxes(-2, -3))
    return rotated.swapaxes(-2, -3).reshape(x.shape)


def _x():
  return jax.random.normal(jax.random.key(7), (2, SEQ, FEATURES))


def _frequencies(model):
  return jax.tree.leaves(nnx.state(model, SpectralFrequency))


def _check_trains(model, num_steps=2):
  """Under nnx.jit, gradients reach every frequency and nnx.Optimizer moves them all."""
  x = _x()
  target = jax.random.normal(jax.random.key(8), x.shape)
  loss = lambda model: jnp.mean((model(x) - target) ** 2)
  tx = optim.spectral_evolution(optax.sgd(0.0), spectral_learning_rate=1e-2)
  optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)

  @nnx.jit
  def step(model, optimizer):
    grads = nnx.grad(loss)(model)
    optimizer.update(model, grads)
    return nnx.state(grads, SpectralFrequency)

  before = [np.asarray(f) for f in _frequencies(model)]
  for _ in range(num_steps):
    grads = step(model, optimizer)
    for path, g in jax.tree_util.tree_leaves_with_path(grads):
      assert np.all(np.abs(np.asarray(g)) > 0), f"no gradient at {jax.tree_util.keystr(path)}"
  assert len(jax.tree.leaves(grads)) == len(before)
  for b, a in zip(before, _frequencies(model)):
    assert np.all(np.asarray(a) != b)


def test_documented_multi_head_attention_same_outputs_then_trains():
  model = DocStack(nnx.Rngs(0))
  x = _x()
  before = model(x)
  assert surgery.spectralize(model) == 2
  np.testing.assert_allclose(model(x), before, atol=1e-5, rtol=1e-5)
  for layer in model.layers:
    assert isinstance(layer.attention_fn, surgery.RotaryAttention)
  # The shared rope became one spectral module per layer, visible as state.
  assert model.layers[0].attention_fn.rope is not model.layers[1].attention_fn.rope
  paths = [p for p, _ in nnx.to_flat_state(nnx.state(model, SpectralFrequency))]
  assert paths == [("layers", i, "attention_fn", "rope", "log_frequency") for i in range(2)]
  _check_trains(model)


def test_llama_block_needs_embedding_size_then_same_outputs():
  model = LlamaBlock(nnx.Rngs(0))
  with pytest.raises(ValueError, match="embedding_size"):
    surgery.spectralize(model)
  assert isinstance(model.rope, nnx.RoPE)  # nothing half-done
  x = _x()
  before = model(x)
  assert surgery.spectralize(model, embedding_size=HEAD_DIM) == 1
  assert isinstance(model.rope, SpectralRoPE) and model.rope.theta == 500.0
  np.testing.assert_allclose(model(x), before, atol=1e-5, rtol=1e-5)
  _check_trains(model)


def test_nested_model_every_container_same_outputs_then_trains():
  model = Nested(nnx.Rngs(0))
  x = _x()
  before = model(x)
  assert surgery.spectralize(model, embedding_size=HEAD_DIM) == 5
  np.testing.assert_allclose(model(x), before, atol=1e-5, rtol=1e-5)
  partial_rope = model.blocks["partial"].rope
  assert (partial_rope.rotary_dim, partial_rope.layout) == (HEAD_DIM // 2, "interleaved")
  assert isinstance(model.plain[0]["rope"], SpectralRoPE)
  assert len(_frequencies(model)) == 5
  _check_trains(model, num_steps=1)


@pytest.mark.parametrize("options, shape", [
    (dict(per_head=True), (HEADS, HEAD_DIM // 2)),
    (dict(split="heads", spectral_heads=1), (1, HEAD_DIM // 2)),
])
def test_per_head_and_bifocal_in_attention_partial_and_our_attention(options, shape):
  class Both(nnx.Module):
    def __init__(self, rngs):
      self.doc = _mha(nnx.RoPE(embedding_size=HEAD_DIM, max_seq_len=SEQ), rngs)
      self.ours = attention.Attention(FEATURES, HEADS, HEAD_DIM, _position_config(),
                                      causal=False, rngs=rngs)

    def __call__(self, x):
      return self.ours(self.doc(x), jnp.arange(SEQ)[None])

  model = Both(nnx.Rngs(0))
  x = _x()
  before = model(x)
  assert surgery.spectralize(model, **options) == 2
  np.testing.assert_allclose(model(x), before, atol=1e-5, rtol=1e-5)
  expected_type = BifocalRoPE if "split" in options else SpectralRoPE
  assert isinstance(model.ours.rope, expected_type)
  assert [f.shape for f in _frequencies(model)] == [shape, shape]
  _check_trains(model, num_steps=1)


def test_filter_chooses_which_ropes():
  model = Nested(nnx.Rngs(0))
  assert surgery.spectralize(model, filter=nnx.PathContains("blocks"), embedding_size=HEAD_DIM) == 2
  assert isinstance(model.blocks["llama"].rope, SpectralRoPE)
  assert isinstance(model.ours.rope, GeometricRoPE)
  assert surgery.spectralize(model, filter=GeometricRoPE) == 1
  assert isinstance(model.ours.rope, SpectralRoPE)


def test_sizeless_rope_in_attention_partial_takes_the_head_dim():
  model = _mha(nnx.RoPE(theta=50.0), nnx.Rngs(0))
  assert surgery.spectralize(model) == 1
  assert (model.attention_fn.rope.embedding_size, model.attention_fn.rope.theta) == (HEAD_DIM, 50.0)


def test_errors_are_clear():
  with pytest.raises(ValueError, match="no nnx.RoPE or GeometricRoPE"):
    surgery.spectralize(nnx.Linear(2, 2, rngs=nnx.Rngs(0)))
  with pytest.raises(ValueError, match="matching filter"):
    surgery.spectralize(DocStack(nnx.Rngs(0)), filter=GeometricRoPE)
  with pytest.raises(ValueError, match="head-aware"):
    surgery.spectralize(LlamaBlock(nnx.Rngs(0)), per_head=True, embedding_size=HEAD_DIM)
  with pytest.raises(ValueError, match="num_kv_heads"):
    surgery.spectralize(_mha(nnx.RoPE(embedding_size=HEAD_DIM, max_seq_len=SEQ), nnx.Rngs(0),
                             num_kv_heads=1), per_head=True)
  with pytest.raises(ValueError, match="split"):
    surgery.spectralize(DocStack(nnx.Rngs(0)), split="layers")
  with pytest.raises(ValueError, match="tuple"):
    surgery.spectralize(nnx.Dict(t=nnx.data((nnx.RoPE(embedding_size=4, max_seq_len=4),))))


def test_custom_attention_function_gets_the_spectral_rope():
  def my_attention(query, key, value, *, rope, **kwargs):
    rotate = jax.vmap(rope, in_axes=-2, out_axes=-2)
    return nnx.dot_product_attention(rotate(query), rotate(key), value, **kwargs)

  rngs = nnx.Rngs(0)
  model = nnx.MultiHeadAttention(
      num_heads=HEADS, in_features=FEATURES, decode=False, rngs=rngs,
      attention_fn=functools.partial(my_attention, rope=GeometricRoPE(10.0, HEAD_DIM)))
  x = _x()
  before = model(x)
  with pytest.raises(ValueError, match="dot_product_attention_with_rope"):
    surgery.spectralize(model, per_head=True)
  assert surgery.spectralize(model) == 1
  np.testing.assert_allclose(model(x), before, atol=1e-5, rtol=1e-5)
  assert model.attention_fn.func is my_attention
  assert len(_frequencies(model)) == 1


def test_rotary_attention_positions_are_relative():
  q, k, v = jax.random.normal(jax.random.key(2), (3, 1, SEQ, HEADS, HEAD_DIM))
  attend = surgery.RotaryAttention(SpectralRoPE(10.0, HEAD_DIM, num_heads=HEADS))
  out = attend(q, k, v)
  np.testing.assert_allclose(attend(q, k, v, input_positions=jnp.arange(SEQ) + 11), out,
                             atol=1e-5)
  assert not np.allclose(attend(q, k, v, input_positions=2 * jnp.arange(SEQ)), out, atol=1e-3)


def test_p_rope_keeps_its_position_free_pairs_through_surgery():
  """A p-RoPE layer (Gemma's `rope_proportion`) becomes a spectral one with
  the same function: its rotated pairs trainable, the slowest still at 0."""
  layer = attention.Attention(FEATURES, HEADS, HEAD_DIM, _position_config("p_rope"), causal=False,
                              rngs=nnx.Rngs(0))
  x = _x()
  before = layer(x, jnp.arange(SEQ)[None])
  with pytest.raises(ValueError, match="p-RoPE module at .*split='heads' is not available"):
    surgery.spectralize(layer, split="heads")
  assert not isinstance(layer.rope, SpectralRoPE)  # nothing half-done
  assert surgery.spectralize(layer, per_head=True) == 1
  np.testing.assert_allclose(layer(x, jnp.arange(SEQ)[None]), before, atol=1e-5, rtol=1e-5)
  rotated = HEAD_DIM // 4  # the default fraction, 0.5, of the pairs
  assert layer.rope.log_frequency.shape == (HEADS, rotated)
  np.testing.assert_array_equal(layer.rope.frequencies()[:, rotated:], 0.0)
