r"""Examples per second of the training pipeline, on one CPU core.

  python -m benchmarks.data_throughput                     # default Dyck task, batch 32
  python -m benchmarks.data_throughput --task=modular_arithmetic_brackets --batch_size=64
  python -m benchmarks.data_throughput --train_config=configs/dyck.py   # + the train step

The process is pinned to one core (`--cpu`, -1: no pinning), so the figure is
what one host core feeds. With `--train_config`, the same batches also go
through that config's jit-compiled train step (same task and batch size), and
the ratio pipeline / train step is printed: the pipeline should be >= 10x faster.
The train step runs unpinned (all cores), as in training.
"""

import os
import time

from absl import app, flags
from ml_collections import config_flags

from bifocal_jax import tasks
from bifocal_jax.tasks import pipeline

_TASK = flags.DEFINE_enum("task", "dyck", tasks.TASK_NAMES, "Task (its default config).")
_BATCH = flags.DEFINE_integer("batch_size", 32, "Batch size.", lower_bound=1)
_STEPS = flags.DEFINE_integer("steps", 200, "Batches per timed repeat.", lower_bound=1)
_REPEATS = flags.DEFINE_integer("repeats", 5, "Timed repeats; the fastest counts (as timeit).",
                                lower_bound=1)
_CPU = flags.DEFINE_integer("cpu", 0, "Core to pin the process to; -1: no pinning.")
_TRAIN_CONFIG = config_flags.DEFINE_config_file(
    "train_config", None, "Training config whose train step to time as well (its task is used).")


def time_iterator(iterator, steps, repeats):
  """(fastest seconds for `steps` items over `repeats`, after a warm-up item; the items)."""
  next(iterator)
  best, items = float("inf"), []
  for _ in range(repeats):
    start = time.perf_counter()
    items += [next(iterator) for _ in range(steps)]
    best = min(best, time.perf_counter() - start)
  return best, items


def time_train_step(config, task, batches):
  """Seconds per train step of `config` on `batches` (after compiling each shape)."""
  import jax  # pylint: disable=g-import-not-at-top
  from bifocal_jax.training import sharding  # pylint: disable=g-import-not-at-top
  from bifocal_jax.training import steps as steps_lib  # pylint: disable=g-import-not-at-top
  from bifocal_jax.training import state as state_lib  # pylint: disable=g-import-not-at-top

  mesh = sharding.make_mesh(config.mesh)
  with jax.set_mesh(mesh):
    setup, state = state_lib.setup(config, mesh, task=task)
    train_step = steps_lib.make_train_step(setup)
    global_batches = [steps_lib.to_global_batch(b, mesh) for b in batches]
    for shape in {b["inputs"].shape: b for b in global_batches}.values():  # compile each bucket.
      state, metrics = train_step(state, shape)
    jax.block_until_ready(metrics)
    start = time.perf_counter()
    for batch in global_batches:
      state, metrics = train_step(state, batch)
    jax.block_until_ready(metrics)
  return (time.perf_counter() - start) / len(global_batches)


def main(argv):
  del argv
  all_cores = os.sched_getaffinity(0)
  if _CPU.value >= 0:
    os.sched_setaffinity(0, {_CPU.value})
  train_config = _TRAIN_CONFIG.value
  task_config = train_config.task if train_config else tasks.default_task_config(_TASK.value)
  batch_size = train_config.batch_size if train_config else _BATCH.value
  task = tasks.get_task(task_config)
  buckets = pipeline.length_buckets(task.max_sequence_length("train"))
  dataset = pipeline.train_dataset(task, batch_size_per_process=batch_size, seed=0,
                                   buckets=buckets)
  seconds, batches = time_iterator(iter(dataset), _STEPS.value, _REPEATS.value)
  examples_per_sec = _STEPS.value * batch_size / seconds
  tokens = sum(int(b["valid"].sum()) for b in batches) / _REPEATS.value
  padded = sum(b["valid"].size for b in batches) / _REPEATS.value
  cores = "all cores" if _CPU.value < 0 else "1 core"
  print(f"{task.name}: batch {batch_size}, lengths {task.split('train').min_length}.."
        f"{task.split('train').max_length}, buckets {buckets}, {cores}")
  print(f"pipeline: {examples_per_sec:,.0f} examples/s, {tokens / seconds:,.0f} tokens/s "
        f"({_STEPS.value / seconds:,.1f} batches/s; {1 - tokens / padded:.0%} padding)")
  if train_config:
    os.sched_setaffinity(0, all_cores)
    step_seconds = time_train_step(train_config, task, batches[:50])
    print(f"train step: {batch_size / step_seconds:,.0f} examples/s "
          f"({1 / step_seconds:,.1f} steps/s); pipeline / train step = "
          f"{examples_per_sec * step_seconds / batch_size:,.1f}x")


if __name__ == "__main__":
  app.run(main)
