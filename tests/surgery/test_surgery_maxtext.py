"""Surgical Integration on MaxText's own rotary modules (maxtext 0.2.5, loaded light:
see tests/maxtext_embeddings.py). Skipped where maxtext is not installed."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from bifocal_jax import apply_rope, surgery
from bifocal_jax.nn.rope import SpectralFrequency
from bifocal_jax.surgery import maxtext_rope
import maxtext_embeddings

embeddings = maxtext_embeddings.load()
if embeddings is None:
  pytest.skip("maxtext is not installed", allow_module_level=True)

B, S, N, H = 2, 12, 3, 16
F32 = dict(cast_as_fprop_dtype=False)


def _rotaries():
  """One of each supported class, as MaxText's `init_rotary_embedding` builds them."""
  return {
      "rotary": embeddings.RotaryEmbedding(1, 10_000, None, H, **F32),
      "partial": embeddings.PartialRotaryEmbedding(1, 10_000, None, H, partial_rotary_factor=0.5, **F32),
      "gemma4": embeddings.Gemma4PartialRotaryEmbedding(1, 10_000, None, H, partial_rotary_factor=0.25, **F32),
      "llama": embeddings.LLaMARotaryEmbedding(1, 500_000, None, H, use_scale=True, **F32),
      "yarn": embeddings.YarnRotaryEmbedding(H, None, max_position_embeddings=64,
                                             original_max_position_embeddings=16, rope_factor=4,
                                             interleave=False, **F32),
  }


def _x_positions(offset=0):
  rng = np.random.default_rng(0)
  x = jnp.asarray(rng.normal(size=(B, S, N, H)), jnp.float32)
  return x, jnp.broadcast_to(jnp.arange(S)[None] + offset, (B, S))


@pytest.mark.parametrize("kind", ["rotary", "partial", "gemma4", "llama", "yarn"])
def test_exact_at_step_0_then_a_rotation_by_the_moved_spectrum(kind):
  module = _rotaries()[kind]
  x, positions = _x_positions(offset=5)
  call = nnx.jit(lambda m, x, p: m(x, p))
  before = module(x, positions)  # eager: the host's arithmetic op by op, as ours below
  assert surgery.spectralize(module) == 1
  np.testing.assert_array_equal(module(x, positions), before)

  pairs = maxtext_rope.rotated_pairs(module)
  assert module.log_frequency_ratio.shape == (pairs,)
  original = maxtext_rope.original_frequencies(module)
  ratio = jnp.asarray(np.random.default_rng(1).normal(scale=0.3, size=pairs), jnp.float32)
  module.log_frequency_ratio[...] = ratio
  moved = call(module, x, positions)
  # The host's call with the new spectrum is a rotation of the same pairs by omega * exp(r):
  # our own apply_rope on the host's layout (the partial classes keep their pair layout).
  omega = original * jnp.exp(ratio)
  if kind == "llama":
    expected = apply_rope(x, positions, omega, layout="interleaved")
  elif kind == "gemma4":  # rotated pairs (i, i + H/2) for i < pairs; the others untouched
    full = jnp.concatenate([omega, jnp.zeros(H // 2 - pairs)])
    expected = apply_rope(x, positions, full)
    untouched = np.r_[pairs:H // 2, H // 2 + pairs:H]
    np.testing.assert_array_equal(moved[..., untouched], x[..., untouched])
  elif kind == "partial":  # the first 2 * pairs channels in half layout, the rest passed
    expected = jnp.concatenate([apply_rope(x[..., :2 * pairs], positions, omega),
                                x[..., 2 * pairs:]], axis=-1)
  else:
    expected = apply_rope(x, positions, omega)
  np.testing.assert_allclose(moved, expected, rtol=2e-5, atol=2e-5)
  assert float(jnp.max(jnp.abs(moved - before))) > 1e-2


def test_gradients_are_finite_and_only_for_rotated_pairs():
  module = _rotaries()["gemma4"]
  surgery.spectralize(module, per_head=True, num_heads=N)
  assert module.log_frequency_ratio.shape == (N, 2)  # 0.25 of 8 pairs, per head
  x, positions = _x_positions()
  grads = nnx.grad(lambda m: jnp.sum(m(x, positions) ** 2 * jnp.arange(H)),
                   argnums=nnx.DiffState(0, SpectralFrequency))(module)
  grad = grads["log_frequency_ratio"][...]
  assert np.all(np.isfinite(grad)) and np.all(np.abs(grad) > 0)


class Layer(nnx.Module):
  """A MaxText-like attention core: q/k projections rotated by the layer's rotary module."""

  def __init__(self, rngs):
    self.query = nnx.Linear(H, N * H, rngs=rngs)
    self.key = nnx.Linear(H, N * H, rngs=rngs)
    self.rotary_embedding = embeddings.LLaMARotaryEmbedding(1, 10_000, None, H, use_scale=False, **F32)

  def __call__(self, x, positions):
    q = self.rotary_embedding(self.query(x).reshape(B, S, N, H), positions)
    k = self.rotary_embedding(self.key(x).reshape(B, S, N, H), positions)
    scores = jnp.einsum("bsnh,btnh->bnst", q, k) / H
    return x + jnp.einsum("bnst,bth->bsh", jax.nn.softmax(scores, -1), x)


def test_scanned_layer_stack_gets_one_spectrum_per_layer():
  layers = 3

  @nnx.split_rngs(splits=layers)
  @nnx.vmap(in_axes=0, out_axes=0)
  def stack(rngs):
    return Layer(rngs)

  model = stack(nnx.Rngs(0))  # parameters [layers, ...], as MaxText scans its decoder

  @nnx.jit
  def forward(model, x, positions):
    @nnx.scan(in_axes=(nnx.Carry, 0), out_axes=nnx.Carry)
    def body(x, layer):
      return layer(x, positions)
    return body(x, model)

  x = jnp.asarray(np.random.default_rng(0).normal(size=(B, S, H)), jnp.float32)
  positions = jnp.broadcast_to(jnp.arange(S)[None], (B, S))
  before = forward(model, x, positions)
  assert surgery.spectralize(model, per_head=True, num_heads=N, stacked_layers=layers) == 1
  assert model.rotary_embedding.log_frequency_ratio.shape == (layers, N, H // 2)
  # Compiled, XLA may rearrange `position / (timescale / 1)`: float32 rounding, not bits.
  np.testing.assert_allclose(forward(model, x, positions), before, rtol=1e-6, atol=1e-5)
  # Moving the last layer's spectrum alone changes the output; the first two layers' do not
  # see it (each layer reads its own slice).
  ratio = np.zeros((layers, N, H // 2), np.float32)
  ratio[-1] = 0.5
  model.rotary_embedding.log_frequency_ratio[...] = jnp.asarray(ratio)
  assert float(jnp.max(jnp.abs(forward(model, x, positions) - before))) > 1e-3
  grads = nnx.grad(lambda m: jnp.sum(forward(m, x, positions) ** 2),
                   argnums=nnx.DiffState(0, SpectralFrequency))(model)
  grad = grads["rotary_embedding"]["log_frequency_ratio"][...]
  assert grad.shape == (layers, N, H // 2) and np.all(np.isfinite(grad))
  assert np.all(np.abs(grad).sum(axis=(1, 2)) > 0)


def test_refusals_name_the_module():
  with pytest.raises(ValueError, match=r"cannot give maxtext.layers.embeddings.YarnRotaryEmbedding "
                                       r"at <root> one spectrum per head"):
    surgery.spectralize(_rotaries()["yarn"], per_head=True, num_heads=N)
  with pytest.raises(ValueError, match="needs num_heads="):
    surgery.spectralize(_rotaries()["rotary"], per_head=True)
  vision = embeddings.LlamaVisionRotaryEmbedding.__new__(embeddings.LlamaVisionRotaryEmbedding)
  with pytest.raises(ValueError, match=r"cannot convert maxtext.layers.embeddings."
                                       r"LlamaVisionRotaryEmbedding at <root>: supported are"):
    maxtext_rope.convert(vision)
