r"""Population benchmark: P members in one compiled program against one member.

  python -m benchmarks.population_step                               # this CPU: P = 1, 2, 4
  python -m benchmarks.population_step --config=configs/reverse_string.py:paper \
      --sizes=1,8,16,32 --out=results/benchmarks/population_gpu.json  # an accelerator

For each population size P (members: seeds 0..P-1) and for the single run's
own step (`steps.make_train_step`), interleaved (A, B, C, ... repeated;
medians reported): seconds per step of `population.make_train_step` on one
fixed batch per member, padded to the config's longest training bucket.
`per member / single` is a population step's time divided by P and by the
single step's time: 1 means a population gains nothing over running its
members one after another; 1/P, that the extra members are free. Host-side
batch generation (`pipeline.train_batch_fn`, one member's batch) is timed
too: a population needs one per distinct seed per step.
"""

from __future__ import annotations

from bifocal_jax import machine

machine.use_tuned_allocator()  # before JAX starts: see bifocal_jax/machine.py
# pylint: disable=g-import-not-at-top,wrong-import-position,wrong-import-order

import copy
import os
import time

import jax
from absl import flags

from bifocal_jax import configs
from bifocal_jax.training import population
from bifocal_jax.training import sharding
from bifocal_jax.training import state as state_lib
from bifocal_jax.training import steps as steps_lib
from bifocal_jax.tasks import pipeline

from benchmarks import bench_util

_CONFIG = flags.DEFINE_string("config", "configs/reverse_string.py",
                              "Config file (`path:variant`), relative to the repository.")
_SIZES = flags.DEFINE_list("sizes", ["1", "2", "4"], "Population sizes P.")
_ROUNDS = flags.DEFINE_integer("rounds", 5, "Interleaved repeats.")
_CALLS = flags.DEFINE_integer("calls", 5, "Steps timed per repeat.")
_OUT = flags.DEFINE_string("out", None, "Results JSON.")


def _stepper(fn, state, batch):
  """A candidate for `bench_util.interleave`: one step, the state carried over."""
  holder = [state]

  def call():
    holder[0], metrics = fn(holder[0], batch)
    return metrics["loss"]

  return call


def _candidates(config, sizes, mesh):
  out = {}
  with jax.set_mesh(mesh):
    s, state = state_lib.setup(config, mesh)
    longest = s.task.max_sequence_length("train")
    task_buckets = (longest,)
    batch_fn = pipeline.train_batch_fn(s.task, batch_size_per_process=config.batch_size,
                                       seed=0, buckets=task_buckets,
                                       examples=config.data.examples, lengths=config.data.lengths)
    out["single"] = _stepper(steps_lib.make_train_step(s), state,
                             steps_lib.to_global_batch(batch_fn(0), mesh))
    for p in sizes:
      c = copy.deepcopy(config)
      c.population.seeds = tuple(range(p))
      pop = population.setup(c, mesh, task=s.task)
      batches = population.train_batches(pop, s.task, buckets=task_buckets, start_step=0)
      batch = population.to_global_batch(next(batches), mesh)
      out[f"P={p}"] = _stepper(population.make_train_step(pop), population.initial_state(pop),
                               batch)
  return out, batch_fn


def _config_path():
  path, _, variant = _CONFIG.value.partition(":")
  return os.path.join(bench_util.REPO, path), variant or None


def main(argv):
  del argv
  config = configs.load_file(*_config_path())
  sizes = [int(p) for p in _SIZES.value]
  mesh = sharding.make_mesh(config.mesh)
  candidates, batch_fn = _candidates(config, sizes, mesh)
  for fn in candidates.values():  # compile
    jax.block_until_ready(fn())
  times = bench_util.interleave(candidates, repeats=_ROUNDS.value, calls=_CALLS.value)
  single = times["single"]["wall"]
  rows, results = [], {}
  for name, t in times.items():
    p = 1 if name == "single" else int(name[2:])
    per_member = bench_util.median_ratio([x / p for x in t["wall"]], single)
    results[name] = dict(step_seconds=bench_util.median(t["wall"]),
                         cpu_seconds=bench_util.median(t["cpu"]), members=p,
                         per_member_over_single=per_member)
    rows.append([name, f"{results[name]['step_seconds'] * 1e3:.2f}",
                 f"{results[name]['cpu_seconds'] * 1e3:.2f}", f"{per_member:.2f}"])
  start = time.perf_counter()
  for step in range(20):
    batch_fn(step)
  data_seconds = (time.perf_counter() - start) / 20
  print(bench_util.markdown_table(["step", "ms (wall)", "ms (cpu)", "per member / single"], rows))
  print(f"host batch generation: {data_seconds * 1e3:.2f} ms per member batch (one thread)")
  bench_util.write_json(_OUT.value, dict(
      machine=bench_util.machine(), config=_CONFIG.value, batch_size=config.batch_size,
      rounds=_ROUNDS.value, calls=_CALLS.value, steps=results,
      member_batch_seconds=data_seconds))
  return 0


if __name__ == "__main__":
  bench_util.run_main(main)
