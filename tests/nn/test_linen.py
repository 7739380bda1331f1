"""Linen rotary modules: same outputs as the NNX ones; frequencies train as params."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from bifocal_jax.nn import linen, optim, rope

HEADS, HEAD_DIM, SEQ = 2, 8, 6


def _x(shape):
  return jax.random.normal(jax.random.key(3), shape)


@pytest.mark.parametrize("kwargs", [
    dict(theta=100.0),
    dict(theta=500.0, rotary_fraction=0.5, layout="interleaved"),
])
def test_geometric_matches_nnx(kwargs):
  x = _x((2, SEQ, HEAD_DIM))
  positions = jnp.arange(SEQ)[None] + jnp.array([[0], [7]])  # offsets per sequence
  module = linen.GeometricRoPE(embedding_size=HEAD_DIM, **kwargs)
  assert module.init(jax.random.key(0), x) == {}  # no state
  expected = rope.GeometricRoPE(embedding_size=HEAD_DIM, **kwargs)(x, positions)
  np.testing.assert_array_equal(module.apply({}, x, positions), expected)


@pytest.mark.parametrize("num_heads", [None, HEADS])
def test_spectral_matches_nnx_initially_and_after_a_change(num_heads):
  shape = (2, SEQ, HEAD_DIM) if num_heads is None else (2, SEQ, HEADS, HEAD_DIM)
  x = _x(shape)
  module = linen.SpectralRoPE(theta=100.0, embedding_size=HEAD_DIM, num_heads=num_heads)
  params = module.init(jax.random.key(0), x)
  reference = rope.SpectralRoPE(theta=100.0, embedding_size=HEAD_DIM, num_heads=num_heads)
  np.testing.assert_array_equal(params["params"]["log_frequency"], reference.log_frequency[...])
  np.testing.assert_array_equal(module.apply(params, x), reference(x))
  # A trained (perturbed) spectrum gives the same rotation in both.
  moved = params["params"]["log_frequency"] + 0.1 * _x(params["params"]["log_frequency"].shape)
  reference.log_frequency[...] = moved
  np.testing.assert_allclose(
      module.apply({"params": {"log_frequency": moved}}, x), reference(x), atol=1e-6)


def test_embedding_size_defaults_to_head_dim_and_bad_sizes_raise():
  x = _x((SEQ, HEAD_DIM))
  params = linen.SpectralRoPE().init(jax.random.key(0), x)
  assert params["params"]["log_frequency"].shape == (HEAD_DIM // 2,)
  with pytest.raises(ValueError, match="embedding_size"):
    linen.SpectralRoPE(embedding_size=7).init(jax.random.key(0), x)
  with pytest.raises(ValueError, match="rotary_fraction"):
    linen.GeometricRoPE(rotary_fraction=0.0).init(jax.random.key(0), x)
  with pytest.raises(ValueError, match="num_heads"):
    linen.SpectralRoPE(num_heads=0).init(jax.random.key(0), x)


class LinenAttention(nn.Module):
  """A Linen model using the Linen rope: per-head spectral eyes on q and k."""

  @nn.compact
  def __call__(self, x):
    q, k, v = jnp.split(nn.Dense(3 * HEADS * HEAD_DIM)(x), 3, axis=-1)
    q, k, v = (t.reshape(t.shape[:-1] + (HEADS, HEAD_DIM)) for t in (q, k, v))
    spectral = linen.SpectralRoPE(theta=100.0, embedding_size=HEAD_DIM, num_heads=HEADS,
                                  name="rope")
    q, k = spectral(q), spectral(k)
    out = jax.nn.dot_product_attention(q, k, v, is_causal=True)
    return nn.Dense(1)(out.reshape(out.shape[:-2] + (HEADS * HEAD_DIM,)))[..., 0]


def test_linen_model_trains_and_its_frequencies_move():
  model = LinenAttention()
  x = _x((4, SEQ, 3))
  y = jnp.sin(0.9 * jnp.arange(SEQ))[None].repeat(4, 0)  # needs position
  params = model.init(jax.random.key(0), x)
  labels = optim.spectral_labels(params)
  assert labels["params"]["rope"]["log_frequency"] == "spectral"
  assert labels["params"]["Dense_0"]["kernel"] == "base"
  tx = optim.spectral_evolution(optax.adam(1e-2), spectral_learning_rate=1e-2)
  loss = lambda p: jnp.mean((model.apply(p, x) - y) ** 2)

  @jax.jit
  def step(params, opt_state):
    value, grads = jax.value_and_grad(loss)(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, value

  opt_state = tx.init(params)
  start = params
  losses = []
  for _ in range(20):
    params, opt_state, value = step(params, opt_state)
    losses.append(float(value))
  assert losses[-1] < 0.5 * losses[0]
  moved = np.abs(params["params"]["rope"]["log_frequency"] - start["params"]["rope"]["log_frequency"])
  assert np.all(moved > 0)
