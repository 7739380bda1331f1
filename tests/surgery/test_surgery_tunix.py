"""Surgical Integration on tunix's own model code: Gemma 3, Llama 3, Qwen 3 (tiny, random).

These run google-tunix 0.1.7's model files (installed light, see docs/getting_started.md);
they are skipped where tunix is not installed.
"""

import importlib

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
import pytest
from flax import nnx

from bifocal_jax.nn import optim
from bifocal_jax import surgery
from bifocal_jax.nn.rope import SpectralFrequency
from bifocal_jax.surgery import tunix_models

try:
  tunix_models.import_model("gemma3")
except ImportError as e:
  pytest.skip(f"tunix's model code is not installed ({e})", allow_module_level=True)

VOCAB, B, L = 32, 2, 10


def gemma3(**overrides):
  """A local layer (base 10k, sliding window) and a global one (base 1M, scale factor 8).

  (Gemma 3 repeats five local layers and a global one; two layers keep the test fast.)
  """
  module = tunix_models.import_model("gemma3")
  config = dict(num_layers=2, num_embed=VOCAB, embed_dim=32, hidden_dim=64, num_heads=4,
                head_dim=8, num_kv_heads=2, sliding_window_size=4, local_base_frequency=10_000,
                global_base_frequency=1_000_000, global_scale_factor=8.0,
                param_dtype=jnp.float32)
  pattern = module.GEMMA3_ATTENTION_PATTERN
  module.GEMMA3_ATTENTION_PATTERN = (module.AttentionType.LOCAL_SLIDING, module.AttentionType.GLOBAL)
  try:
    return _build(lambda: module.Gemma3(module.ModelConfig(**config | overrides), rngs=nnx.Rngs(0)))
  finally:
    module.GEMMA3_ATTENTION_PATTERN = pattern


def llama3(**overrides):
  module = tunix_models.import_model("llama3")
  config = dict(num_layers=1, vocab_size=VOCAB, embed_dim=32, hidden_dim=64, num_heads=4,
                head_dim=8, num_kv_heads=2, rope_theta=500_000, norm_eps=1e-6)
  return _build(lambda: module.Llama3(module.ModelConfig(**config | overrides), rngs=nnx.Rngs(0)))


def qwen3(**overrides):
  module = tunix_models.import_model("qwen3")
  config = dict(num_layers=1, vocab_size=VOCAB, embed_dim=32, hidden_dim=64, num_heads=4,
                head_dim=8, num_kv_heads=2, rope_theta=1_000_000, norm_eps=1e-6)
  return _build(lambda: module.Qwen3(module.ModelConfig(**config | overrides), rngs=nnx.Rngs(0)))


BUILDERS = {"gemma3": gemma3, "llama3": llama3, "qwen3": qwen3}


def _build(make, scale=0.3):
  """`make()`'s model with random weights from numpy.

  Built abstractly and filled on the host: initialising with JAX compiles
  XLA programs for seconds. (Gemma also initialises its norm scales and MLP
  at zero; random ones make every path count.)
  """
  model = nnx.eval_shape(make)
  rng = np.random.default_rng(0)
  nnx.update(model, jax.tree.map(
      lambda a: jnp.asarray(scale * rng.normal(size=a.shape), a.dtype), nnx.state(model)))
  return model


def _inputs(offset=0):
  tokens = jnp.asarray(np.random.default_rng(1).integers(0, VOCAB, (B, L)), jnp.int32)
  positions = jnp.broadcast_to(jnp.arange(L)[None] + offset, (B, L))
  mask = jnp.broadcast_to(jnp.tril(jnp.ones((L, L), bool))[None], (B, L, L))
  return tokens, positions, mask


@nnx.jit
def _logits(model, tokens, positions, mask):
  return model(tokens, positions, None, mask)[0]


def _ropes(model):
  return {path: node for path, node in nnx.iter_graph(model)
          if isinstance(node, tunix_models.TunixRoPE)}


def _perturb_spectra(model, scale=0.3):
  """Moves every layer's log-ratio (a different amount per head and pair)."""
  rng = np.random.default_rng(0)
  for rope in _ropes(model).values():
    shape = rope.log_frequency_ratio.shape
    rope.log_frequency_ratio[...] = jnp.asarray(scale * rng.normal(size=shape), jnp.float32)


@pytest.mark.parametrize("family", sorted(BUILDERS))
def test_converted_model_has_the_same_logits_and_each_layers_own_spectrum(family):
  model = BUILDERS[family]()
  inputs = _inputs(offset=3)
  before = _logits(model, *inputs)
  assert surgery.spectralize(model) == len(model.layers)
  np.testing.assert_allclose(_logits(model, *inputs), before, rtol=1e-6, atol=1e-6)

  ropes = list(_ropes(model).values())
  assert [r.site for r in ropes] == [f"layers/{i}/attn" for i in range(len(model.layers))]
  for rope in ropes:  # per KV head by default: [num_kv_heads, pairs], at 0
    assert rope.log_frequency_ratio.shape == (2, 4)
    np.testing.assert_array_equal(rope.log_frequency_ratio[...], 0.0)
  # The base each layer really uses.
  if family == "gemma3":
    assert [(r.theta, r.scale_factor) for r in ropes] == [(1e4, 1.0), (1e6, 8.0)]
  else:  # their Attention calls apply_rope without a base: its default, not config.rope_theta
    assert {(r.theta, r.scale_factor) for r in ropes} == {(1e6, 1.0)}
  expected = 1.0 / ropes[-1].theta ** (np.arange(4) / 4) / ropes[-1].scale_factor
  np.testing.assert_allclose(ropes[-1].frequencies()[0], expected, rtol=1e-6)


@pytest.mark.parametrize("family, dtype", [("gemma3", jnp.float32), ("llama3", jnp.float32),
                                           ("qwen3", jnp.float32), ("qwen3", jnp.bfloat16)])
def test_dispatcher_reproduces_the_hosts_apply_rope_bit_for_bit(family, dtype):
  module = tunix_models.import_model(family)
  x = jnp.asarray(np.random.default_rng(0).normal(size=(B, L, 3, 8)), dtype)
  positions = jnp.broadcast_to(jnp.arange(L)[None] * 97, (B, L))
  base = dict(base_frequency=1_000_000, scale_factor=8.0) if family == "gemma3" else {}
  host = module.apply_rope(x, positions, head_dim=8, **base)
  theta = 1e6
  angles = tunix_models.host_angles(positions, 8, theta, 8.0 if family == "gemma3" else 1.0)
  ours = tunix_models.rotate_like_host(x, angles * jnp.exp(jnp.zeros((1, 4))),
                                       tunix_models.FAMILIES[module.__name__].trig_in_input_dtype)
  assert ours.dtype == host.dtype
  np.testing.assert_array_equal(ours, host)


def test_grouped_query_heads_share_their_key_heads_spectrum():
  """Shifting all positions leaves the logits alone only if every query head and its key head
  rotate alike: a wrong query-to-key-head mapping breaks it."""
  model = llama3(num_heads=4, num_kv_heads=2)
  surgery.spectralize(model)
  _perturb_spectra(model)
  np.testing.assert_allclose(_logits(model, *_inputs(offset=0)),
                             _logits(model, *_inputs(offset=37)), rtol=2e-4, atol=2e-4)


def test_training_only_the_frequencies_moves_them_and_changes_the_logits():
  model = llama3(num_layers=2)
  surgery.spectralize(model)
  tokens, positions, mask = _inputs()
  start = _logits(model, tokens, positions, mask)
  others = jax.tree.map(np.asarray, nnx.state(model, nnx.All(nnx.Param, nnx.Not(SpectralFrequency))))
  optimizer = nnx.Optimizer(model, optax.adam(0.05), wrt=SpectralFrequency)

  @nnx.jit
  def step(model, optimizer):
    def loss_fn(model):
      logits = model(tokens, positions, None, mask)[0]
      return optax.softmax_cross_entropy_with_integer_labels(logits[:, :-1], tokens[:, 1:]).mean()
    loss, grads = nnx.value_and_grad(loss_fn, argnums=nnx.DiffState(0, SpectralFrequency))(model)
    optimizer.update(model, grads)
    return loss

  losses = [float(step(model, optimizer)) for _ in range(5)]
  assert losses[-1] < losses[0]
  for rope in _ropes(model).values():
    assert np.all(np.abs(rope.log_frequency_ratio[...]) > 0)
  assert float(jnp.max(jnp.abs(_logits(model, tokens, positions, mask) - start))) > 1e-4
  jax.tree.map(np.testing.assert_array_equal, others,
               nnx.state(model, nnx.All(nnx.Param, nnx.Not(SpectralFrequency))))
  # Spectral Evolution puts the ratios, and only them, in its own group.
  labels = optim.spectral_labels(nnx.as_pure(nnx.state(model, nnx.Param)))
  flat = {"/".join(map(str, k)): v for k, v in nnx.to_flat_state(labels)}
  assert {k for k, v in flat.items() if v == "spectral"} == {
      f"layers/{i}/attn/rope/log_frequency_ratio" for i in range(2)}


def _decode(model, tokens, prefill):
  """tunix's KV-cache path: prefill `prefill` tokens, then one token at a time."""
  cache_size = tokens.shape[1]
  config = model.config
  cache = {f"layer_{i}": dict(k=jnp.zeros((B, cache_size, config.num_kv_heads, config.head_dim)),
                              v=jnp.zeros((B, cache_size, config.num_kv_heads, config.head_dim)),
                              end_index=jnp.zeros((B,), jnp.int32))
           for i in range(config.num_layers)}
  causal = jnp.tril(jnp.ones((cache_size, cache_size), bool))
  step = nnx.jit(lambda m, t, p, c, a: m(t, p, c, a))
  positions = jnp.broadcast_to(jnp.arange(cache_size)[None], (B, cache_size))
  logits, cache = step(model, tokens[:, :prefill], positions[:, :prefill], cache,
                       jnp.broadcast_to(causal[None, :prefill], (B, prefill, cache_size)))
  out = [logits]
  for t in range(prefill, cache_size):
    logits, cache = step(model, tokens[:, t:t + 1], positions[:, t:t + 1], cache,
                         jnp.broadcast_to(causal[None, t:t + 1], (B, 1, cache_size)))
    out.append(logits)
  return jnp.concatenate(out, axis=1)


def test_kv_cache_decoding_matches_the_full_forward_pass():
  model = gemma3()
  tokens, positions, mask = _inputs()
  original = _logits(model, tokens, positions, mask)
  surgery.spectralize(model)
  _perturb_spectra(model)  # keys enter the cache rotated by their own positions' spectrum
  full = _logits(model, tokens, positions, mask)
  assert float(jnp.max(jnp.abs(full - original))) > 1e-3
  np.testing.assert_allclose(_decode(model, tokens, prefill=4), full, rtol=1e-4, atol=1e-4)


def test_orbax_save_and_restore_of_a_converted_model(tmp_path):
  model = llama3()
  surgery.spectralize(model)
  _perturb_spectra(model)
  inputs = _inputs()
  expected = _logits(model, *inputs)
  with ocp.StandardCheckpointer() as checkpointer:
    checkpointer.save(tmp_path / "state", nnx.state(model))

  def converted():
    fresh = llama3()
    surgery.spectralize(fresh)
    return fresh

  abstract = nnx.eval_shape(converted)
  with ocp.StandardCheckpointer() as checkpointer:
    restored = checkpointer.restore(tmp_path / "state", nnx.state(abstract))
  nnx.update(abstract, restored)
  np.testing.assert_array_equal(_logits(abstract, *inputs), expected)


def test_spectrum_options_and_one_line_refusals():
  shared, per_query_head = llama3(num_kv_heads=4), llama3(num_kv_heads=4)
  surgery.spectralize(shared, spectrum="shared")
  surgery.spectralize(per_query_head, per_head=True)  # without GQA, per query head is exact
  assert {r.log_frequency_ratio.shape for r in _ropes(shared).values()} == {(4,)}
  assert {r.log_frequency_ratio.shape for r in _ropes(per_query_head).values()} == {(4, 4)}

  gqa = llama3()
  with pytest.raises(ValueError, match=r"tunix.models.llama3.model.Attention at layers/0/attn one "
                                       r"spectrum per query head: 4 query heads share 2 key heads"):
    surgery.spectralize(gqa, spectrum="heads")
  with pytest.raises(ValueError, match="split='heads' is not available for tunix models"):
    surgery.spectralize(gqa, split="heads")
  assert not _ropes(gqa)  # refused before anything changed
  gqa = llama3(num_layers=2)
  assert surgery.spectralize(gqa, filter=lambda path, layer: path[1] == 1) == 1
  assert list(_ropes(gqa)) == [("layers", 1, "attn", "rope")]
  assert surgery.spectralize(gqa) == 1  # only the layer not yet converted

  old = importlib.import_module("tunix.models.gemma.model")  # Gemma 1 and 2
  config = old.ModelConfig(
      num_layers=1, num_embed=VOCAB, embed_dim=16, hidden_dim=32, num_heads=2, head_dim=8,
      num_kv_heads=2, final_logit_softcap=None, use_post_attn_norm=False,
      use_post_ffw_norm=False, attention_types=[old.AttentionType.GLOBAL])
  with pytest.raises(ValueError, match=r"cannot convert tunix.models.gemma.model.Attention at "
                                       r"layers/0/attn: spectralize supports"):
    surgery.spectralize(nnx.eval_shape(lambda: old.Gemma(config, rngs=nnx.Rngs(0))))
