"""What the extrapolation sweep's tests share: a tiny task and presets over it, a
run's workdir as the trainer and eval.py leave it, and a markdown table's rows."""

import json
import os

from experiments.extrapolation import runs as runs_lib

TASK = runs_lib.TaskSpec("odds_first", variant="tiny", overrides=(("batch_size", 8),))
PRESET = runs_lib.Preset(tasks=(TASK,), kinds=("rope", "bifocal_heads"), seeds=(0, 1),
                         protocol_tasks=("odds_first",), sensitivity_task="odds_first",
                         sensitivity=(("bifocal_heads", "frozen_half",
                                       (("spectral.freeze_steps", runs_lib.OfSteps(0.5)),)),))
# Populations (the accelerator preset): one training per (task, kind).
POPULATIONS = runs_lib.Preset(tasks=(TASK,), kinds=("rope", "bifocal_heads"), seeds=(0, 1),
                              calibrated=False, learning_rates=(1e-3, 3e-4))


def fake_workdir(run, out, *, steps=10, accuracy=0.5, splits=None, curve=()):
  """A run directory as the trainer and eval.py leave it (final checkpoint dir included)."""
  workdir = run.workdir(out)
  os.makedirs(os.path.join(workdir, "eval"), exist_ok=True)
  os.makedirs(os.path.join(workdir, "checkpoints", str(steps)), exist_ok=True)
  with open(os.path.join(workdir, "config.json"), "w") as f:
    json.dump({"steps": steps}, f)
  with open(os.path.join(workdir, "metrics.jsonl"), "w") as f:
    for step, acc in curve:
      f.write(json.dumps({"step": step, "loss": 1.0, "valid_token_accuracy": acc}) + "\n")
    f.write(json.dumps({"step": steps, "loss": 0.25}) + "\n")
  split = dict(source="task", token_accuracy=accuracy, sequence_accuracy=accuracy / 2,
               examples=100, che_score=accuracy, by_length={"4": accuracy},
               by_depth={"0": accuracy},
               ci95=dict(token_accuracy=[accuracy - 0.01, accuracy + 0.01]))
  with open(os.path.join(workdir, "eval", "results.json"), "w") as f:
    json.dump(dict(step=steps, splits={n: split for n in (splits or run.task.split_names)}), f)
  return workdir


def table_rows(markdown, first_cell):
  """The cells of each row of `markdown`'s tables that starts with `first_cell`."""
  return [[c.strip() for c in line.split("|")[1:-1]] for line in markdown.splitlines()
          if line.startswith(f"| {first_cell}")]
