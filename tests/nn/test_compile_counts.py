"""The train and evaluation steps compile once per length bucket, never per batch.

Batches of the tiny Dyck config come padded to one of two buckets; many more
batches than buckets go through each jitted step. `chex.assert_max_traces`
on the loss (called once per trace of either step) fails on any retrace, and
the jitted steps must hold one executable per bucket seen.
"""

import chex
import helpers
import jax
import numpy as np

from bifocal_jax.training import metrics as metrics_lib
from bifocal_jax.training import sharding, steps
from bifocal_jax import tasks
from bifocal_jax.training import state as state_lib
from bifocal_jax.tasks import pipeline


BUCKETS = (20, 40)
BATCHES = 12


def batches_of_both_buckets(task, batch_size):
  """`BATCHES` batches of the training pipeline whose widths cover both buckets."""
  data = iter(pipeline.train_dataset(task, batch_size_per_process=batch_size, seed=0,
                                     buckets=BUCKETS))
  out = [next(data) for _ in range(4 * BATCHES)]
  by_width = {w: [b for b in out if b["inputs"].shape[1] == w] for w in BUCKETS}
  assert all(len(bs) >= 2 for bs in by_width.values()), {w: len(bs) for w, bs in by_width.items()}
  # Alternate the buckets, so a step that recompiled on a change of shape would show.
  return [by_width[BUCKETS[i % 2]][i // 2 % len(by_width[BUCKETS[i % 2]])] for i in range(BATCHES)]


def test_steps_compile_once_per_bucket(monkeypatch):
  config = helpers.tiny_config({"batch_size": 2, "buckets": BUCKETS})
  task = tasks.get_task(config.task)
  mesh = sharding.make_mesh(config.mesh)
  batches = batches_of_both_buckets(task, config.batch_size)
  # Traced once per bucket by the train step and once per bucket by the eval step.
  counted = chex.assert_max_traces(metrics_lib.masked_cross_entropy, n=2 * len(BUCKETS))
  monkeypatch.setattr(metrics_lib, "masked_cross_entropy", counted)
  with jax.set_mesh(mesh):
    s, state = state_lib.setup(config, mesh, task=task)
    train_step, eval_step = steps.make_train_step(s), steps.make_eval_step(s)
    rng = jax.random.key(0)
    for batch in batches:
      state, metrics = train_step(state, steps.to_global_batch(batch, mesh))
      counts = eval_step(state["params"], steps.to_global_batch(batch, mesh, steps.EVAL_FIELDS),
                         rng)
    jax.block_until_ready((metrics, counts))
  assert int(state["step"]) == BATCHES
  assert train_step._cache_size() == len(BUCKETS)  # pylint: disable=protected-access
  assert eval_step._cache_size() == len(BUCKETS)  # pylint: disable=protected-access
  assert np.isfinite(float(metrics["loss"]))


def test_rotary_angles_are_computed_once_per_layer():
  """cos/sin of the spectral angles: once per layer in the compiled step (the
  backward pass reuses them), not per head, per query/key or per gradient."""
  layers = 2
  config = helpers.tiny_config({"model.num_layers": layers})
  task = tasks.get_task(config.task)
  mesh = sharding.make_mesh(config.mesh)
  with jax.set_mesh(mesh):
    s, state = state_lib.setup(config, mesh, task=task)
    batch = next(iter(pipeline.train_dataset(task, batch_size_per_process=config.batch_size,
                                             seed=0, buckets=config.buckets)))
    hlo = steps.make_train_step(s).lower(state, steps.to_global_batch(batch, mesh)).compile()
  text = hlo.as_text()
  width, heads = batch["inputs"].shape[1], config.model.num_heads
  pairs = config.model.d_model // heads // 2
  angles = f"f32[1,{width},{heads},{pairs}]"
  for op in ("cosine", "sine"):
    count = sum(1 for line in text.splitlines() if f"= {angles}" in line and f" {op}(" in line)
    assert count == layers, (op, count)
