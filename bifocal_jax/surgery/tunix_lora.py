r"""tunix's LoRA fine-tuning with Spectral Evolution, end to end: a runnable example.

  python -m bifocal_jax.surgery.tunix_lora --workdir /tmp/tunix_lora
  python -m bifocal_jax.surgery.tunix_lora --workdir /tmp/tunix_lora --family llama3 --steps 60

1. Build a tiny tunix model (`--family`: gemma3, llama3 or qwen3; random weights,
   as no checkpoint can be downloaded here). With a real one, load it the way
   tunix documents (`params.create_model_from_safe_tensors(folder, config)`)
   and continue from step 2.
2. qwix LoRA (`--rank`, `--alpha`) on the attention and MLP projections.
3. `surgery.spectralize(model)`: every attention layer gets its own trainable
   spectrum (one per KV head), initialised from its own base, so the model's
   outputs do not change (checked).
4. Fine-tune with `surgery.peft.PeftTrainer`, tunix's trainer whose optimizer
   covers LoRA *and* the spectra (the spectra in their own group: their own
   learning rate, frozen for `--spectral_freeze_steps`), on a synthetic copy
   task (random tokens, then the same tokens again: the second half needs
   attention by position). Its checkpoints (`WORKDIR/checkpoints`: LoRA and
   spectra) resume a re-run.
5. Write `WORKDIR/spectra.json` (`peft.save_spectra`: reload with
   `peft.load_spectra` after `spectralize`) and `WORKDIR/summary.json`.

Needs tunix's model and trainer code, qwix and metrax: `pip install
'bifocal-jax[tunix]'` (`tunix_models.INSTALL`). The flags are parsed, and
reported in one line with exit status 2 when wrong, before any of it is imported.
"""

from __future__ import annotations

import json
import os

from absl import app
from absl import flags

from bifocal_jax import cli


def define_flags() -> dict:
  """The command's flags, defined when it runs (not at import: a notebook or a
  test may import this module beside other absl programs' `--workdir`)."""
  return dict(
      workdir=flags.DEFINE_string(
          "workdir", None, "Where checkpoints, spectra.json and summary.json go (a re-run "
          "resumes from its checkpoints)."),
      family=flags.DEFINE_enum("family", "gemma3", ["gemma3", "llama3", "qwen3"],
                               "The tunix model family."),
      steps=flags.DEFINE_integer("steps", 20, "Fine-tuning steps.", lower_bound=1),
      rank=flags.DEFINE_integer("rank", 4, "LoRA rank.", lower_bound=1),
      alpha=flags.DEFINE_float("alpha", 8.0, "LoRA alpha."),
      learning_rate=flags.DEFINE_float("learning_rate", 3e-3, "LoRA's learning rate (Adam)."),
      spectral_learning_rate=flags.DEFINE_float("spectral_learning_rate", 3e-2,
                                                "The spectra's learning rate."),
      spectral_freeze_steps=flags.DEFINE_integer("spectral_freeze_steps", 5,
                                                 "Steps the spectra stay frozen while LoRA moves.",
                                                 lower_bound=0),
      seed=flags.DEFINE_integer("seed", 0, "Seed of the weights and the data."),
  )


# The tiny model, and the copy task it is fine-tuned on.
VOCAB, EMBED, HIDDEN, HEADS, KV_HEADS, HEAD_DIM, LAYERS = 32, 64, 128, 4, 2, 16, 2
BATCH, HALF = 8, 12  # sequences of 2 * HALF tokens
LORA_TARGETS = {
    "gemma3": ".*q_einsum|.*kv_einsum|.*attn_vec_einsum|.*gate_proj|.*up_proj|.*down_proj",
    "llama3": ".*q_proj|.*k_proj|.*v_proj|.*o_proj|.*gate_proj|.*up_proj|.*down_proj",
    "qwen3": ".*q_proj|.*k_proj|.*v_proj|.*o_proj|.*gate_proj|.*up_proj|.*down_proj",
}
MODEL_CLASSES = {"gemma3": "Gemma3", "llama3": "Llama3", "qwen3": "Qwen3"}


def tiny_model(family: str, seed: int = 0):
  """A 2-layer tunix model of `family` with random weights (drawn on the host)."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from flax import nnx  # pylint: disable=g-import-not-at-top
  from bifocal_jax.surgery import tunix_models  # pylint: disable=g-import-not-at-top
  module = tunix_models.import_model(family)
  if family == "gemma3":
    config = module.ModelConfig(num_layers=LAYERS, num_embed=VOCAB, embed_dim=EMBED,
                                hidden_dim=HIDDEN, num_heads=HEADS, head_dim=HEAD_DIM,
                                num_kv_heads=KV_HEADS, sliding_window_size=16,
                                param_dtype=jnp.float32)
  else:
    sizes = dict(num_layers=LAYERS, vocab_size=VOCAB, embed_dim=EMBED, hidden_dim=HIDDEN,
                 num_heads=HEADS, head_dim=HEAD_DIM, num_kv_heads=KV_HEADS, rope_theta=10_000,
                 norm_eps=1e-6)
    tied = "use_tied_embedding" if family == "qwen3" else "weight_tying"
    config = module.ModelConfig(**sizes, **{tied: True})
  cls = getattr(module, MODEL_CLASSES[family])
  model = nnx.eval_shape(lambda: cls(config, rngs=nnx.Rngs(seed)))
  rng = np.random.default_rng(seed)
  nnx.update(
      model,
      jax.tree.map(lambda a: jnp.asarray(rng.normal(scale=0.1, size=a.shape), a.dtype),
                   nnx.state(model)))
  return model


def copy_batches(steps: int, seed: int = 0) -> list[dict]:
  """tunix's training inputs (`input_tokens`, `input_mask`, `positions`,
  `attention_mask`): random tokens, then the same ones again."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(seed + 1)
  length = 2 * HALF
  positions = jnp.broadcast_to(jnp.arange(length)[None], (BATCH, length))
  causal = jnp.broadcast_to(
      jnp.tril(jnp.ones((length, length), bool))[None], (BATCH, length, length))
  batches = []
  for _ in range(steps):
    half = rng.integers(1, VOCAB, (BATCH, HALF))
    tokens = jnp.asarray(np.concatenate([half, half], axis=1), jnp.int32)
    batches.append(
        dict(input_tokens=tokens, input_mask=jnp.ones((BATCH, length), bool), positions=positions,
             attention_mask=causal))
  return batches


def run(workdir: str, *, family: str = "gemma3", steps: int = 20, rank: int = 4, alpha: float = 8.0,
        learning_rate: float = 3e-3, spectral_learning_rate: float = 3e-2,
        spectral_freeze_steps: int = 5, seed: int = 0) -> dict:
  """The whole example; returns (and writes) its summary."""
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  import optax  # pylint: disable=g-import-not-at-top
  from flax import nnx  # pylint: disable=g-import-not-at-top
  from bifocal_jax import surgery  # pylint: disable=g-import-not-at-top
  from bifocal_jax.nn.rope import SpectralFrequency  # pylint: disable=g-import-not-at-top
  from bifocal_jax.surgery import peft  # pylint: disable=g-import-not-at-top
  from bifocal_jax.surgery import tunix_models  # pylint: disable=g-import-not-at-top
  try:
    import qwix  # pylint: disable=g-import-not-at-top
  except ModuleNotFoundError:
    raise ImportError(f"qwix (LoRA) is not installed: {tunix_models.INSTALL}") from None

  os.makedirs(workdir, exist_ok=True)
  batches = copy_batches(steps, seed)
  probe = batches[0]
  inputs = (probe["input_tokens"], probe["positions"], None, probe["attention_mask"])

  @nnx.jit
  def logits(model):
    return model(*inputs)[0]

  model = tiny_model(family, seed)
  provider = qwix.LoraProvider(module_path=LORA_TARGETS[family], rank=rank, alpha=alpha)
  model = qwix.apply_lora_to_model(model, provider, *inputs, rngs=nnx.Rngs(seed))
  before = np.asarray(logits(model))
  layers = surgery.spectralize(model)
  step0_change = float(np.max(np.abs(np.asarray(logits(model)) - before)))

  config = peft.peft_trainer.TrainingConfig(
      eval_every_n_steps=steps + 1, max_steps=steps, pbar_description=None,
      checkpoint_root_directory=os.path.join(os.path.abspath(workdir), "checkpoints"))
  trainer = peft.PeftTrainer(model,
                             optax.inject_hyperparams(optax.adam)(learning_rate=learning_rate),
                             config, spectral_learning_rate=spectral_learning_rate,
                             spectral_freeze_steps=spectral_freeze_steps)
  start = trainer.train_steps  # > 0: resumed from WORKDIR/checkpoints
  losses = []
  if start < steps:
    trainer.train(batches[start:])
    losses = [float(x) for x in trainer.metrics_logger.get_metric_history("", "loss", "train")]
  trainer.close()

  spectra = {
      "/".join(map(str, p)): np.asarray(v[...])
      for p, v in nnx.to_flat_state(nnx.state(model, SpectralFrequency))
  }
  peft.save_spectra(model, os.path.join(workdir, peft.SPECTRA_FILE))
  summary = dict(family=family, converted_layers=layers, step0_max_logit_change=step0_change,
                 steps=steps, resumed_from=start, losses=losses,
                 largest_spectral_parameter=float(max(np.abs(v).max() for v in spectra.values())),
                 spectra_file=os.path.join(os.path.abspath(workdir), peft.SPECTRA_FILE),
                 checkpoints=config.checkpoint_root_directory, devices=jax.device_count())
  with open(os.path.join(workdir, "summary.json"), "w") as f:
    json.dump(summary, f, indent=1)
  return summary


def main(argv, options: dict) -> None:
  """`options`: `define_flags()`'s flags, parsed."""
  values = {name: flag.value for name, flag in options.items()}
  if len(argv) > 1:
    cli.fail(f"unexpected arguments {argv[1:]} (the options are flags: --help lists them)")
  workdir = values.pop("workdir")
  if not workdir:
    cli.fail("--workdir is required: where checkpoints, spectra.json and summary.json go")
  cli.quiet_library_logs()  # Orbax's INFO lines, per checkpoint
  try:
    summary = run(workdir, **values)
  except ImportError as e:
    cli.fail(cli.first_line(e))
  losses = summary["losses"]
  trained = (f"steps {summary['resumed_from'] + 1}..{summary['steps']}: loss {losses[0]:.4f} -> "
             f"{losses[-1]:.4f}" if losses else
             f"already at step {summary['steps']} (checkpoints in {summary['checkpoints']})")
  print(f"{summary['family']}: {summary['converted_layers']} attention layers spectralized "
        f"(logits changed by {summary['step0_max_logit_change']:.1e}), LoRA rank "
        f"{values['rank']}; {trained}\nwrote {summary['spectra_file']} and "
        f"{os.path.join(os.path.abspath(workdir), 'summary.json')}")


if __name__ == "__main__":
  _options = define_flags()
  app.run(lambda argv: main(argv, _options), flags_parser=cli.flags_parser())
