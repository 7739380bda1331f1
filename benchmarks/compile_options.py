r"""XLA compile options for the train step: compile time against step time.

For `reference_trainer.py`'s run (its config, its length buckets and its
curriculum), each candidate set of XLA options compiles the train step at
every bucket (candidates interleaved per bucket), then the compiled steps are
timed at every bucket (interleaved rounds, medians, wall and CPU time). Each
candidate's step is compared with the first candidate's, one step from the
same state and batch at every bucket: the largest absolute difference in the
loss and the parameters (0 when bitwise equal). Projected for `--steps` of the
curriculum: the compile seconds (all buckets) and the loop's seconds (each
bucket's step time times the number of steps that use it), without data or
host overhead.

  python -m benchmarks.compile_options                         # default vs O1 vs O2
  python -m benchmarks.compile_options --rounds=5 --out=/tmp/opts.json
  python -m benchmarks.compile_options \
      --candidates='{"default": {}, "split8": {"xla_cpu_parallel_codegen_split_count": 8}}'

Measured on a shared machine, only the ratios between candidates mean much.
"""

from __future__ import annotations

from bifocal_jax import machine

machine.use_tuned_allocator()  # before JAX starts: see bifocal_jax/machine.py
# pylint: disable=g-import-not-at-top,wrong-import-position,wrong-import-order

import collections
import json
import time

import jax
import numpy as np
from absl import flags

from bifocal_jax.training import sharding
from bifocal_jax.training import state as state_lib
from bifocal_jax.training import steps as steps_lib

from benchmarks import bench_util
from benchmarks import reference_trainer

DEFAULT_CANDIDATES = {"default": {}, "O1": {"xla_backend_optimization_level": 1},
                      "O2": {"xla_backend_optimization_level": 2}}

_CANDIDATES = flags.DEFINE_string("candidates", json.dumps(DEFAULT_CANDIDATES),
                                  "JSON: {name: {xla_option: value}}; the first is the baseline.")
_ROUNDS = flags.DEFINE_integer("rounds", 3, "Interleaved timing rounds.", lower_bound=1)
# --steps (to project for), --bucket_every, --smoke and --out: reference_trainer.py's flags.
FLAGS = flags.FLAGS


def stepper(compiled, state, batch):
  """A zero-argument function running one step (the state carried along)."""
  box = [state]

  def step():
    box[0], metrics = compiled(box[0], batch)
    return metrics["loss"]
  return step


def step_difference(a, b, state, batch) -> float:
  """The largest absolute difference in loss or parameters between two
  compilations of the step, one step from the same state and batch (0: bitwise equal)."""
  outs = [c(jax.tree.map(lambda x: x.copy(), state), batch) for c in (a, b)]
  (sa, ma), (sb, mb) = jax.tree.map(np.asarray, outs)
  leaves = zip([ma["loss"], *jax.tree.leaves(sa["params"])],
               [mb["loss"], *jax.tree.leaves(sb["params"])], strict=True)
  return max(float(np.max(np.abs(x - y))) for x, y in leaves)


def run(candidates: dict, *, steps: int, rounds: int, bucket_every: int, smoke: bool) -> dict:
  machine = bench_util.machine()
  config = reference_trainer.reference_config("bifocal", steps, smoke)
  max_length = 4 if smoke else reference_trainer.MAX_INPUT_LENGTH
  curriculum = reference_trainer.Curriculum(config.task, batch_size=config.batch_size,
                                            seed=config.seed, max_length=max_length,
                                            bucket_every=bucket_every)
  uses = collections.Counter(curriculum.bucket(curriculum.length(s)) for s in range(steps))
  mesh = sharding.make_mesh(config.mesh)
  names, base = list(candidates), next(iter(candidates))
  compile_wall = {n: {} for n in names}
  compile_cpu = {n: {} for n in names}
  difference = {n: 0.0 for n in names}
  steppers = {}
  with jax.set_mesh(mesh):
    s, state = state_lib.setup(config, mesh, task=curriculum.tasks[max_length])
    step_fn = steps_lib.make_train_step(s)
    for w in curriculum.buckets:
      lowered = step_fn.lower(s.abstract_state, reference_trainer.abstract_batch(
          config.batch_size, w, mesh))
      batch = steps_lib.to_global_batch(curriculum.batch(0, w // 2), mesh)
      compiled = {}
      for n in names:
        wall, cpu = time.perf_counter(), time.process_time()
        compiled[n] = lowered.compile(compiler_options=candidates[n] or None)
        compile_wall[n][w] = time.perf_counter() - wall
        compile_cpu[n][w] = time.process_time() - cpu
        if n != base:
          difference[n] = max(difference[n],
                              step_difference(compiled[base], compiled[n], state, batch))
        steppers[(n, w)] = stepper(compiled[n], jax.tree.map(lambda x: x.copy(), state), batch)
    for step in steppers.values():  # warm up (first runs allocate)
      jax.block_until_ready(step())
    times = bench_util.interleave({f"{n}@{w}": f for (n, w), f in steppers.items()},
                                  repeats=rounds, calls=2)
  rows = {}
  base_ms = {w: 1e3 * bench_util.median(times[f"{base}@{w}"]["wall"]) for w in curriculum.buckets}
  for n in names:
    step_ms = {w: 1e3 * bench_util.median(times[f"{n}@{w}"]["wall"]) for w in curriculum.buckets}
    ratio = {w: bench_util.median_ratio(times[f"{n}@{w}"]["wall"], times[f"{base}@{w}"]["wall"])
             for w in curriculum.buckets}
    cpu_ratio = {w: bench_util.median_ratio(times[f"{n}@{w}"]["cpu"], times[f"{base}@{w}"]["cpu"])
                 for w in curriculum.buckets}
    rows[n] = dict(
        options=candidates[n], max_difference=difference[n],
        compile_seconds=sum(compile_wall[n].values()),
        compile_cpu_seconds=sum(compile_cpu[n].values()),
        projected_loop_seconds=sum(uses[w] * step_ms[w] / 1e3 for w in curriculum.buckets),
        step_ms={str(w): v for w, v in step_ms.items()},
        step_over_baseline={str(w): v for w, v in ratio.items()},
        step_cpu_over_baseline={str(w): v for w, v in cpu_ratio.items()},
        # The loop's ratio to the baseline: the per-bucket median ratios,
        # weighted by the baseline's time in each bucket.
        loop_over_baseline=sum(uses[w] * base_ms[w] * ratio[w] for w in uses)
        / sum(uses[w] * base_ms[w] for w in uses))
  return dict(machine=machine, steps=steps, buckets=list(curriculum.buckets),
              steps_per_bucket={str(w): uses[w] for w in curriculum.buckets}, rounds=rounds,
              candidates=rows, load_average_after=bench_util.load_average())


def report(r: dict) -> str:
  base = next(iter(r["candidates"]))
  rows = [[n, json.dumps(c["options"]), f"{c['max_difference']:.1e}",
           f"{c['compile_seconds']:.1f} ({c['compile_cpu_seconds']:.1f})",
           f"{c['projected_loop_seconds']:.0f}", f"{c['loop_over_baseline']:.3f}"]
          for n, c in r["candidates"].items()]
  return bench_util.markdown_table(
      ["candidate", "XLA options", f"max abs difference to {base} after a step", "compile s, all buckets (CPU s)",
       f"projected loop s ({r['steps']} steps)", f"loop / {base} (median ratios)"], rows)


def main(argv):
  del argv
  reference_trainer.without_compilation_cache()  # every compilation here is timed
  r = run(json.loads(_CANDIDATES.value), steps=FLAGS.steps, rounds=_ROUNDS.value,
          bucket_every=FLAGS.bucket_every, smoke=FLAGS.smoke)
  m = r["machine"]
  print(f"{m['cpu']}, {m['cores']} cores, {m['date']}, load average {m['load_average']} -> "
        f"{r['load_average_after']}; buckets {r['buckets']}")
  print(report(r))
  bench_util.write_json(FLAGS.out, r)


if __name__ == "__main__":
  bench_util.run_main(main)
