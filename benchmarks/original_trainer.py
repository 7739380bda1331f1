r"""DeepMind's Chomsky-hierarchy trainer itself, run from a checkout, timed.

`reference_trainer.py --reference_checkout DIR` starts this script as a
subprocess (its own imports and allocator) after timing this project's
trainer, so that both are measured on the same machine in the same run:

  python -m benchmarks.original_trainer --reference_checkout DIR \
      --lengths_file LENGTHS.json --out /tmp/original.json

DIR is a checkout of github.com/google-deepmind/neural_networks_chomsky_hierarchy
(not vendored here; it needs dm-haiku, chex, optax and tqdm, which this
project's environment has). Its code imports itself as the package
`neural_networks_chomsky_hierarchy`, which is registered here with DIR as its
path: nothing in it is changed. What runs is their `odds_first` transformer run
as the paper's protocol and their `experiments/example.py` build it:
`OddsFirst()`, `make_transformer_encoder` (5 layers, width 64, 8 heads,
ROTARY positional encodings, dropout 0.1) wrapped by
`make_model_with_empty_targets`, their loss and accuracy from the example,
and their `training.TrainingWorker` (Adam 1e-3, clipping at 1, batch 128, the
loss read every 100 steps), with no range evaluation. The one thing supplied
from outside is the curriculum: a `Curriculum` of theirs that replays the
input lengths in LENGTHS.json (one per step), so both trainers see the same
lengths. Their loop runs `training_steps + 1` steps; it is given `steps - 1`
so that it runs exactly one step per length.

Reported: end to end (building the model and worker, their `run()`, until the
final parameters are ready on the host), and from timestamps taken when their
loop asks the curriculum for each step's length: setup (until the first step)
and the first call at each new length (their jit compiles one update step
per length; the compilation happens inside that call).
"""

from __future__ import annotations

import json
import os
import sys
import time
import types

from absl import app, flags

PACKAGE = "neural_networks_chomsky_hierarchy"
# What a checkout must hold for this script to run it.
REQUIRED_FILES = ("experiments/training.py", "experiments/curriculum.py", "experiments/utils.py",
                  "models/transformer.py", "models/positional_encodings.py",
                  "tasks/cs/odds_first.py")

FLAGS = flags.FLAGS


def checkout_problem(path: str | None) -> str | None:
  """Why `path` is not a checkout this script can run (one line), or None."""
  if not path:
    return "--reference_checkout is empty"
  if not os.path.isdir(path):
    return f"--reference_checkout={path!r}: not a directory"
  missing = [f for f in REQUIRED_FILES if not os.path.isfile(os.path.join(path, f))]
  if missing:
    return (f"--reference_checkout={path!r}: not a checkout of {PACKAGE} "
            f"(no {missing[0]})")
  return None


def register_checkout(path: str) -> None:
  """Makes `import neural_networks_chomsky_hierarchy.X` load `path/X`
  (the checkout's directories are namespace packages: no __init__.py)."""
  package = types.ModuleType(PACKAGE)
  package.__path__ = [os.path.abspath(path)]
  sys.modules[PACKAGE] = package


def run(checkout: str, lengths: list[int], *, smoke: bool = False) -> dict:
  """Their trainer on `lengths` (one step each); timings and losses."""
  register_checkout(checkout)
  # pylint: disable=g-import-not-at-top
  import haiku as hk
  import jax
  import jax.numpy as jnp
  from neural_networks_chomsky_hierarchy.experiments import curriculum as curriculum_lib
  from neural_networks_chomsky_hierarchy.experiments import training
  from neural_networks_chomsky_hierarchy.experiments import utils
  from neural_networks_chomsky_hierarchy.models import positional_encodings as pos_encs_lib
  from neural_networks_chomsky_hierarchy.models import transformer
  from neural_networks_chomsky_hierarchy.tasks.cs import odds_first
  # pylint: enable=g-import-not-at-top

  class Replay(curriculum_lib.Curriculum):
    """The given lengths in order; notes when the loop asks for each."""

    def __init__(self):
      self.asked = []

    def sample_sequence_length(self, step: int) -> int:
      self.asked.append(time.perf_counter())
      return int(lengths[step])

  sizes = (dict(embedding_dim=16, num_layers=1, num_heads=2) if smoke else
           dict(embedding_dim=64, num_layers=5, num_heads=8))
  batch_size = 8 if smoke else 128
  start, start_cpu = time.perf_counter(), time.process_time()
  task = odds_first.OddsFirst()
  model = transformer.make_transformer_encoder(
      output_size=task.output_size, return_all_outputs=True,
      positional_encodings=pos_encs_lib.PositionalEncodings.ROTARY,
      positional_encodings_params=pos_encs_lib.RotaryParams(), **sizes)
  model = hk.transform(utils.make_model_with_empty_targets(model, task))

  # Their example's loss and accuracy (experiments/example.py).
  def loss_fn(output, target):
    return jnp.mean(jnp.sum(task.pointwise_loss_fn(output, target), axis=-1)), {}

  def accuracy_fn(output, target):
    mask = task.accuracy_mask(target)
    return jnp.sum(mask * task.accuracy_fn(output, target)) / jnp.sum(mask)

  curriculum = Replay()
  params = training.ClassicTrainingParams(
      seed=0, model_init_seed=0, training_steps=len(lengths) - 1, log_frequency=100,
      length_curriculum=curriculum, batch_size=batch_size, task=task, model=model,
      loss_fn=loss_fn, learning_rate=1e-3, accuracy_fn=accuracy_fn,
      compute_full_range_test=False, is_autoregressive=False)
  results, _, final_params = training.TrainingWorker(params, use_tqdm=False).run()
  jax.block_until_ready(final_params)
  end, end_cpu = time.perf_counter(), time.process_time()
  if len(curriculum.asked) != len(lengths):
    raise AssertionError(f"their loop ran {len(curriculum.asked)} steps, not {len(lengths)}")
  marks = curriculum.asked + [end]
  first_calls = {}
  for step, n in enumerate(lengths):
    if n not in first_calls:
      first_calls[n] = marks[step + 1] - marks[step]
  return dict(
      steps=len(lengths), batch_size=batch_size, model=sizes, positional_encodings="ROTARY",
      haiku=hk.__version__, jax=jax.__version__, compilations=len(first_calls),
      setup_seconds=marks[0] - start, loop_seconds=end - marks[0],
      end_to_end_seconds=end - start, end_to_end_cpu_seconds=end_cpu - start_cpu,
      first_call_seconds_sum=sum(first_calls.values()),
      tokens=2 * sum(lengths) * batch_size,
      losses=[r["train_loss"] for r in results], log_steps=[r["step"] for r in results])


def main(argv):
  del argv
  problem = checkout_problem(FLAGS.reference_checkout)
  if problem:
    print(f"error: {problem}", file=sys.stderr)
    sys.exit(2)
  with open(FLAGS.lengths_file) as f:
    lengths = [int(n) for n in json.load(f)]
  r = run(FLAGS.reference_checkout, lengths, smoke=FLAGS.smoke)
  print(f"their trainer: {r['steps']} steps, end-to-end {r['end_to_end_seconds']:.1f} s (setup "
        f"{r['setup_seconds']:.1f} s, first calls at {r['compilations']} lengths "
        f"{r['first_call_seconds_sum']:.1f} s)")
  if FLAGS.out:
    with open(FLAGS.out, "w") as f:
      json.dump(r, f, indent=2, sort_keys=True)


if __name__ == "__main__":
  # Defined here, not at import: reference_trainer.py imports this module and
  # has flags of the same names.
  flags.DEFINE_string("reference_checkout", None, "A checkout of neural_networks_chomsky_hierarchy.")
  flags.DEFINE_string("lengths_file", None, "JSON list: the input length of each step.")
  flags.DEFINE_bool("smoke", False, "Tiny model (width 16, 1 layer, 2 heads, batch 8).")
  flags.DEFINE_string("out", None, "Write the results as JSON here.")
  flags.mark_flags_as_required(["reference_checkout", "lengths_file"])
  app.run(main)
