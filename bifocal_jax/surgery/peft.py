"""tunix's own fine-tuning path, keeping the spectra: its PEFT trainer, checkpoints and export.

tunix's `PeftTrainer` optimises `nnx.LoRAParam` alone when the model has
LoRA (qwix), its checkpoints with `save_only_lora_params=True` hold the LoRA
weights alone, and its merged safetensors export has no place for a rotary
spectrum. A model converted by `spectralize` would therefore keep its spectra
frozen, restore them as 0 and export without them. This module closes each gap
without editing tunix:

* `PeftTrainer`: tunix's trainer (a subclass), whose optimizer and gradients
  cover LoRA *and* the spectral frequencies, the spectra in their own group
  (`optim.spectral_evolution`: own learning rate and schedule, optional
  freeze, no weight decay), everything else as tunix does it.
* `CheckpointManager`: tunix's, whose LoRA-only checkpoints hold the spectra
  too; it restores a LoRA-only checkpoint written without them (by tunix's own
  trainer) with one warning line.
* `save_spectra` / `load_spectra`: a small JSON file of the spectral
  parameters (and the frequencies they give, to check the model they are
  loaded into), re-applied after `spectralize`.
* `save_lora_merged_model_as_safetensors`: tunix's merged export (Gemma 3,
  Qwen 3; Llama 3, which tunix 0.1.7 lacks, through tunix's generic saver)
  with `spectra.json` beside `model.safetensors`.

Needs tunix's trainer code and its light dependencies (requirements-hosts.txt),
not tunix's whole stack.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

import jax
import numpy as np
import optax
from absl import logging
from flax import nnx

from bifocal_jax.nn import optim
from bifocal_jax.nn.rope import SpectralFrequency
from bifocal_jax.surgery import tunix_models

peft_trainer = tunix_models.import_tunix("tunix.sft.peft_trainer")
checkpoint_manager = tunix_models.import_tunix("tunix.sft.checkpoint_manager")
profiler = tunix_models.import_tunix("tunix.sft.profiler")

SPECTRA_FILE = "spectra.json"
FORMAT = "bifocal-jax spectra"
VERSION = 1

#: What a LoRA-only checkpoint and the trainer's optimizer cover.
LORA_AND_SPECTRA = nnx.Any(nnx.LoRAParam, SpectralFrequency)


def _path(path) -> str:
  return "/".join(map(str, path))


def spectral_state(model) -> dict[str, Any]:
  """`{path: SpectralFrequency}` for every spectral frequency in `model`, in graph order."""
  return {_path(p): v for p, v in nnx.to_flat_state(nnx.state(model, SpectralFrequency))}


def _require_spectra(model, what: str) -> dict[str, Any]:
  spectra = spectral_state(model)
  if not spectra:
    raise ValueError(f"{what}: {type(model).__name__} has no spectral frequencies; "
                     "call bifocal_jax.surgery.spectralize(model) first")
  return spectra


# ----------------------------------------------------------------------------
# Checkpoints.
# ----------------------------------------------------------------------------


class CheckpointManager(checkpoint_manager.CheckpointManager):
  """tunix's checkpoint manager; its LoRA-only checkpoints hold the spectral frequencies too.

  With `save_only_lora_params=True` (what tunix's trainer passes when the
  model has LoRA) it saves and restores `nnx.state(model, LORA_AND_SPECTRA)`
  through tunix's own code (sharding, Pathways, metadata), so the spectra sit
  in the checkpoint's `model_params` beside the LoRA weights, at their model
  paths. Full-state checkpoints are tunix's unchanged (they hold everything).
  """

  def save(self, step: int, model: nnx.Module, optimizer: nnx.Optimizer | None = None,
           save_only_lora_params: bool = False, force: bool = False,
           custom_metadata: dict[str, Any] | None = None) -> bool:
    # `nnx.state(model, filter)` holds the model's own Variables, so tunix's
    # `nnx.state(view)` of it is exactly the LoRA and spectral state.
    view = nnx.state(model, LORA_AND_SPECTRA) if save_only_lora_params else model
    return super().save(step, view, optimizer, save_only_lora_params=False, force=force,
                        custom_metadata=custom_metadata)

  def maybe_restore(self, model: nnx.Module, optimizer: nnx.Optimizer | None = None,
                    step: int | None = None,
                    restore_only_lora_params: bool = False) -> tuple[int, dict[str, Any]]:
    if not restore_only_lora_params:
      return super().maybe_restore(model, optimizer, step, restore_only_lora_params=False)
    if step is None and self._checkpoint_manager is not None:
      step = self._checkpoint_manager.latest_step()
    if step is None or self._checkpoint_manager is None:
      return 0, {}
    spectra = spectral_state(model)
    if spectra and not self._holds_spectra(step):
      logging.warning(
          "checkpoint step %d holds no spectral frequencies (a LoRA-only save without them, such "
          "as tunix's own PeftTrainer writes): restoring its LoRA weights only; the spectra and "
          "the optimizer state start afresh", step)
      return super().maybe_restore(nnx.state(model, nnx.LoRAParam), None, step,
                                   restore_only_lora_params=False)
    # Updating the view updates the model: it holds the model's Variables.
    return super().maybe_restore(nnx.state(model, LORA_AND_SPECTRA), optimizer, step,
                                 restore_only_lora_params=False)

  def _holds_spectra(self, step: int) -> bool:
    """Whether checkpoint `step`'s `model_params` hold a spectral parameter (by name)."""
    saved = self._checkpoint_manager.metadata(step).item_metadata["model_params"]
    names = {
        str(getattr(k, "key", getattr(k, "name", k)))
        for path, _ in jax.tree_util.tree_flatten_with_path(saved)[0]
        for k in path
    }
    return bool(names & set(optim.SPECTRAL_NAMES))


# ----------------------------------------------------------------------------
# The trainer.
# ----------------------------------------------------------------------------


class PeftTrainer(peft_trainer.PeftTrainer):
  """tunix's `PeftTrainer`, training the spectral frequencies beside LoRA in their own group.

  Used like tunix's (`with_loss_fn`, `with_gen_model_input_fn`, `train`,
  hooks, metrics, checkpoints), on a model converted by `spectralize`
  (before or after qwix's LoRA):

      trainer = peft.PeftTrainer(lora_model, optax.adamw(1e-3), training_config,
                                 spectral_learning_rate=1e-2)

  `optimizer` updates what tunix's would (the LoRA weights when the model has
  LoRA, else every `nnx.Param`); the spectral frequencies get Spectral
  Evolution (`optim.spectral_evolution`: clipping to `spectral_clip_norm`,
  Adam without weight decay, `spectral_learning_rate` after
  `spectral_freeze_steps` frozen steps and a `spectral_warmup_steps` ramp).
  Checkpoints go through `CheckpointManager`, so LoRA-only checkpoints keep
  the spectra. The logged `grad_norm` covers both groups.
  """

  def __init__(self, model: nnx.Module, optimizer: optax.GradientTransformation,
               training_config: peft_trainer.TrainingConfig, *,
               spectral_learning_rate: float | optax.Schedule, spectral_warmup_steps: int = 0,
               spectral_freeze_steps: int = 0, spectral_clip_norm: float | None = 1.0,
               metrics_logger=None, perf_tracer=None, perf_tracer_v2=None):
    _require_spectra(model, "peft.PeftTrainer")
    tx = optim.spectral_evolution(optimizer, spectral_learning_rate=spectral_learning_rate,
                                  warmup_steps=spectral_warmup_steps,
                                  freeze_steps=spectral_freeze_steps, clip_norm=spectral_clip_norm)
    # tunix's constructor builds its optimizer over LoRA alone and restores its
    # checkpoint into it: run it with a stateless optimizer and no checkpoint
    # directory, then build both with the spectra.
    super().__init__(
        model, optax.identity(),
        dataclasses.replace(training_config, checkpoint_root_directory=None,
                            gradient_accumulation_steps=None), metrics_logger, perf_tracer,
        perf_tracer_v2)
    self.config = training_config
    self.wrt = LORA_AND_SPECTRA if self._lora_enabled else nnx.Param
    accumulation = training_config.get_with_default("gradient_accumulation_steps", 1)
    if training_config.gradient_accumulation_steps is not None:
      tx = optax.MultiSteps(tx, accumulation)
    self.optimizer = nnx.Optimizer(model, tx, wrt=self.wrt)
    self.checkpoint_manager = CheckpointManager(
        root_directory=training_config.checkpoint_root_directory,
        options=training_config.checkpointing_options)
    self._train_steps, self._restored_custom_metadata = self.checkpoint_manager.maybe_restore(
        model, self.optimizer, restore_only_lora_params=self._lora_enabled)
    self._iter_steps = self._train_steps * accumulation
    max_step = None if training_config.max_steps is None else training_config.max_steps * accumulation
    self._prof = profiler.Profiler(initial_step=self._iter_steps, max_step=max_step,
                                   profiler_options=training_config.profiler_options)

  def _train_step(self, model: nnx.Module, optimizer: nnx.Optimizer, inputs: Any):
    """tunix's train step, differentiating `self.wrt` (LoRA and spectra) instead of LoRA alone."""
    inputs = self.gen_model_input_fn(inputs)
    grad_fn = nnx.value_and_grad(self.loss_fn, argnums=nnx.DiffState(0, self.wrt),
                                 has_aux=self._has_aux)
    out, grads = grad_fn(model, **inputs)
    grad_norm = optax.global_norm(grads)
    optimizer.update(model, grads)
    if self._has_aux:
      loss, aux = out
      return loss, aux, grad_norm
    return out, None, grad_norm

  def _try_get_learning_rate(self) -> float | None:
    """The LoRA group's injected learning rate (tunix's lookup misses it inside the groups)."""
    try:
      rate = optax.tree_utils.tree_get(self.optimizer.opt_state, "learning_rate")
    except (KeyError, ValueError):  # several, or none found
      return None
    return rate[...] if isinstance(rate, nnx.Variable) else rate


# ----------------------------------------------------------------------------
# The spectra file, and the merged export.
# ----------------------------------------------------------------------------


def _frequencies(model) -> dict[str, np.ndarray]:
  """`{module path: frequencies()}` for every module that owns a spectral frequency."""
  out = {}
  for path, node in nnx.iter_graph(model):
    if isinstance(node, nnx.Module) and callable(getattr(node, "frequencies", None)) and any(
        isinstance(v, SpectralFrequency) for v in vars(node).values()):
      out[_path(path)] = np.asarray(node.frequencies(), np.float32)
  return out


def save_spectra(model: nnx.Module, path: str) -> str:
  """Writes `model`'s spectral parameters to the JSON file `path` (a folder: its `spectra.json`).

  Each parameter is kept at its model path, float32 exactly (JSON numbers of
  the float32 values), with the angular frequencies each rotary module then
  uses (radians per token), which `load_spectra` checks. Returns the file.
  """
  spectra = _require_spectra(model, "save_spectra")
  if os.path.isdir(path):
    path = os.path.join(path, SPECTRA_FILE)
  document = {
      "format": FORMAT,
      "version": VERSION,
      "model": f"{type(model).__module__}.{type(model).__qualname__}",
      "parameters": {
          k: {
              "shape": list(v.shape),
              "values": np.asarray(v[...], np.float32).ravel().tolist()
          } for k, v in spectra.items()
      },
      "frequencies": {
          k: v.tolist() for k, v in _frequencies(model).items()
      },
  }
  with open(path + ".tmp", "w") as f:
    json.dump(document, f)
  os.replace(path + ".tmp", path)
  return path


def load_spectra(model: nnx.Module, path: str) -> int:
  """Sets `model`'s spectral parameters from `save_spectra`'s file; returns how many.

  `model` must have been converted by `spectralize` with the options it was
  trained with (same spectral parameters at the same paths, same shapes; the
  frequencies they give are checked against the saved ones). `path` is the
  file or the folder holding `spectra.json` (a merged export). A folder without
  one gets one warning line (the model keeps its spectrum) and 0.

  Raises:
    ValueError, in one line: the model has no spectra, or the file does not
      fit it (format, paths, shapes, frequencies).
  """
  spectra = _require_spectra(model, "load_spectra")
  if os.path.isdir(path):
    file = os.path.join(path, SPECTRA_FILE)
    if not os.path.exists(file):
      logging.warning(
          "%s holds no %s (exported without its spectra, e.g. by tunix's merged export alone): "
          "the model keeps the spectrum it has", path, SPECTRA_FILE)
      return 0
    path = file
  with open(path) as f:
    document = json.load(f)
  if document.get("format") != FORMAT or document.get("version") != VERSION:
    raise ValueError(f"{path} is not a {FORMAT} file, version {VERSION}")
  saved = document["parameters"]
  if set(saved) != set(spectra):
    missing, extra = sorted(set(spectra) - set(saved)), sorted(set(saved) - set(spectra))
    raise ValueError(f"{path} does not fit the model: its spectra are at other paths "
                     f"(missing {missing[:3]}, unknown {extra[:3]}); spectralize the model as it "
                     "was for training")
  values = {}
  for key, variable in spectra.items():
    shape = tuple(saved[key]["shape"])
    if shape != tuple(variable.shape):
      raise ValueError(f"{path}: {key} has shape {shape}, the model's {tuple(variable.shape)} "
                       "(spectralize with the spectrum= used for training)")
    values[key] = np.asarray(saved[key]["values"], np.float32).reshape(shape)
  previous = {k: v[...] for k, v in spectra.items()}
  for key, variable in spectra.items():
    variable[...] = values[key]
  now = _frequencies(model)
  for key, frequencies in document.get("frequencies", {}).items():
    ours = now.get(key)
    if ours is None or not np.allclose(ours, np.asarray(frequencies), rtol=1e-6, atol=0):
      for k, v in spectra.items():
        v[...] = previous[k]
      raise ValueError(f"{path}: the frequencies at {key} differ from the saved ones: the model's "
                       "original spectrum (base, scale) is not the one trained")
  return len(values)


def _llama3_key(name: str) -> str:
  """tunix's Llama 3 module path to the Hugging Face key: its module names are Hugging Face's."""
  return f"model.{name}.weight".replace(".attn.", ".self_attn.")


_LLAMA3_TRANSPOSE = {
    k: (1, 0) for k in ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
}


def save_lora_merged_model_as_safetensors(local_model_path: str, output_dir: str,
                                          lora_model: nnx.Module, rank: int, alpha: float) -> str:
  """tunix's merged safetensors export of `lora_model`, with its spectra in `spectra.json` beside.

  `local_model_path`: the base model's folder (`model.safetensors`), as for
  tunix's `save_lora_merged_model_as_safetensors` of Gemma 3 and Qwen 3;
  Llama 3 goes through tunix's generic saver with Hugging Face's key names.
  A model without spectra is exported as tunix does it. Returns `output_dir`.
  Reload: tunix's `create_model_from_safe_tensors(output_dir, config)`,
  `spectralize(model)`, `load_spectra(model, output_dir)`.
  """
  # qwix gives a LoRA model a class of its own, a subclass of tunix's.
  family = next(
      (c.__module__ for c in type(lora_model).__mro__ if c.__module__ in tunix_models.FAMILIES),
      type(lora_model).__module__)
  if family == "tunix.models.llama3.model":
    saver = tunix_models.import_tunix("tunix.models.safetensors_saver")
    saver.save_lora_merged_model_as_safetensors(local_model_path=local_model_path,
                                                output_dir=output_dir, lora_model=lora_model,
                                                rank=rank, alpha=alpha,
                                                state_key_transform_fn=_llama3_key,
                                                transpose_rules=_LLAMA3_TRANSPOSE)
  elif family in ("tunix.models.gemma3.model", "tunix.models.qwen3.model"):
    params = tunix_models.import_tunix(family.rsplit(".", 1)[0] + ".params")
    params.save_lora_merged_model_as_safetensors(local_model_path, output_dir, lora_model, rank,
                                                 alpha)
  else:
    raise ValueError(f"no merged export for {type(lora_model).__qualname__} ({family}): "
                     "tunix's Gemma 3, Llama 3 and Qwen 3 are supported")
  if spectral_state(lora_model):
    save_spectra(lora_model, output_dir)
  return output_dir
