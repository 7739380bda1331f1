r"""Against DeepMind's Chomsky-hierarchy trainer (Deletang et al. 2023; JAX + Haiku).

Their `odds_first` run (transformer encoder, ROTARY encodings, 5 layers, width
64, 8 heads, batch 128, a uniform length curriculum: one input length n in
1..40 per batch, so their jit compiles one step per length) against this
project's trainer on the same task, model size, batch and lengths
(`configs/odds_first.py:paper`, `state.setup`, `steps.make_train_step`). Each
of our batches is padded to a length bucket (n input symbols + n query
positions, rounded up to a multiple of 8: 8, 16, ..., 80): 10 compilations
instead of 40, made before the first step. `--bucket_every=0` pads to powers
of two instead (16, 32, 64, 80), as `train.py` does by default.

  # the comparison of record: their code from a checkout, in the same run;
  # ours from a cold cache, then again warm (a user's second run)
  BIFOCAL_COMPILATION_CACHE=$(mktemp -d) python -m benchmarks.reference_trainer \
      --reference_checkout=DIR --warm_rerun --out=results/benchmarks/reference_trainer.json
  python -m benchmarks.reference_trainer --steps=100      # a quick look (stand-in)
  python -m benchmarks.reference_trainer --smoke --steps=6  # seconds (tests)

The reference:
  original   with `--reference_checkout=DIR` (a checkout of
             github.com/google-deepmind/neural_networks_chomsky_hierarchy),
             `original_trainer.py` runs their own `TrainingWorker` and model
             from DIR in a subprocess after ours, on the same input lengths:
             `original_end_to_end_seconds`, `ours_end_to_end_seconds`,
             `speedup_vs_original`. It runs with the default glibc allocator
             and no compilation cache, as their code does.
  stand-in   without it (CI has no network, so no checkout), their trainer
             rebuilt in Haiku (`haiku_reference.py`) runs in this process
             instead: a smoke stand-in that keeps the comparison's plumbing
             tested, not the reference (it ran slower than the original).

What differs between the two trainers, by design (same task, sizes, batch,
lengths and optimiser family; each its own model details): ours is pre-LN
with GELU and no dropout, embeds tokens (PAD, 0, 1, ?) and pads each batch to
its bucket with a key mask; theirs is post-LN with ReLU, dropout 0.1,
one-hot inputs through a linear embedding, exact lengths. Ours uses
`position.kind` (bifocal: half the heads with trainable frequencies; `rope`
for plain rotary on every head), AdamW with warm-up and Spectral Evolution's
parameter group, non-finite guards and the frequency trajectory in the step;
theirs Adam 1e-3 with the same clipping. Their `odds_first` writes s_2 s_4 ..
then s_1 s_3 .. (their code; their docstring says odd first), ours s_1 s_3 ..
first: the same amount of work. Each reads the loss back as its trainer does
(ours every step, `--in_flight` behind; theirs every 100 steps).

Reported for ours: end to end = wall time from building the model to the
last step's result on the host (setup, every compilation, data, all steps);
the steady-state tokens/s of the loop and at the fixed length 40; and the
persistent compilation cache (`bifocal_jax/machine.py`, on by default): its
directory, and whether this run found its programs there (`warm`) or
compiled them (`cold`). A cold run is the one to compare; a second run of
the same command is warm, and `--warm_rerun` makes that second run in a
fresh process after the first (`warm_rerun`, `speedup_vs_original_warm`).
`BIFOCAL_COMPILATION_CACHE=off` disables the cache, `=DIR` moves it (a fresh
DIR gives a cold run). Each end-to-end time comes
with the process's CPU time over the same span (`*_cpu_seconds`), which a
shared machine disturbs less than wall time. A token is one position the
transformer processes: input plus output tape, 2n per example.
"""

from __future__ import annotations

from bifocal_jax import machine

machine.use_tuned_allocator()  # before JAX starts: see bifocal_jax/machine.py
machine.use_compilation_cache()
# pylint: disable=g-import-not-at-top,wrong-import-position,wrong-import-order

import collections
import json
import os
import subprocess
import sys
import tempfile
import time

import grain
import jax
import numpy as np
from absl import flags

from bifocal_jax import cli, tasks
from bifocal_jax.training import sharding
from bifocal_jax.training import state as state_lib
from bifocal_jax.training import steps as steps_lib
from bifocal_jax.tasks import pipeline

from benchmarks import bench_util
from benchmarks import original_trainer

MAX_INPUT_LENGTH = 40

_STEPS = flags.DEFINE_integer("steps", 2000, "Training steps.", lower_bound=1)
_KIND = flags.DEFINE_string("kind", "bifocal", "position.kind of the model.")
_IN_FLIGHT = flags.DEFINE_integer(
    "in_flight", 2, "Steps dispatched ahead of the host (as a trainer would).", lower_bound=1)
_FIXED_STEPS = flags.DEFINE_integer(
    "fixed_steps", 10, "Steps timed afterwards at the fixed input length 40.", lower_bound=0)
_BUCKET_EVERY = flags.DEFINE_integer(
    "bucket_every", 8, "Pad each batch to a multiple of this many positions; 0: powers of two.",
    lower_bound=0)
# Not named --xla_*: JAX hashes every `--xla*` argument into its compilation
# cache keys, so such a flag would keep a second run from finding the first's.
_STEP_COMPILE_OPTIONS = flags.DEFINE_string(
    "step_compile_options", "{}", "JSON: XLA compile options for our train step, e.g. "
    '\'{"xla_backend_optimization_level": 1}\' (see compile_options.py).')
_CHECKOUT = flags.DEFINE_string(
    "reference_checkout", None,
    "A checkout of neural_networks_chomsky_hierarchy: run their trainer from it after ours.")
_ORIGINAL_PYTHON = flags.DEFINE_string(
    "original_python", sys.executable, "The Python that runs their trainer (its own venv, say).")
_STAND_IN = flags.DEFINE_bool(
    "stand_in", True, "Without --reference_checkout: run the Haiku rebuild (haiku_reference.py) "
    "as a smoke stand-in for their trainer.")
_WARM_RERUN = flags.DEFINE_bool(
    "warm_rerun", False, "After ours (which must find the compilation cache cold), run ours "
    "again in a fresh process on the same cache: the second run's figures, reported apart.")
_COMPILE_WORKERS = flags.DEFINE_integer(
    "compile_workers", 0, "Threads compiling our buckets ahead of the loop (0: one per CPU; "
    "1: one bucket after another, as before issue #33).", lower_bound=0)
_SMOKE = flags.DEFINE_bool("smoke", False, "Tiny model and lengths (tests: seconds).")
_OUT = flags.DEFINE_string("out", None, "Write the results as JSON here.")


def reference_config(kind: str, steps: int, smoke: bool = False):
  c = bench_util.load_config("configs/odds_first.py", "paper")
  c.position.kind = kind
  c.steps = steps
  if smoke:
    c.model.num_layers, c.model.d_model, c.model.num_heads, c.batch_size = 1, 16, 2, 8
  return c


class Curriculum:
  """Their uniform length curriculum: step s draws one input length n in
  1..max_length (from `(seed, s)`), and its batch holds examples of that
  length only, padded to the smallest bucket that holds 2n positions: the
  multiples of `bucket_every`, or powers of two when it is 0."""

  def __init__(self, task_config, *, batch_size: int, seed: int, max_length: int,
               bucket_every: int):
    self.batch_size, self.seed, self.max_length = batch_size, seed, max_length
    self.tasks = {}
    for n in range(1, max_length + 1):
      cfg = task_config.copy_and_resolve_references()
      cfg.train.min_length = cfg.train.max_length = n
      self.tasks[n] = tasks.get_task(cfg)
    self.size = self.tasks[1].split("train").size
    longest = self.tasks[max_length].max_sequence_length("train")
    if bucket_every:
      self.buckets = tuple(range(bucket_every, longest + bucket_every, bucket_every))
    else:
      self.buckets = pipeline.length_buckets(longest)

  def length(self, step: int) -> int:
    return int(np.random.default_rng([self.seed, step]).integers(1, self.max_length + 1))

  def bucket(self, n: int) -> int:
    longest = self.tasks[n].max_sequence_length("train")
    return self.buckets[np.searchsorted(self.buckets, longest)]

  def batch(self, step: int, n: int | None = None) -> dict[str, np.ndarray]:
    n = self.length(step) if n is None else n
    indices = (step * self.batch_size + np.arange(self.batch_size)) % self.size
    return self.tasks[n].batch("train", indices, width=self.bucket(n))

  def dataset(self, steps: int) -> grain.IterDataset:
    return grain.MapDataset.range(steps).map(self.batch).to_iter_dataset(pipeline.READ_OPTIONS)


def abstract_batch(batch_size: int, width: int, mesh) -> dict:
  return steps_lib.abstract_train_batch(batch_size, width, mesh)


def compile_buckets(step_fn, abstract_state, batch_size: int, buckets, mesh, xla_options=None,
                    workers: int | None = None):
  """The train step compiled for every bucket ahead of the loop, `workers`
  at a time in threads (`steps.compile_in_parallel`; default: the CPU count;
  1: one after another, as before issue #33): `({width: executable}, {width:
  seconds to trace and lower}, {width: seconds to compile, or to load from the
  persistent cache})` (per program: with threads they overlap)."""
  jobs = {w: (step_fn, (abstract_state, abstract_batch(batch_size, w, mesh))) for w in buckets}
  done = steps_lib.compile_in_parallel(jobs, mesh=mesh, workers=workers,
                                       compiler_options=xla_options)
  return ({w: c[0] for w, c in done.items()}, {w: c[1] for w, c in done.items()},
          {w: c[2] for w, c in done.items()})


class CacheEvents:
  """Counts JAX's persistent-cache hits and writes from now on."""

  def __init__(self):
    self.hits = self.writes = 0
    jax.monitoring.register_event_listener(self._on_event)

  def _on_event(self, event: str, **kwargs):
    del kwargs
    if event == "/jax/compilation_cache/cache_hits":
      self.hits += 1
    elif event == "/jax/compilation_cache/cache_misses":  # recorded when an entry is written
      self.writes += 1

  def report(self, compilations: int) -> dict:
    directory = jax.config.jax_compilation_cache_dir
    if not directory:
      state = "off"
    else:
      state = "warm" if self.hits >= compilations else "cold" if self.hits == 0 else "partly warm"
    return dict(dir=directory, state=state, hits=self.hits, writes=self.writes)


def run_ours(steps: int, kind: str, lengths: np.ndarray, curriculum: Curriculum, config, *,
             in_flight: int = 2, fixed_steps: int = 10, xla_options=None,
             compile_workers: int | None = None) -> dict:
  """This project's trainer on `lengths` (one input length per step)."""
  mesh = sharding.make_mesh(config.mesh)
  max_length = curriculum.max_length
  valid_tokens = int(2 * lengths.sum()) * config.batch_size
  padded_tokens = sum(curriculum.bucket(int(n)) for n in lengths) * config.batch_size
  cache = CacheEvents()
  with jax.set_mesh(mesh):
    start, start_cpu = time.perf_counter(), time.process_time()
    s, state = state_lib.setup(config, mesh, task=curriculum.tasks[max_length])
    setup_done = time.perf_counter()
    step_fn = steps_lib.make_train_step(s)
    compiled, lower_seconds, compile_seconds = compile_buckets(
        step_fn, s.abstract_state, config.batch_size, curriculum.buckets, mesh, xla_options,
        workers=compile_workers)
    compile_done = time.perf_counter()
    pending = collections.deque()
    losses = []
    for batch in curriculum.dataset(steps):
      global_batch = steps_lib.to_global_batch(batch, mesh)
      state, metrics = compiled[batch["inputs"].shape[1]](state, global_batch)
      pending.append(metrics)
      if len(pending) > in_flight:  # bound the host's run-ahead, as a trainer's logging does
        losses.append(float(pending.popleft()["loss"]))
    losses += [float(m["loss"]) for m in pending]
    end, end_cpu = time.perf_counter(), time.process_time()
    # Steady state at their setting: input length 40 (bucket 80), no data work.
    fixed = steps_lib.to_global_batch(curriculum.batch(steps, max_length), mesh)
    fixed_step = compiled[fixed["inputs"].shape[1]]
    fixed_start = time.perf_counter()
    for _ in range(fixed_steps):
      state, metrics = fixed_step(state, fixed)
    jax.block_until_ready(metrics)
    fixed_seconds = (time.perf_counter() - fixed_start) / max(fixed_steps, 1)
  loop_seconds = end - compile_done
  fixed_tokens = config.batch_size * fixed["inputs"].shape[1]
  return dict(
      kind=kind, steps=steps, batch_size=config.batch_size, max_input_length=max_length,
      xla_options=xla_options or {}, compile_workers=compile_workers or os.cpu_count(),
      model=config.model.to_dict(), buckets=list(curriculum.buckets),
      compilations=len(compiled),
      lower_seconds_by_bucket={str(w): t for w, t in lower_seconds.items()},
      xla_compile_seconds_by_bucket={str(w): t for w, t in compile_seconds.items()},
      compilation_cache=cache.report(len(compiled)),
      setup_seconds=setup_done - start, compile_seconds=compile_done - setup_done,
      loop_seconds=loop_seconds, end_to_end_seconds=end - start,
      end_to_end_cpu_seconds=end_cpu - start_cpu,
      valid_tokens=valid_tokens, padded_tokens=padded_tokens,
      steady_tokens_per_sec=valid_tokens / loop_seconds,
      steady_padded_tokens_per_sec=padded_tokens / loop_seconds,
      fixed_length_tokens_per_sec=fixed_tokens / fixed_seconds if fixed_steps else None,
      first_loss=losses[0], last_loss=float(np.mean(losses[-20:])))


def original_environment() -> dict[str, str]:
  """This environment as their trainer gets it: without our allocator
  tunables and without our compilation cache (their code has neither)."""
  drop = ("GLIBC_TUNABLES", "BIFOCAL_HOST_ALLOCATOR_PID", "JAX_COMPILATION_CACHE_DIR")
  return {k: v for k, v in os.environ.items()
          if k not in drop and not k.startswith("JAX_PERSISTENT_CACHE_")}


def run_original(checkout: str, lengths: np.ndarray, *, smoke: bool, python: str) -> dict:
  """Their trainer from `checkout`, in a subprocess (`original_trainer.py`)."""
  with tempfile.TemporaryDirectory() as tmp:
    lengths_file, out = os.path.join(tmp, "lengths.json"), os.path.join(tmp, "original.json")
    with open(lengths_file, "w") as f:
      json.dump([int(n) for n in lengths], f)
    command = [python, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                    "original_trainer.py"),
               f"--reference_checkout={checkout}", f"--lengths_file={lengths_file}",
               f"--out={out}", f"--smoke={smoke}"]
    result = subprocess.run(command, env=original_environment(), capture_output=True, text=True,
                            check=False)
    if result.returncode:
      sys.stderr.write(result.stderr[-4000:])
      raise RuntimeError(f"their trainer failed (exit status {result.returncode}): "
                         f"{' '.join(command)}")
    with open(out) as f:
      return json.load(f)


def without_compilation_cache() -> None:
  """This process's later compilations neither read nor write the cache."""
  from jax.experimental.compilation_cache import compilation_cache  # pylint: disable=g-import-not-at-top
  jax.config.update("jax_enable_compilation_cache", False)
  compilation_cache.reset_cache()


def run_ours_again(steps: int, kind: str, *, in_flight: int, fixed_steps: int, bucket_every: int,
                   smoke: bool, xla_options, compile_workers: int | None = None) -> dict:
  """Ours once more, in a fresh process with this one's compilation cache (a
  user's second run of the same command): its figures as `run_ours` gives them."""
  with tempfile.TemporaryDirectory() as tmp:
    out = os.path.join(tmp, "warm.json")
    command = [sys.executable, "-m", "benchmarks.reference_trainer", f"--steps={steps}",
               f"--kind={kind}", f"--in_flight={in_flight}", f"--fixed_steps={fixed_steps}",
               f"--bucket_every={bucket_every}", f"--step_compile_options={json.dumps(xla_options or {})}",
               f"--smoke={smoke}", "--nostand_in", "--nowarm_rerun", f"--out={out}",
               f"--compile_workers={compile_workers or 0}"]
    result = subprocess.run(command, capture_output=True, text=True, check=False,
                            cwd=bench_util.REPO)
    if result.returncode:
      sys.stderr.write(result.stderr[-4000:])
      raise RuntimeError(f"the second run of ours failed (exit status {result.returncode})")
    with open(out) as f:
      r = json.load(f)
  return {k: v for k, v in r.items() if k not in ("lengths", "machine")}


def run(steps: int, kind: str, *, in_flight: int = 2, fixed_steps: int = 10,
        bucket_every: int = 8, checkout: str | None = None, stand_in: bool = True,
        original_python: str = sys.executable, smoke: bool = False, xla_options=None,
        warm_rerun: bool = False, compile_workers: int | None = None) -> dict:
  config = reference_config(kind, steps, smoke)
  max_length = 4 if smoke else MAX_INPUT_LENGTH
  curriculum = Curriculum(config.task, batch_size=config.batch_size, seed=config.seed,
                          max_length=max_length, bucket_every=bucket_every)
  lengths = np.array([curriculum.length(s) for s in range(steps)])
  ours = run_ours(steps, kind, lengths, curriculum, config, in_flight=in_flight,
                  fixed_steps=fixed_steps, xla_options=xla_options, compile_workers=compile_workers)
  r = dict(machine=bench_util.machine(), **ours, ours_end_to_end_seconds=ours["end_to_end_seconds"],
           lengths=lengths.tolist())
  if warm_rerun:
    if ours["compilation_cache"]["state"] != "cold":
      raise RuntimeError(f"--warm_rerun needs a cold first run, but the compilation cache "
                         f"{ours['compilation_cache']['dir']} was {ours['compilation_cache']['state']}"
                         f": set BIFOCAL_COMPILATION_CACHE to a fresh directory")
    warm = run_ours_again(steps, kind, in_flight=in_flight, fixed_steps=fixed_steps,
                          bucket_every=bucket_every, smoke=smoke, xla_options=xla_options,
                          compile_workers=compile_workers)
    r.update(warm_rerun=warm, ours_warm_end_to_end_seconds=warm["end_to_end_seconds"])
  if checkout:
    original = run_original(checkout, lengths, smoke=smoke, python=original_python)
    if original["tokens"] != ours["valid_tokens"] or original["steps"] != steps:
      raise AssertionError(f"their trainer ran {original['steps']} steps of {original['tokens']} "
                           f"tokens, ours {steps} of {ours['valid_tokens']}")
    r.update(original=original, original_end_to_end_seconds=original["end_to_end_seconds"],
             speedup_vs_original=original["end_to_end_seconds"] / ours["end_to_end_seconds"],
             cpu_time_ratio_vs_original=(original["end_to_end_cpu_seconds"]
                                         / ours["end_to_end_cpu_seconds"]))
    if warm_rerun:
      r["speedup_vs_original_warm"] = original["end_to_end_seconds"] / warm["end_to_end_seconds"]
  elif stand_in:
    from benchmarks import haiku_reference  # pylint: disable=g-import-not-at-top
    without_compilation_cache()  # it stands in for code that has none
    rebuild = haiku_reference.run(steps, fixed_steps=fixed_steps, smoke=smoke, lengths=lengths)
    if rebuild["tokens"] != ours["valid_tokens"]:
      raise AssertionError(f"the stand-in trained {rebuild['tokens']} tokens, "
                           f"ours {ours['valid_tokens']}")
    rebuild["label"] = "smoke stand-in: our Haiku rebuild of their trainer, not their code"
    r.update(stand_in=rebuild,
             speedup_vs_stand_in=rebuild["end_to_end_seconds"] / ours["end_to_end_seconds"])
  return r


def report(r: dict) -> str:
  m = r["machine"]
  lines = [
      f"{m['cpu']}, {m['cores']} cores, {m['date']}, load average {m['load_average']}",
      f"odds_first, {r['kind']}, {r['model']['num_layers']} layers, width "
      f"{r['model']['d_model']}, {r['model']['num_heads']} heads, batch {r['batch_size']}, "
      f"{r['steps']} steps, uniform input lengths 1..{r['max_input_length']} per batch, buckets "
      f"{r['buckets']} ({r['compilations']} compilations)",
      f"ours: end-to-end {r['end_to_end_seconds']:.1f} s = setup {r['setup_seconds']:.1f} s + "
      f"compile {r['compile_seconds']:.1f} s (tracing and lowering "
      f"{sum(r['lower_seconds_by_bucket'].values()):.1f} s) + {r['steps']} steps "
      f"{r['loop_seconds']:.1f} s "
      f"(CPU {r['end_to_end_cpu_seconds']:.1f} s); "
      f"compilation cache {r['compilation_cache']['state']} ({r['compilation_cache']['dir']})",
      f"ours steady state: {r['steady_tokens_per_sec']:,.0f} tokens/s "
      f"({r['steady_padded_tokens_per_sec']:,.0f} with padding); fixed length "
      f"{r['max_input_length']}: {r['fixed_length_tokens_per_sec'] or 0:,.0f} tokens/s; loss "
      f"{r['first_loss']:.3f} -> {r['last_loss']:.3f}"]
  if "warm_rerun" in r:
    w = r["warm_rerun"]
    lines.append(
        f"ours again, fresh process, compilation cache {w['compilation_cache']['state']}: "
        f"end-to-end {w['end_to_end_seconds']:.1f} s = setup {w['setup_seconds']:.1f} s + "
        f"compile {w['compile_seconds']:.1f} s + steps {w['loop_seconds']:.1f} s "
        f"(CPU {w['end_to_end_cpu_seconds']:.1f} s)")
  if "original" in r:
    o = r["original"]
    lines.append(
        f"their trainer (from the checkout, same lengths, after ours): end-to-end "
        f"{o['end_to_end_seconds']:.1f} s (setup {o['setup_seconds']:.1f} s, first calls at "
        f"{o['compilations']} lengths {o['first_call_seconds_sum']:.1f} s, loop "
        f"{o['loop_seconds']:.1f} s; CPU {o['end_to_end_cpu_seconds']:.1f} s); ours is "
        f"{r['speedup_vs_original']:.2f}x faster end to end (CPU time "
        f"{r['cpu_time_ratio_vs_original']:.2f}x less)")
    if "speedup_vs_original_warm" in r:
      lines.append(f"ours on its second run (warm cache) is {r['speedup_vs_original_warm']:.2f}x "
                   f"faster end to end than theirs")
  if "stand_in" in r:
    h = r["stand_in"]
    lines.append(
        f"stand-in (our Haiku rebuild, NOT their trainer; pass --reference_checkout for it): "
        f"end-to-end {h['end_to_end_seconds']:.1f} s; ours is {r['speedup_vs_stand_in']:.2f}x "
        f"faster end to end")
  return "\n".join(lines)


def main(argv):
  del argv
  if _CHECKOUT.value is not None:
    problem = original_trainer.checkout_problem(_CHECKOUT.value)
    if problem:
      cli.fail(problem)
  r = run(_STEPS.value, _KIND.value, in_flight=_IN_FLIGHT.value, fixed_steps=_FIXED_STEPS.value,
          bucket_every=_BUCKET_EVERY.value, checkout=_CHECKOUT.value, stand_in=_STAND_IN.value,
          original_python=_ORIGINAL_PYTHON.value, smoke=_SMOKE.value,
          xla_options=json.loads(_STEP_COMPILE_OPTIONS.value), warm_rerun=_WARM_RERUN.value,
          compile_workers=_COMPILE_WORKERS.value or None)
  print(report(r))
  bench_util.write_json(_OUT.value, r)


if __name__ == "__main__":
  bench_util.run_main(main)
