"""Surgical Integration on tunix's Gemma 3, then Spectral Evolution on Dyck: the whole path.

1. Build a tiny tunix Gemma 3 (random weights: no checkpoint can be downloaded here; with
   one, load it as tunix documents, then continue from step 2).
2. `surgery.spectralize(model)`: every attention layer gets its own trainable spectrum
   (one per KV head), the model's loss unchanged (checked).
3. Fine-tune on Dyck-(k, m) from `bifocal_jax.tasks` (its grain training pipeline),
   with `optim.spectral_evolution`: AdamW for the weights, the spectra in their own group.
4. Record every layer's frequencies along the way and plot the trajectory with
   `spectrum.plot_trajectory`; evaluate token accuracy on the `valid` split.

    python examples/tunix_gemma3_dyck.py --workdir /tmp/tunix_dyck --steps 200

Writes `trajectory.png`, `trajectory.npz` (steps, frequencies [T, layers, kv heads,
pairs]) and `summary.json` into `--workdir`. tunix's model code must be installed
(`make venv` does it; see docs/getting_started.md).
"""

from __future__ import annotations

import json
import os

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from absl import app, flags
from flax import nnx

from bifocal_jax.evaluation import spectrum
from bifocal_jax.nn import optim
from bifocal_jax import surgery, tasks
from bifocal_jax.surgery import tunix_models
from bifocal_jax.tasks import pipeline

flags.DEFINE_string("workdir", None, "Where the plot, trajectory and summary go.")
flags.DEFINE_integer("steps", 200, "Fine-tuning steps.")
flags.DEFINE_integer("record_every", 10, "Steps between recorded spectra.")
FLAGS = flags.FLAGS

WIDTH = 24  # every training sequence fits: one compilation


def dyck_config() -> ml_collections.ConfigDict:
  """Dyck-(4, 3) on short strings (the example must run in seconds)."""
  config = tasks.default_task_config("dyck")
  config.k, config.m = 4, 3
  for name, (low, high, size) in dict(train=(3, WIDTH - 1, 1 << 16), valid=(3, WIDTH - 1, 64),
                                      test_length=(WIDTH + 1, 2 * WIDTH, 32),
                                      test_depth=(3, WIDTH - 1, 32)).items():
    split = config[name]
    split.min_length, split.max_length, split.size = low, high, size
  return config


def tiny_gemma3(vocab_size: int, seed: int = 0):
  """A 2-layer tunix Gemma 3 (local attention, sliding window 16), random weights."""
  gemma3 = tunix_models.import_model("gemma3")
  config = gemma3.ModelConfig(
      num_layers=2, num_embed=vocab_size, embed_dim=64, hidden_dim=128, num_heads=4,
      head_dim=16, num_kv_heads=2, sliding_window_size=16, param_dtype=jnp.float32)
  model = nnx.eval_shape(lambda: gemma3.Gemma3(config, rngs=nnx.Rngs(seed)))
  rng = np.random.default_rng(seed)  # host-side init: no XLA program to compile for it
  nnx.update(model, jax.tree.map(
      lambda a: jnp.asarray(rng.normal(scale=0.1, size=a.shape), a.dtype), nnx.state(model)))
  return model


def forward(model, batch):
  """Logits `[B, L, vocab]`: causal attention over the valid tokens."""
  inputs = jnp.asarray(batch["inputs"])
  length = inputs.shape[1]
  positions = jnp.broadcast_to(jnp.arange(length)[None], inputs.shape)
  valid = jnp.asarray(batch["valid"])
  mask = jnp.tril(jnp.ones((length, length), bool))[None] & valid[:, None, :]
  return model(inputs, positions, None, mask)[0]


def loss_and_accuracy(model, batch):
  logits = forward(model, batch)
  mask = jnp.asarray(batch["mask"])
  targets = jnp.asarray(batch["targets"])
  losses = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
  correct = (jnp.argmax(logits, -1) == targets).astype(jnp.float32)
  total = jnp.maximum(mask.sum(), 1.0)
  return (losses * mask).sum() / total, (correct * mask).sum() / total


@nnx.jit
def train_step(model, optimizer, batch):
  (loss, accuracy), grads = nnx.value_and_grad(loss_and_accuracy, has_aux=True)(model, batch)
  optimizer.update(model, grads)
  return loss, accuracy


def spectra(model) -> np.ndarray:
  """Every layer's frequencies, `[layers, kv heads, pairs]` (radians per token)."""
  ropes = [node for _, node in nnx.iter_graph(model) if isinstance(node, tunix_models.TunixRoPE)]
  return np.stack([np.asarray(rope.frequencies()) for rope in ropes])


def run(workdir: str, steps: int = 200, record_every: int = 10, batch_size: int = 16) -> dict:
  """The whole example; returns (and writes) its summary."""
  os.makedirs(workdir, exist_ok=True)
  task = tasks.get_task(dyck_config())
  model = tiny_gemma3(task.vocab_size)
  probe = task.batch("valid", np.arange(batch_size), WIDTH)
  evaluate = nnx.jit(loss_and_accuracy)
  before = float(evaluate(model, probe)[0])
  layers = surgery.spectralize(model)
  step0_change = abs(float(evaluate(model, probe)[0]) - before)

  tx = optim.spectral_evolution(
      optax.adamw(3e-3, weight_decay=0.01), spectral_learning_rate=3e-2, warmup_steps=10)
  optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
  batches = iter(pipeline.train_dataset(task, batch_size_per_process=batch_size, seed=0,
                                        buckets=[WIDTH]))
  recorded_steps, recorded, losses = [0], [spectra(model)], []
  for step in range(1, steps + 1):
    loss, _ = train_step(model, optimizer, next(batches))
    losses.append(float(loss))
    if step % record_every == 0 or step == steps:
      recorded_steps.append(step)
      recorded.append(spectra(model))
  steps_array, trajectory = np.asarray(recorded_steps), np.stack(recorded)
  np.savez(os.path.join(workdir, "trajectory.npz"), steps=steps_array, frequencies=trajectory)
  spectrum.plot_trajectory(steps_array, trajectory, os.path.join(workdir, "trajectory.png"))

  accuracies = [float(evaluate(model, batch)[1])
                for batch in pipeline.eval_batches(task, "valid", batch_size=batch_size,
                                                   buckets=[WIDTH])]
  summary = dict(
      converted_layers=layers, step0_loss_change=step0_change, steps=steps,
      first_loss=losses[0], last_loss=losses[-1], valid_token_accuracy=float(np.mean(accuracies)),
      largest_relative_frequency_change=float(np.max(np.abs(trajectory[-1] / trajectory[0] - 1))))
  with open(os.path.join(workdir, "summary.json"), "w") as f:
    json.dump(summary, f, indent=1)
  return summary


def main(argv):
  del argv
  print(json.dumps(run(FLAGS.workdir, FLAGS.steps, FLAGS.record_every), indent=1))


if __name__ == "__main__":
  flags.mark_flag_as_required("workdir")
  app.run(main)
