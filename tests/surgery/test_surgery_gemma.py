"""Surgical Integration on the `gemma` library's Linen attention (gemma 4.0.1), and our Linen
modules living beside it. Skipped where gemma's model code is not installed.

The code under test is gemma's own (`Attention`: its rotary call, GQA, sliding window;
`gm.nn.Transformer`: its `nn.jit` and layer stack). gemma imports kauldron, whose typing
module imports TensorFlow only to name `tf.Tensor` in type aliases; where TensorFlow is not
installed (CI installs gemma light, see docs/getting_started.md), a stand-in module holding a `Tensor` class
is registered while gemma loads.
"""

import functools
import importlib
import importlib.util
import sys
import types

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from bifocal_jax.nn import linen, optim, rope
from bifocal_jax.surgery.gemma_linen import SpectralGemma, merge_params



def _import_gemma():
  if importlib.util.find_spec("gemma") is None:
    pytest.skip("gemma is not installed", allow_module_level=True)
  stand_in = importlib.util.find_spec("tensorflow") is None
  if stand_in:
    sys.modules["tensorflow"] = types.SimpleNamespace(Tensor=type("Tensor", (), {}))
  try:
    gm_nn = importlib.import_module("gemma.gm.nn")
    # Touching these runs their lazy imports while the TensorFlow stand-in is in place.
    _ = importlib.import_module("kauldron.kd").nn.Identity, gm_nn.Transformer
  finally:
    if stand_in:
      del sys.modules["tensorflow"]
  return gm_nn


gm_nn = _import_gemma()
_modules = importlib.import_module("gemma.gm.nn._modules")
_dtype_params = importlib.import_module("gemma.gm.utils._dtype_params")

B, L, FEATURES = 2, 8, 16
LAYERS = ((_modules.AttentionType.LOCAL_SLIDING, 10_000, 1.0),
          (_modules.AttentionType.GLOBAL, 1_000_000, 8.0))


class Tiny(nn.Module):
  """Gemma 3's layer pattern in miniature: a local and a global attention layer."""

  num_kv_heads: int = 2

  def setup(self):
    self.layers = [
        _modules.Attention(
            num_heads=4, num_kv_heads=self.num_kv_heads, features=FEATURES, head_dim=8,
            attn_type=kind, query_pre_attn_scalar=8**-0.5, rope_base_frequency=base,
            rope_scale_factor=scale, sliding_window_size=3, name=f"layer_{i}")
        for i, (kind, base, scale) in enumerate(LAYERS)]

  @functools.partial(nn.jit, static_argnames=("self",))  # as gemma's Transformer.__call__
  def __call__(self, x, positions, mask):
    for layer in self.layers:
      x = x + layer(x, positions, None, mask)[1]
    return x


def _inputs(offset=0):
  x = jnp.asarray(np.random.default_rng(0).normal(size=(B, L, FEATURES)), jnp.float32)
  positions = jnp.broadcast_to(jnp.arange(L)[None] + offset, (B, L))
  return x, positions, jnp.broadcast_to(jnp.tril(jnp.ones((L, L), bool))[None], (B, L, L))


def _init(model, *inputs):
  """`model.init`'s variables, traced only (compiling an init costs seconds), filled from numpy:
  weights normal(0, 0.3) (gemma's std 0.01 makes attention uniform, and rotations moot)."""
  rng = np.random.default_rng(0)
  return jax.tree_util.tree_map_with_path(
      lambda path, a: jnp.zeros(a.shape, a.dtype) if "ratio" in jax.tree_util.keystr(path)
      else jnp.asarray(0.3 * rng.normal(size=a.shape), a.dtype),
      jax.eval_shape(model.init, jax.random.key(0), *inputs))


def _converted():
  """The model and its wrapped twin, with the same weights."""
  model, wrapped = Tiny(), SpectralGemma(model=Tiny())
  params = _init(model, *_inputs())
  return model, params, wrapped, merge_params(params, _init(wrapped, *_inputs()))


def test_wrapper_adds_a_ratio_per_layer_and_keeps_the_outputs():
  model, params, wrapped, wrapped_params = _converted()
  assert wrapped_params["params"]["spectral_surgery_kv_heads"].shape == (0,)
  ratios = {k: v["rope"]["log_frequency_ratio"] for k, v in wrapped_params["params"].items()
            if k.startswith("layer_")}
  assert set(ratios) == {"layer_0", "layer_1"}
  for ratio in ratios.values():  # [num_kv_heads, pairs], float32, at 0
    assert ratio.shape == (2, 4) and ratio.dtype == jnp.float32
    np.testing.assert_array_equal(ratio, 0.0)
  np.testing.assert_array_equal(wrapped.apply(wrapped_params, *_inputs(3)),
                                model.apply(params, *_inputs(3)))
  labels = optim.spectral_labels(wrapped_params)
  assert labels["params"]["layer_0"]["rope"]["log_frequency_ratio"] == "spectral"
  assert labels["params"]["layer_0"]["q_einsum"]["w"] == "base"


def test_training_the_ratios_changes_the_outputs_despite_the_trace_cache():
  model, params, wrapped, wrapped_params = _converted()
  x, positions, mask = _inputs()
  original = model.apply(params, x, positions, mask)  # fills nn.jit's trace cache first
  target = jnp.roll(x, 1, axis=1)
  tx = optim.spectral_evolution(optax.set_to_zero(), spectral_learning_rate=0.05)
  state = tx.init(wrapped_params)

  @jax.jit
  def step(p, state):
    loss, grads = jax.value_and_grad(
        lambda p: jnp.mean((wrapped.apply(p, x, positions, mask) - target) ** 2))(p)
    updates, state = tx.update(grads, state, p)
    return optax.apply_updates(p, updates), state, loss

  losses = []
  for _ in range(4):
    wrapped_params, state, loss = step(wrapped_params, state)
    losses.append(float(loss))
  assert losses[-1] < losses[0]
  for name, layer in wrapped_params["params"].items():
    if name.startswith("spectral_surgery"):
      continue
    assert np.all(np.abs(layer["rope"]["log_frequency_ratio"]) > 0)
    assert np.all(np.isfinite(layer["rope"]["log_frequency_ratio"]))
  moved = wrapped.apply(wrapped_params, x, positions, mask)
  assert float(jnp.max(jnp.abs(moved - original))) > 1e-4
  # Every query head rotates like its key head: shifting all positions changes nothing.
  np.testing.assert_allclose(wrapped.apply(wrapped_params, *_inputs(offset=29)), moved,
                             rtol=1e-4, atol=1e-4)


def test_refusals_name_the_module():
  x = _inputs()
  with pytest.raises(ValueError, match=r"cannot give gemma.gm.nn._modules.Attention at layer_0 one "
                                       r"spectrum per query head: 4 query heads share 2 key heads"):
    _init(SpectralGemma(model=Tiny(), spectrum="heads"), *x)
  params = _init(SpectralGemma(model=Tiny(num_kv_heads=4), spectrum="heads"), *x)
  assert params["params"]["layer_0"]["rope"]["log_frequency_ratio"].shape == (4, 4)
  with pytest.raises(ValueError, match="spectrum must be one of"):
    SpectralGemma(model=Tiny(), spectrum="pairs")
  gemma4 = importlib.import_module("gemma.gm.nn.gemma4._modules")

  class Gemma4Layer(nn.Module):
    @nn.compact
    def __call__(self, x):
      return gemma4.Attention(num_heads=2, num_kv_heads=2, features=FEATURES, key_size=8,
                              attn_type=gemma4.AttentionType.GLOBAL, name="attn")(
                                  x, x[..., 0].astype(int), None, None)

  with pytest.raises(ValueError, match=r"cannot convert gemma.gm.nn.gemma4._modules.Attention at attn"):
    _init(SpectralGemma(model=Gemma4Layer()), x[0])


def test_our_linen_modules_initialise_float32_after_gemma_replaced_param():
  assert nn.Module.param.__code__.co_filename == _dtype_params.__file__  # gemma replaced it
  x = _inputs()[0].reshape(B, L, 2, 8)
  with _dtype_params.initialize_param_with_dtype(jnp.bfloat16):
    params = linen.SpectralRoPE(theta=100.0, num_heads=2).init(jax.random.key(0), x)
    dense = nn.Dense(3).init(jax.random.key(0), x)
  assert dense["params"]["kernel"].dtype == jnp.bfloat16  # gemma's context does apply
  assert params["params"]["log_frequency"].dtype == jnp.float32
  np.testing.assert_array_equal(
      params["params"]["log_frequency"],
      rope.SpectralRoPE(theta=100.0, embedding_size=8, num_heads=2).log_frequency[...])
  assert linen.GeometricRoPE().init(jax.random.key(0), x[..., 0, :]) == {}


def test_gemma_transformer_with_its_nn_jit():
  config = gm_nn.config.TransformerConfig(
      num_embed=32, embed_dim=16, hidden_dim=32, num_heads=4, head_dim=8, num_kv_heads=2,
      final_logit_softcap=None, use_post_attn_norm=True, use_post_ffw_norm=True,
      attention_types=[_modules.AttentionType.LOCAL_SLIDING, _modules.AttentionType.GLOBAL],
      sliding_window_size=4, local_base_frequency=10_000, global_base_frequency=1_000_000,
      global_scale_factor=8.0)
  tokens = jnp.asarray(np.random.default_rng(0).integers(1, 32, (B, L)), jnp.int32)
  model, wrapped = gm_nn.Transformer(config=config), SpectralGemma(model=gm_nn.Transformer(config=config))
  params = _init(model, tokens)
  wrapped_params = merge_params(params, _init(wrapped, tokens))
  assert wrapped_params["params"]["layer_1"]["attn"]["rope"]["log_frequency_ratio"].shape == (2, 4)
  np.testing.assert_array_equal(wrapped.apply(wrapped_params, tokens).logits,
                                model.apply(params, tokens).logits)
  moved = jax.tree_util.tree_map_with_path(
      lambda path, v: v + 0.3 if "log_frequency_ratio" in jax.tree_util.keystr(path) else v,
      wrapped_params)
  assert float(jnp.max(jnp.abs(wrapped.apply(moved, tokens).logits
                               - model.apply(params, tokens).logits))) > 1e-4
