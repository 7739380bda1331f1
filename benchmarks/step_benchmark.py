r"""Train-step benchmark: Bifocal overhead, utilisation, a plain Flax baseline,
the data pipeline against the step, and compile time.

  python -m benchmarks.step_benchmark                          # default + large
  python -m benchmarks.step_benchmark --configs=default --rounds=15
  python -m benchmarks.step_benchmark --out=results/benchmarks/step.json
  python -m benchmarks.step_benchmark --configs=smoke          # seconds (tests)
  python -m benchmarks.step_benchmark --kinds=all --rounds=5   # every position kind / rope

Configs: `default` is `configs/dyck.py` as it stands; `large` is the same
with width 256, 8 heads, 4 layers and sequences of 256 tokens (Dyck strings
of 240..255 tokens, padded to 256); `protocol40` and `protocol80` are the
converged sweep's 5-layer model (width 64, 8 heads, batch 128; the
`configs/_chomsky.py:paper` sizes) on Dyck strings padded to 40 and 80
tokens; `smoke` is tiny. (The comparisons with the attention kernel before
issue #33 and with LayerNorm's autodiff backward are in docs/performance.md with the
commits that measured them.)

For each config, in one process and interleaved (A, B, C, ... repeated; the
medians and median ratios are reported, with wall and CPU time):
  bifocal / rope   `steps.make_train_step` (the project's whole step: loss,
                   grads, Spectral Evolution update, guards, trajectory) with
                   `position.kind` bifocal and rope;
  flax             the same sizes from `nnx.MultiHeadAttention` + `nnx.RoPE`
                   with a textbook step (`plain_flax.py`);
  peak             float32 `jnp.dot`s, 2048^3 and 8192x256x1024: the faster
                   is the matmul peak.
  --kinds          further `position.kind`s (or `all`: every kind the Dyck
                   decoder defines), each timed in the same interleaved
                   rounds and reported as its median step time over rope's.
Model FLOPs utilisation (MFU) = `model.flops_per_token` x tokens (padded
length) per step / step time / peak. The data pipeline (`train_dataset`, the
config's buckets) is timed on one pinned core, as `data_throughput.py` does,
and compared with the bifocal step. Compile time is trace + lower + XLA
compile of the bifocal step.
"""

from __future__ import annotations

from bifocal_jax import machine

machine.use_tuned_allocator()  # before JAX starts: see bifocal_jax/machine.py
# pylint: disable=g-import-not-at-top,wrong-import-position,wrong-import-order

import os
import time

import jax
from absl import flags
from flax import nnx

from bifocal_jax.nn import model as model_lib
from bifocal_jax.training import sharding
from bifocal_jax import tasks
from bifocal_jax.training import steps as steps_lib
from bifocal_jax.training import state as state_lib
from bifocal_jax.tasks import pipeline

# pylint: disable=g-import-not-at-top,wrong-import-position
from benchmarks import bench_util
from benchmarks import data_throughput
from benchmarks import plain_flax

CONFIGS = ("default", "large", "protocol40", "protocol80", "smoke")
_CONFIGS = flags.DEFINE_list("configs", ["default", "large"], f"Which of {CONFIGS}.")
_ROUNDS = flags.DEFINE_integer("rounds", 7, "Interleaved timing rounds.", lower_bound=1)
_PEAK_SCALE = flags.DEFINE_float("peak_scale", 1.0, "Scale of the peak matmuls' sizes.")
_DATA_STEPS = flags.DEFINE_integer("data_steps", 50, "Batches per pipeline timing.", lower_bound=1)
_OUT = flags.DEFINE_string("out", None, "Write the results as JSON here.")
_KINDS = flags.DEFINE_list("kinds", [], "Further position kinds to time against rope ('all': "
                           "every kind the decoder defines).")


def extra_kinds(names) -> tuple[str, ...]:
  from bifocal_jax.nn import positions  # pylint: disable=g-import-not-at-top
  if list(names) == ["all"]:
    names = [k for k in positions.POSITION_KINDS if positions.get(k).decoder]
  for name in names:
    positions.get(name)  # a ValueError naming the valid kinds
  return tuple(k for k in names if k not in ("bifocal", "rope"))


def dyck_config(name: str):
  """The training config of a benchmark config name."""
  c = bench_util.load_config("configs/dyck.py")
  if name == "large":
    c.model.d_model, c.model.num_heads, c.model.num_layers = 256, 8, 4
    c.task.train.min_length, c.task.train.max_length = 240, 256
    c.task.valid.max_length = 256
    c.task.test_length.min_length, c.task.test_length.max_length = 257, 512
    c.buckets = (256,)
  elif name in ("protocol40", "protocol80"):
    length = int(name.removeprefix("protocol"))
    c.model.d_model, c.model.num_heads, c.model.num_layers = 64, 8, 5
    c.batch_size = 128
    c.task.train.min_length, c.task.train.max_length = length // 2, length
    c.task.valid.max_length = length
    c.task.test_length.min_length, c.task.test_length.max_length = length + 1, 2 * length
    c.task.test_depth.max_length = 2 * length
    c.buckets = (length,)
  elif name == "smoke":
    c.model.d_model, c.model.num_heads, c.model.num_layers, c.model.mlp_dim = 16, 2, 1, 32
    c.batch_size = 4
    c.task.train.max_length = c.task.valid.max_length = 16
    c.task.test_length.min_length, c.task.test_length.max_length = 17, 32
    c.task.test_depth.max_length = 32
  elif name != "default":
    raise ValueError(f"--configs: unknown config {name!r}, expected one of {CONFIGS}")
  return c


def config_buckets(c, task) -> tuple[int, ...]:
  """The config's length buckets (train.py's default, powers of two, when it names none)."""
  return tuple(c.buckets) or pipeline.length_buckets(task.max_sequence_length("train"))


def timed_compile(jitted, *args):
  """(compiled executable, seconds to trace, lower and compile)."""
  start = time.perf_counter()
  compiled = jitted.lower(*args).compile()
  return compiled, time.perf_counter() - start


def stepper(compiled, state, batch):
  """A zero-argument function running one step (the state carried along)."""
  box = [state]

  def step():
    box[0], metrics = compiled(box[0], batch)
    return metrics
  return step


def pipeline_seconds_per_batch(task, batch_size: int, buckets, *, steps: int) -> float:
  """Fastest of 3 timings of the training pipeline, on one pinned core (as
  `data_throughput.py`: what one host core feeds)."""
  cores = os.sched_getaffinity(0)
  os.sched_setaffinity(0, {min(cores)})
  try:
    dataset = pipeline.train_dataset(task, batch_size_per_process=batch_size, seed=0,
                                     buckets=buckets)
    seconds, _ = data_throughput.time_iterator(iter(dataset), steps, 3)
  finally:
    os.sched_setaffinity(0, cores)
  return seconds / steps


def bench_config(name: str, *, rounds: int, peak_scale: float, data_steps: int,
                 kinds: tuple[str, ...] = ()) -> dict:
  base = dyck_config(name)
  task = tasks.get_task(base.task)
  buckets = config_buckets(base, task)
  width = buckets[-1]
  mesh = sharding.make_mesh(base.mesh)
  # One batch at the longest bucket: every candidate steps on the same shape.
  batch_iter = iter(pipeline.train_dataset(task, batch_size_per_process=base.batch_size, seed=0,
                                           buckets=(width,)))
  candidates, compile_seconds = {}, {}
  with jax.set_mesh(mesh):
    batch = steps_lib.to_global_batch(next(batch_iter), mesh)
    for kind in ("bifocal", "rope", *kinds):
      c = base.copy_and_resolve_references()
      c.position.kind = kind
      s, state = state_lib.setup(c, mesh, task=task)
      compiled, compile_seconds[kind] = timed_compile(steps_lib.make_train_step(s), state, batch)
      candidates[kind] = stepper(compiled, state, batch)
    flax_model = plain_flax.Transformer(base.model, vocab_size=task.vocab_size, causal=task.causal,
                                        rngs=nnx.Rngs(base.seed))
    flax_step, flax_state = plain_flax.make_train_step(flax_model)
    compiled, compile_seconds["flax"] = timed_compile(flax_step, flax_state, batch)
    candidates["flax"] = stepper(compiled, flax_state, batch)
    peaks = bench_util.peak_candidates(peak_scale)
    candidates.update({name: fn for name, (fn, _) in peaks.items()})
    for step in candidates.values():  # warm up (first runs allocate)
      jax.block_until_ready(step())
    load_before = bench_util.load_average()
    calls = {k: 1 if name == "large" and k in ("bifocal", "rope", "flax", *kinds) else 3
             for k in candidates}
    steps_timed = [k for k in candidates if not k.startswith("peak")]
    times = bench_util.interleave(candidates, repeats=rounds, calls=calls)
  pipeline_seconds = pipeline_seconds_per_batch(task, base.batch_size, buckets, steps=data_steps)

  flops_per_step = model_lib.flops_per_token(
      base.model, vocab_size=task.vocab_size, seq_len=width) * base.batch_size * width
  peak_by_shape = {name: flops / bench_util.median(times[name]["wall"])
                   for name, (_, flops) in peaks.items()}
  peak = max(peak_by_shape.values())
  steps = {}
  for kind in steps_timed:
    wall = bench_util.median(times[kind]["wall"])
    steps[kind] = dict(
        seconds=wall, cpu_seconds=bench_util.median(times[kind]["cpu"]),
        tokens_per_sec=base.batch_size * width / wall, mfu=flops_per_step / wall / peak,
        compile_seconds=compile_seconds[kind])
  ratio = lambda a, b, clock="wall": bench_util.median_ratio(times[a][clock], times[b][clock])
  return dict(
      config=name, model=base.model.to_dict(), batch_size=base.batch_size, length=width,
      vocab_size=task.vocab_size, flops_per_step=flops_per_step, peak_flops_per_sec=peak,
      peak_flops_per_sec_by_shape=peak_by_shape,
      steps=steps,
      bifocal_over_rope=ratio("bifocal", "rope"), bifocal_over_rope_cpu=ratio("bifocal", "rope", "cpu"),
      flax_over_bifocal=ratio("flax", "bifocal"), flax_over_rope=ratio("flax", "rope"),
      pipeline_seconds_per_batch=pipeline_seconds,
      pipeline_over_step=steps["bifocal"]["seconds"] / pipeline_seconds,
      load_average=[load_before, bench_util.load_average()], rounds=rounds,
      kinds_over_rope={k: ratio(k, "rope") for k in kinds},
      kind_step_seconds={k: bench_util.median(times[k]["wall"]) for k in kinds})


def report(results: list[dict]) -> str:
  rows = []
  for r in results:
    s = r["steps"]
    rows.append([
        r["config"], f"{r['model']['num_layers']}x{r['model']['d_model']}, {r['model']['num_heads']}h, "
        f"B={r['batch_size']}, L={r['length']}",
        f"{s['bifocal']['seconds'] * 1e3:.0f} / {s['rope']['seconds'] * 1e3:.0f} / "
        f"{s['flax']['seconds'] * 1e3:.0f}",
        f"{r['bifocal_over_rope']:.3f} (cpu {r['bifocal_over_rope_cpu']:.3f})",
        f"{r['peak_flops_per_sec'] / 1e9:.0f}",
        f"{s['bifocal']['mfu']:.0%} / {s['rope']['mfu']:.0%} / {s['flax']['mfu']:.0%}",
        f"{r['flax_over_bifocal']:.2f}x", f"{r['pipeline_over_step']:.0f}x",
        f"{s['bifocal']['compile_seconds']:.1f}"])
  table = bench_util.markdown_table(
      ["config", "model", "step ms: bifocal / rope / flax", "bifocal / rope",
       "peak GFLOP/s", "MFU: bifocal / rope / flax", "ours / flax throughput",
       "pipeline / step", "compile s"], rows)
  kinds = [k for k in results[0].get("kinds_over_rope", {})] if results else []
  if not kinds:
    return table
  kind_rows = [[k] + [f"{r['kind_step_seconds'][k] * 1e3:.0f} ms, {r['kinds_over_rope'][k]:.2f}x"
                      for r in results] for k in kinds]
  return table + "\n\n" + bench_util.markdown_table(
      ["kind (step, median ratio to rope)"] + [r["config"] for r in results], kind_rows)


def main(argv):
  del argv
  machine = bench_util.machine()
  kinds = extra_kinds(_KINDS.value)
  results = [bench_config(name, rounds=_ROUNDS.value, peak_scale=_PEAK_SCALE.value,
                          data_steps=_DATA_STEPS.value, kinds=kinds)
             for name in _CONFIGS.value]
  print(f"{machine['cpu']}, {machine['cores']} cores, jax {machine['jax']}, {machine['date']}; "
        f"load average before/after each config: {[r['load_average'] for r in results]}")
  print(report(results))
  for r in results:
    s = r["steps"]
    print(f"{r['config']}: tokens/s bifocal {s['bifocal']['tokens_per_sec']:,.0f}, rope "
          f"{s['rope']['tokens_per_sec']:,.0f}")
  bench_util.write_json(_OUT.value, dict(machine=machine, results=results))


if __name__ == "__main__":
  bench_util.run_main(main)
