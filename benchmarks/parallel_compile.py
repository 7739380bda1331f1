r"""Compile time before the first step: one program after another, or in parallel threads.

  python -m benchmarks.parallel_compile --out=results/benchmarks/parallel_compile.json
  python -m benchmarks.parallel_compile --parts=reference --rounds=1

Every measurement runs in a fresh process with the compilation cache off
(`BIFOCAL_COMPILATION_CACHE=off`: a user's first run), the two settings
alternating (one after another, then parallel, `--rounds` times):
  reference  the reference trainer's 10 length buckets of the 5-layer model
             (`reference_trainer.compile_buckets`, `configs/odds_first.py:paper`,
             bifocal): wall seconds from the first trace to the last executable,
             `--compile_workers=1` against one thread per CPU.
  train      `train.py --config configs/dyck.py` for `--train_steps` steps with one
             validation at the end, `--config.precompile=False` (each program
             compiled at first use, as before issue #33) against `True` (the
             train step and the `valid` evaluation step compiled ahead, in
             parallel): end-to-end wall seconds, and the seconds JAX logs for
             each XLA compilation (`JAX_LOG_COMPILES`), summed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time

from absl import flags

from benchmarks import bench_util
from benchmarks import reference_trainer

# `--out` is reference_trainer's flag (shared).

_PARTS = flags.DEFINE_list("parts", ["reference", "train"], "What to measure.")
_ROUNDS = flags.DEFINE_integer("rounds", 2, "Alternations of the two settings.", lower_bound=1)
_TRAIN_STEPS = flags.DEFINE_integer("train_steps", 20, "Steps of the train.py runs.")
_WORKER = flags.DEFINE_integer("worker", 0, "Internal: compile the reference buckets with this "
                               "many threads and print JSON.")
COMPILE_LOG = re.compile(r"Finished XLA compilation of (\S+) in ([0-9.e-]+) sec")


def reference_worker(workers: int) -> dict:
  import jax  # pylint: disable=g-import-not-at-top
  if jax.config.jax_compilation_cache_dir:
    raise RuntimeError(f"a compilation cache is on: {jax.config.jax_compilation_cache_dir}")
  from bifocal_jax.training import sharding, state  # pylint: disable=g-import-not-at-top
  from bifocal_jax.training import steps as steps_lib  # pylint: disable=g-import-not-at-top
  config = reference_trainer.reference_config("bifocal", steps=1)
  curriculum = reference_trainer.Curriculum(
      config.task, batch_size=config.batch_size, seed=config.seed,
      max_length=reference_trainer.MAX_INPUT_LENGTH, bucket_every=8)
  mesh = sharding.make_mesh(config.mesh)
  with jax.set_mesh(mesh):
    s, _ = state.setup(config, mesh, task=curriculum.tasks[curriculum.max_length])
    step_fn = steps_lib.make_train_step(s)
    start, cpu = time.perf_counter(), time.process_time()
    compiled, lower, xla = reference_trainer.compile_buckets(
        step_fn, s.abstract_state, config.batch_size, curriculum.buckets, mesh, workers=workers)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu
  return dict(workers=workers, buckets=len(compiled), seconds=seconds, cpu_seconds=cpu_seconds,
              lower_seconds_sum=sum(lower.values()), xla_compile_seconds_sum=sum(xla.values()))


def cold_env(**extra) -> dict:
  """This environment without a compilation cache (importing `reference_trainer`
  turned one on here, through `JAX_COMPILATION_CACHE_DIR`)."""
  env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_COMPILATION_CACHE")}
  return dict(env, BIFOCAL_COMPILATION_CACHE="off", **extra)


def run_reference(workers: int) -> dict:
  cmd = [sys.executable, "-m", "benchmarks.parallel_compile", f"--worker={workers}"]
  out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True, cwd=bench_util.REPO,
                       env=cold_env())
  row = json.loads(out.stdout.strip().splitlines()[-1])
  print(f"reference buckets, {workers} thread(s): {row['seconds']:.1f} s", flush=True)
  return row


def run_train(precompile: bool, steps: int) -> dict:
  with tempfile.TemporaryDirectory() as workdir:
    cmd = [sys.executable, "train.py", "--config", "configs/dyck.py", "--workdir", workdir,
           f"--config.steps={steps}", f"--config.eval_every={steps}", f"--config.log_every={steps}",
           f"--config.checkpoint_every={steps}", f"--config.warmup_steps={min(steps, 100)}",
           f"--config.precompile={precompile}", "--config.progress_bar=False"]
    start = time.perf_counter()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=bench_util.REPO,
                         env=cold_env(JAX_LOG_COMPILES="1"))
    seconds = time.perf_counter() - start
  compiles = [(name, float(t)) for name, t in COMPILE_LOG.findall(out.stderr)]
  big = [(n, t) for n, t in compiles if t >= 0.5]  # the steps (the rest: eager small ops)
  row = dict(precompile=precompile, steps=steps, seconds=seconds,
             xla_compile_seconds_sum=sum(t for _, t in compiles),
             large_compiles={f"{n} #{i}": t for i, (n, t) in enumerate(big)})
  print(f"train.py, precompile={precompile}: {seconds:.1f} s end to end, XLA compilations "
        f"{row['xla_compile_seconds_sum']:.1f} s ({', '.join(f'{n} {t:.1f}' for n, t in big)})",
        flush=True)
  return row


def main(argv):
  del argv
  if _WORKER.value:
    print(json.dumps(reference_worker(_WORKER.value)))
    return
  machine = bench_util.machine()
  results = dict(machine=machine)
  cores = os.cpu_count() or 1
  if "reference" in _PARTS.value:
    rows = [run_reference(w) for _ in range(_ROUNDS.value) for w in (1, cores)]
    one, par = ([r for r in rows if r["workers"] == w] for w in (1, cores))
    results["reference"] = dict(rows=rows, sequential_over_parallel=bench_util.median_ratio(
        [r["seconds"] for r in one], [r["seconds"] for r in par]))
    print(f"reference buckets: one after another / parallel = "
          f"{results['reference']['sequential_over_parallel']:.2f}")
  if "train" in _PARTS.value:
    rows = [run_train(p, _TRAIN_STEPS.value) for _ in range(_ROUNDS.value) for p in (False, True)]
    before, after = ([r for r in rows if r["precompile"] == p] for p in (False, True))
    results["train"] = dict(rows=rows, before_over_after=bench_util.median_ratio(
        [r["seconds"] for r in before], [r["seconds"] for r in after]))
    print(f"train.py end to end: before / after = {results['train']['before_over_after']:.2f}")
  results["load_average_end"] = bench_util.load_average()
  print(f"load average {machine['load_average']} -> {results['load_average_end']}")
  bench_util.write_json(reference_trainer._OUT.value, results)  # pylint: disable=protected-access


if __name__ == "__main__":
  bench_util.run_main(main)
