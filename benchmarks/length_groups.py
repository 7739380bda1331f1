r"""Length groups (`config.data.length_groups`) against one padded batch: the
training step's time on the sweep's own batches.

  python -m benchmarks.length_groups                        # the converged sweep's depth tasks
  python -m benchmarks.length_groups --tasks=listops_depth --groups=1,4 --rounds=3
  python -m benchmarks.length_groups --out=results/benchmarks/length_groups.json
  python -m benchmarks.length_groups --tasks=smoke --steps=2 --rounds=1   # seconds (tests)

Each task is a task of the `converged` preset (`experiments/extrapolation/presets.py`)
configured as its runs are (`configs/<task>.py`, its variant and overrides;
`--kind`, default rope). Its first `--steps` training batches (seed 0) are
taken with each `data.length_groups` of `--groups` (1: the plain step) and
every program compiled in a first pass. Each repeat runs every candidate over
all of those batches (its state carried along), interleaved; reported: the
seconds per step (median over repeats), its ratio to the plain step's (median
of the per-repeat ratios), and the padded tokens per step against the real ones.
"""

from __future__ import annotations

from bifocal_jax import machine

machine.use_tuned_allocator()  # before JAX starts: see bifocal_jax/machine.py
# pylint: disable=g-import-not-at-top,wrong-import-position,wrong-import-order

import jax
import numpy as np
from absl import app, flags

from benchmarks import bench_util
from experiments.extrapolation import presets, runs
from bifocal_jax.training import config as config_lib
from bifocal_jax.training import length_groups, sharding
from bifocal_jax import tasks
from bifocal_jax.training import state as state_lib
from bifocal_jax.training import steps as steps_lib
from bifocal_jax.tasks import pipeline

TASKS = ("listops_depth", "listops_depth_5layer", "dyck", "dyck_5layer")
_TASKS = flags.DEFINE_list("tasks", list(TASKS), f"converged-preset tasks, or smoke: {TASKS}")
_GROUPS = flags.DEFINE_list("groups", ["1", "2", "4", "8"], "data.length_groups to time (1: plain)")
_KIND = flags.DEFINE_string("kind", "rope", "position.kind")
_STEPS = flags.DEFINE_integer("steps", 16, "training batches per repeat (the first of the run)")
_ROUNDS = flags.DEFINE_integer("rounds", 5, "interleaved repeats")
_OUT = flags.DEFINE_string("out", None, "write the results as JSON here")


def task_config(name: str, kind: str):
  """The training config of a converged-preset task's runs (`smoke`: the tiny Dyck config)."""
  if name == "smoke":
    config = bench_util.load_config("configs/dyck.py", "tiny")
    config.batch_size = 8
  else:
    spec = {t.name: t for t in presets.PRESETS["converged"].tasks}[name]
    config = runs.load_config(spec.config, dict(spec.overrides))
  config.position.kind = kind
  return config


def _groups(batch) -> tuple[dict, ...]:
  """A pipeline batch as its length groups (one padded batch: one group)."""
  return batch if isinstance(batch, tuple) else (batch,)


def stepper(step, state, batches):
  """A zero-argument function running `step` over all of `batches` (the state carried along)."""
  box = [state]

  def run():
    for batch in batches:
      box[0], metrics = step(box[0], batch)
    return metrics
  return run


def bench_task(name: str, *, groups: list[int], kind: str, num_steps: int, rounds: int) -> dict:
  base = task_config(name, kind)
  task = tasks.get_task(base.task)
  buckets = tuple(base.buckets) or pipeline.length_buckets(task.max_sequence_length("train"))
  mesh = sharding.make_mesh(base.mesh)
  candidates, padded = {}, {}
  with jax.set_mesh(mesh):
    for k in groups:
      config = base.copy_and_resolve_references()
      config.data.length_groups = k
      config_lib.validate(config, num_devices=jax.device_count())
      data = iter(pipeline.train_dataset(task, batch_size_per_process=config.batch_size, seed=0,
                                         buckets=buckets, length_groups=k))
      host_batches = [next(data) for _ in range(num_steps)]
      batches = [steps_lib.to_global_batch(b, mesh) for b in host_batches]
      s, state = state_lib.setup(config, mesh, task=task)
      step = length_groups.TrainStep(s) if k > 1 else steps_lib.make_train_step(s)
      candidates[f"groups={k}"] = stepper(step, state, batches)
      padded[k] = np.mean([sum(g["inputs"].size for g in _groups(b)) for b in host_batches])
    # Every candidate holds the same rows: the real tokens of the last.
    real = np.mean([sum(int(g["valid"].sum()) for g in _groups(b)) for b in host_batches])
    for run in candidates.values():  # compile every width, warm up
      jax.block_until_ready(run())
    load_before = bench_util.load_average()
    times = bench_util.interleave(candidates, repeats=rounds)
  plain = f"groups={groups[0]}"
  return dict(
      task=name, kind=kind, batch_size=base.batch_size, num_layers=base.model.num_layers,
      steps_per_repeat=num_steps, rounds=rounds, real_tokens_per_step=real,
      load_average=[load_before, bench_util.load_average()],
      groups={k: dict(seconds_per_step=bench_util.median(times[c]["wall"]) / num_steps,
                      over_plain=bench_util.median_ratio(times[c]["wall"], times[plain]["wall"]),
                      padded_tokens_per_step=padded[k])
              for k, c in zip(groups, candidates)})


def report(results: list[dict]) -> str:
  rows = []
  for r in results:
    for k, g in r["groups"].items():
      rows.append([r["task"], f"{r['num_layers']} layers, batch {r['batch_size']}", k,
                   f"{g['seconds_per_step'] * 1e3:.1f}", f"{g['over_plain']:.2f}",
                   f"{r['real_tokens_per_step'] / g['padded_tokens_per_step']:.2f}"])
  return bench_util.markdown_table(
      ["task", "model", "length groups", "ms / step", "/ plain", "real / padded tokens"], rows)


def main(argv):
  del argv
  groups = [int(k) for k in _GROUPS.value]
  if groups[0] != 1:
    raise app.UsageError(f"--groups={_GROUPS.value}: the first must be 1 (the plain step)")
  machine = bench_util.machine()
  results = [bench_task(name, groups=groups, kind=_KIND.value, num_steps=_STEPS.value,
                        rounds=_ROUNDS.value) for name in _TASKS.value]
  print(f"{machine['cpu']}, {machine['cores']} cores, jax {machine['jax']}, {machine['date']}; "
        f"load average before/after each task: {[r['load_average'] for r in results]}")
  print(report(results))
  bench_util.write_json(_OUT.value, dict(machine=machine, results=results))


if __name__ == "__main__":
  app.run(main)
