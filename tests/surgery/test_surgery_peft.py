"""tunix's own fine-tuning path with the spectra: its PeftTrainer, checkpoints, merged export.

Tiny Gemma 3, Llama 3 and Qwen 3 are loaded the way tunix loads real ones, from a
Hugging Face-layout `model.safetensors` (random weights, written here), with
qwix LoRA on their projections, then converted by `spectralize`. Skipped where
tunix's trainer code or qwix is not installed (requirements-hosts.txt).
"""

import functools
import logging

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from bifocal_jax import surgery
from bifocal_jax.nn.rope import SpectralFrequency
from bifocal_jax.surgery import tunix_models

try:
  from bifocal_jax.surgery import peft
  import qwix
except ImportError as e:
  pytest.skip(f"tunix's trainer code or qwix is not installed ({e})", allow_module_level=True)

VOCAB, E, F, H, K, D, LAYERS = 32, 32, 64, 4, 2, 8, 2
B, L = 2, 10
LORA_TARGETS = {
    "gemma3": ".*q_einsum|.*kv_einsum|.*attn_vec_einsum|.*gate_proj|.*up_proj|.*down_proj",
    "llama3": ".*q_proj|.*k_proj|.*v_proj|.*o_proj|.*gate_proj|.*up_proj|.*down_proj",
}
LORA_TARGETS["qwen3"] = LORA_TARGETS["llama3"]
RANK, ALPHA = 2, 4.0
FAMILIES = sorted(LORA_TARGETS)
TRAINED = ("gemma3", "llama3")  # end to end through tunix's trainer (slow)


def _config(family):
  module = tunix_models.import_model(family)
  if family == "gemma3":  # a local layer (sliding window) and a global one (base 1M, scale 8)
    return module.ModelConfig(
        num_layers=LAYERS, num_embed=VOCAB, embed_dim=E, hidden_dim=F, num_heads=H, head_dim=D,
        num_kv_heads=K, sliding_window_size=4, local_base_frequency=10_000,
        global_base_frequency=1_000_000, global_scale_factor=8.0, param_dtype=jnp.float32)
  sizes = dict(num_layers=LAYERS, vocab_size=VOCAB, embed_dim=E, hidden_dim=F, num_heads=H,
               head_dim=D, num_kv_heads=K, rope_theta=500_000, norm_eps=1e-6)
  if family == "qwen3":
    return module.ModelConfig(**sizes, use_tied_embedding=True)
  return module.ModelConfig(**sizes, weight_tying=True)


def _hf_shapes(family):
  """The Hugging Face tensors of the tiny model: `{key: shape}` (what tunix's loader maps)."""
  shapes = {"model.embed_tokens.weight": (VOCAB, E), "model.norm.weight": (E,)}
  norms = ["input_layernorm", "post_attention_layernorm"]
  if family == "gemma3":
    norms += ["pre_feedforward_layernorm", "post_feedforward_layernorm"]
  for i in range(LAYERS):
    p = f"model.layers.{i}."
    shapes |= {p + "self_attn.q_proj.weight": (H * D, E), p + "self_attn.k_proj.weight": (K * D, E),
               p + "self_attn.v_proj.weight": (K * D, E), p + "self_attn.o_proj.weight": (E, H * D),
               p + "mlp.gate_proj.weight": (F, E), p + "mlp.up_proj.weight": (F, E),
               p + "mlp.down_proj.weight": (E, F)}
    shapes |= {p + n + ".weight": (E,) for n in norms}
    if family in ("gemma3", "qwen3"):
      shapes |= {p + "self_attn.q_norm.weight": (D,), p + "self_attn.k_norm.weight": (D,)}
  return shapes


@pytest.fixture(scope="module")
def base_dirs(tmp_path_factory):
  """`{family: folder}` of a random Hugging Face-layout base checkpoint per family."""
  import safetensors.numpy

  rng = np.random.default_rng(0)
  dirs = {}
  for family in FAMILIES:
    folder = tmp_path_factory.mktemp(f"{family}_base")
    safetensors.numpy.save_file(
        {k: (0.3 * rng.normal(size=s)).astype(np.float32) for k, s in _hf_shapes(family).items()},
        str(folder / "model.safetensors"))
    (folder / "config.json").write_text("{}")  # copied beside the merged export by tunix
    dirs[family] = str(folder)
  return dirs


def _load(family, folder):
  """tunix's own safetensors loader (Gemma 3 with a two-layer attention pattern)."""
  module = tunix_models.import_model(family)
  params = tunix_models.import_tunix(
      "tunix.models.gemma3.params_safetensors" if family == "gemma3" else
      f"tunix.models.{family}.params")
  pattern = getattr(module, "GEMMA3_ATTENTION_PATTERN", None)
  if family == "gemma3":
    module.GEMMA3_ATTENTION_PATTERN = (module.AttentionType.LOCAL_SLIDING,
                                       module.AttentionType.GLOBAL)
  try:
    model = params.create_model_from_safe_tensors(folder, _config(family))
  finally:
    if family == "gemma3":
      module.GEMMA3_ATTENTION_PATTERN = pattern
  leaves = jax.tree.leaves(nnx.state(model))
  assert all(isinstance(x, jax.Array) for x in leaves), "a base weight was not loaded"
  return model


def _inputs():
  tokens = jnp.asarray(np.random.default_rng(1).integers(0, VOCAB, (B, L)), jnp.int32)
  positions = jnp.broadcast_to(jnp.arange(L)[None], (B, L))
  mask = jnp.broadcast_to(jnp.tril(jnp.ones((L, L), bool))[None], (B, L, L))
  return tokens, positions, mask


_TEMPLATES = {}


def _lora_spectral(family, folder):
  """Base from `folder`, qwix LoRA, then `spectralize`: a fresh copy of one such model.

  (qwix adds LoRA by running the model eagerly, seconds per model: done once per family.)
  """
  if (family, folder) not in _TEMPLATES:
    model = _load(family, folder)
    provider = qwix.LoraProvider(module_path=LORA_TARGETS[family], rank=RANK, alpha=ALPHA)
    model = qwix.apply_lora_to_model(model, provider, *_inputs()[:2], None, _inputs()[2],
                                     rngs=nnx.Rngs(1))
    assert surgery.spectralize(model) == LAYERS
    _TEMPLATES[family, folder] = model
  return nnx.clone(_TEMPLATES[family, folder])


@nnx.jit
def _logits(model, tokens, positions, mask):
  return model(tokens, positions, None, mask)[0]


def _perturb(model, variable_type, scale, seed=0):
  rng = np.random.default_rng(seed)
  for _, v in nnx.to_flat_state(nnx.state(model, variable_type)):
    v[...] = jnp.asarray(scale * rng.normal(size=v.shape), v.dtype)


def _values(model, variable_type):
  return {p: np.asarray(v[...]) for p, v in nnx.to_flat_state(nnx.state(model, variable_type))}


def _warnings(caplog, text):
  """The warning lines mentioning `text`; each must be one line."""
  lines = [r.getMessage() for r in caplog.records
           if r.levelno == logging.WARNING and text in r.getMessage()]
  assert all("\n" not in line for line in lines)
  return lines


def _batches(n):
  tokens, positions, mask = _inputs()
  return [dict(input_tokens=tokens, input_mask=jnp.ones((B, L), bool), positions=positions,
               attention_mask=mask)] * n


def _training_config(steps, root=None):
  return peft.peft_trainer.TrainingConfig(eval_every_n_steps=1000, max_steps=steps,
                                          checkpoint_root_directory=root, pbar_description=None)


# ----------------------------------------------------------------------------
# The spectra file and the merged export (no training: LoRA and spectra moved by hand).
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_merged_export_with_its_spectra_reloads_to_the_same_logits(family, base_dirs, tmp_path,
                                                                   caplog):
  model = _lora_spectral(family, base_dirs[family])
  _perturb(model, nnx.LoRAParam, 0.3)
  _perturb(model, SpectralFrequency, 0.3, seed=1)
  inputs = _inputs()
  trained = _logits(model, *inputs)

  out = peft.save_lora_merged_model_as_safetensors(base_dirs[family], str(tmp_path / "merged"),
                                                   model, rank=RANK, alpha=ALPHA)
  reloaded = _load(family, out)
  surgery.spectralize(reloaded)
  assert float(jnp.max(jnp.abs(_logits(reloaded, *inputs) - trained))) > 1e-2  # spectra matter
  assert peft.load_spectra(reloaded, out) == LAYERS
  np.testing.assert_allclose(_logits(reloaded, *inputs), trained, rtol=1e-5, atol=1e-5)
  for key, value in _values(model, SpectralFrequency).items():
    np.testing.assert_array_equal(_values(reloaded, SpectralFrequency)[key], value)

  # tunix's export alone (no spectra.json): the loader says so in one line.
  (tmp_path / "merged" / peft.SPECTRA_FILE).unlink()
  fresh = _load(family, out)
  surgery.spectralize(fresh)
  with caplog.at_level(logging.WARNING):
    assert peft.load_spectra(fresh, out) == 0
  assert _warnings(caplog, "spectra.json") == [f"{out} holds no spectra.json (exported without its "
                                               "spectra, e.g. by tunix's merged export alone): "
                                               "the model keeps the spectrum it has"]


def test_load_spectra_refuses_a_model_it_does_not_fit(base_dirs, tmp_path):
  model = _lora_spectral("llama3", base_dirs["llama3"])
  _perturb(model, SpectralFrequency, 0.3)
  path = peft.save_spectra(model, str(tmp_path))

  shared = _load("llama3", base_dirs["llama3"])
  surgery.spectralize(shared, spectrum="shared")
  with pytest.raises(ValueError, match=r"log_frequency_ratio has shape \(2, 4\), the model's \(4,\)"):
    peft.load_spectra(shared, path)
  one_layer = _load("llama3", base_dirs["llama3"])
  surgery.spectralize(one_layer, filter=lambda path, layer: path[1] == 0)
  with pytest.raises(ValueError, match="its spectra are at other paths"):
    peft.load_spectra(one_layer, path)
  with pytest.raises(ValueError, match="has no spectral frequencies; call bifocal_jax.surgery"):
    peft.load_spectra(_load("llama3", base_dirs["llama3"]), path)

  # Same shapes, another original spectrum: caught by the saved frequencies, nothing changed.
  other = _load("llama3", base_dirs["llama3"])
  surgery.spectralize(other)
  for _, layer in tunix_models.sites(other):
    layer.rope.original_frequency[...] = layer.rope.original_frequency[...] * 2
  with pytest.raises(ValueError, match="the frequencies at layers/0/attn/rope differ"):
    peft.load_spectra(other, path)
  assert all(np.all(v == 0) for v in _values(other, SpectralFrequency).values())


def _attention(seed=0):
  """`nnx.MultiHeadAttention` with RoPE as the Flax documentation builds it, spectralized."""
  rope = nnx.RoPE(embedding_size=8, max_seq_len=64)
  model = nnx.MultiHeadAttention(
      num_heads=2, in_features=16, decode=False, rngs=nnx.Rngs(seed),
      attention_fn=functools.partial(nnx.dot_product_attention_with_rope, rope=rope))
  surgery.spectralize(model, per_head=True)
  return model


def test_spectra_file_round_trips_a_spectralized_flax_model(tmp_path):
  model = _attention()
  _perturb(model, SpectralFrequency, 0.1)  # log omega, moved
  x = jnp.asarray(np.random.default_rng(0).normal(size=(2, 12, 16)), jnp.float32)
  path = peft.save_spectra(model, str(tmp_path / "spectra.json"))
  fresh = _attention()
  assert float(jnp.max(jnp.abs(fresh(x) - model(x)))) > 1e-3
  assert peft.load_spectra(fresh, path) == 1
  np.testing.assert_array_equal(fresh(x), model(x))


# ----------------------------------------------------------------------------
# Checkpoints.
# ----------------------------------------------------------------------------


def test_lora_only_checkpoints_hold_the_spectra_and_old_ones_restore_with_a_warning(
    base_dirs, tmp_path, caplog):
  model = _lora_spectral("llama3", base_dirs["llama3"])
  _perturb(model, nnx.LoRAParam, 0.3)
  _perturb(model, SpectralFrequency, 0.3, seed=1)
  expected = _logits(model, *_inputs())
  manager = peft.CheckpointManager(str(tmp_path / "ours"))
  assert manager.save(3, model, save_only_lora_params=True, force=True)
  manager.close()

  fresh = _lora_spectral("llama3", base_dirs["llama3"])
  manager = peft.CheckpointManager(str(tmp_path / "ours"))
  assert manager.maybe_restore(fresh, restore_only_lora_params=True)[0] == 3
  manager.close()
  np.testing.assert_array_equal(_logits(fresh, *_inputs()), expected)

  # A LoRA-only checkpoint of tunix's own manager has no spectra: restored with one warning.
  tunix_manager = peft.checkpoint_manager.CheckpointManager(str(tmp_path / "tunix"))
  assert tunix_manager.save(5, model, save_only_lora_params=True, force=True)
  tunix_manager.close()
  fresh = _lora_spectral("llama3", base_dirs["llama3"])
  manager = peft.CheckpointManager(str(tmp_path / "tunix"))
  with caplog.at_level(logging.WARNING):
    assert manager.maybe_restore(fresh, restore_only_lora_params=True)[0] == 5
  manager.close()
  [warning] = _warnings(caplog, "spectral frequencies")
  assert warning.startswith("checkpoint step 5 holds no spectral frequencies (a LoRA-only save")
  for key, value in _values(model, nnx.LoRAParam).items():
    np.testing.assert_array_equal(_values(fresh, nnx.LoRAParam)[key], value)
  assert all(np.all(v == 0) for v in _values(fresh, SpectralFrequency).values())


# ----------------------------------------------------------------------------
# tunix's trainer, end to end.
# ----------------------------------------------------------------------------


def test_trainer_refuses_a_model_without_spectra(base_dirs):
  with pytest.raises(ValueError, match="has no spectral frequencies; call bifocal_jax.surgery"):
    peft.PeftTrainer(_load("llama3", base_dirs["llama3"]), optax.adam(1e-2), _training_config(1),
                     spectral_learning_rate=1e-2)


@pytest.mark.slow
@pytest.mark.parametrize("family", TRAINED)
def test_tunix_trainer_trains_the_spectra_beside_lora_and_keeps_them_through_save_and_export(
    family, base_dirs, tmp_path):
  """tunix's own trainer loop; LoRA-only checkpoints (tunix's choice with LoRA); merged export."""
  model = _lora_spectral(family, base_dirs[family])
  base = _values(model, nnx.All(nnx.Param, nnx.Not(nnx.LoRAParam), nnx.Not(SpectralFrequency)))
  lora = _values(model, nnx.LoRAParam)
  root = str(tmp_path / "checkpoints")

  # The spectra's own schedule: frozen for the first 2 steps while LoRA moves, then trained.
  adam = optax.inject_hyperparams(optax.adam)(learning_rate=1e-2)
  trainer = peft.PeftTrainer(model, adam, _training_config(4, root), spectral_learning_rate=5e-2,
                             spectral_freeze_steps=2)
  trainer.is_managed_externally = True  # two calls to train(), closed below
  trainer.train(_batches(2))
  assert all(np.all(v == 0) for v in _values(model, SpectralFrequency).values())
  assert any(np.any(v != lora[k]) for k, v in _values(model, nnx.LoRAParam).items())
  trainer.train(_batches(2))
  assert trainer.train_steps == 4
  assert trainer.metrics_logger.get_metric("", "learning_rate", "train") == pytest.approx(1e-2)
  for value in _values(model, SpectralFrequency).values():
    assert np.all(np.abs(value) > 0)
  for key, value in _values(model, nnx.All(nnx.Param, nnx.Not(nnx.LoRAParam),
                                           nnx.Not(SpectralFrequency))).items():
    np.testing.assert_array_equal(value, base[key])
  trainer.close()
  inputs = _inputs()
  trained = _logits(model, *inputs)

  # tunix's trainer alone leaves the spectra where they were (the gap this module closes).
  plain = _lora_spectral(family, base_dirs[family])
  peft.peft_trainer.PeftTrainer(plain, optax.adam(1e-2), _training_config(2)).train(_batches(2))
  assert all(np.all(v == 0) for v in _values(plain, SpectralFrequency).values())

  # A new trainer on the same folder resumes at step 4 with the trained spectra.
  resumed = _lora_spectral(family, base_dirs[family])
  trainer = peft.PeftTrainer(resumed, adam, _training_config(4, root), spectral_learning_rate=5e-2,
                             spectral_freeze_steps=2)
  assert trainer.train_steps == 4
  np.testing.assert_array_equal(_logits(resumed, *inputs), trained)
  trainer.close()

  out = peft.save_lora_merged_model_as_safetensors(base_dirs[family], str(tmp_path / "merged"),
                                                   model, rank=RANK, alpha=ALPHA)
  reloaded = _load(family, out)
  surgery.spectralize(reloaded)
  peft.load_spectra(reloaded, out)
  np.testing.assert_allclose(_logits(reloaded, *inputs), trained, rtol=1e-5, atol=1e-5)
