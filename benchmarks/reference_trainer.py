r"""Against DeepMind's Chomsky-hierarchy trainer (Deletang et al. 2023; JAX + Haiku).

Their transformer (5 layers, width 64, 8 heads, batch 128) trains `odds_first`
at about 15,000 tokens/s on a 2-core CPU at a fixed length of 40; with their
uniform length curriculum (one input length n in 1..40 per batch) it compiles a
new step for every length it meets. Here: the same model size, batch and
curriculum (`configs/odds_first.py:paper`) on this project's train step
(`state.setup`, `steps.make_train_step`). Each batch is padded to a length
bucket (n input symbols + n query positions, rounded up to a multiple of 8:
8, 16, ..., 80): 10 compilations instead of 40, made before the first step.
`--bucket_every=0` pads to powers of two instead (16, 32, 64, 80: 4
compilations, 25% padding instead of 7%), as `train.py` does by default.

  python benchmarks/reference_trainer.py                  # 2,000 steps (minutes)
  python benchmarks/reference_trainer.py --steps=100      # a quick look
  python benchmarks/reference_trainer.py --kind=rope --out=/tmp/ref.json

Reported:
  end-to-end    wall time from building the model to the last step's result
                on the host: setup, every compilation, data, all steps.
  steady state  tokens/s of the training loop after compilation, and of steps
                at the fixed length 40 (their figure's setting).
  rebuild       their trainer rebuilt in Haiku (`haiku_reference.py`), run
                after ours in the same process on the same input lengths:
                its measured end-to-end time, and ours against it. This is
                the comparison of record; the projection below is kept for
                continuity.
  reference     their end-to-end time, projected: this run's curriculum
                tokens at their 15,000 tokens/s (the lower bound), plus one
                compilation for each of the 40 lengths, estimated as this
                project's train step traced and compiled at
                `--reference_compile_samples` of their lengths (our model, not
                their Haiku one: an estimate). A token is one position the
                transformer processes: input plus output tape, 2n per example,
                as their `make_model_with_empty_targets` feeds it.
"""

from __future__ import annotations

from bifocal_jax import host

host.use_tuned_allocator()  # before JAX starts: see bifocal_jax/host.py
# pylint: disable=g-import-not-at-top,wrong-import-position,wrong-import-order

import collections
import os
import sys
import time

import grain
import jax
import numpy as np
from absl import app, flags

from bifocal_jax import sharding, tasks
from bifocal_jax import steps as steps_lib
from bifocal_jax import state as state_lib
from bifocal_jax.tasks import pipeline

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_util  # pylint: disable=g-import-not-at-top,wrong-import-position

REFERENCE_TOKENS_PER_SEC = 15_000.0
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
_REFERENCE_COMPILE_SAMPLES = flags.DEFINE_integer(
    "reference_compile_samples", 4,
    "Lengths at which to time a compilation for the reference's recompilations (0: skip).",
    lower_bound=0)
_HAIKU_REBUILD = flags.DEFINE_bool(
    "haiku_rebuild", True, "Also run their trainer rebuilt in Haiku (haiku_reference.py).")
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
  sharding_ = sharding.batch_sharding(mesh)
  dtypes = dict(inputs=np.int32, targets=np.int32, mask=np.float32, loss_mask=np.float32,
                valid=bool)
  return {k: jax.ShapeDtypeStruct((batch_size, width), d, sharding=sharding_)
          for k, d in dtypes.items()}


def compile_step(step_fn, abstract_state, batch_size: int, width: int, mesh):
  """The train step traced and compiled for batches `width` positions long."""
  return step_fn.lower(abstract_state, abstract_batch(batch_size, width, mesh)).compile()


def compile_buckets(step_fn, abstract_state, batch_size: int, buckets, mesh) -> dict:
  """The train step compiled for every bucket, one after another (XLA:CPU
  compiles on all cores already: two at a time took as long here)."""
  return {w: compile_step(step_fn, abstract_state, batch_size, w, mesh) for w in buckets}


def time_reference_compiles(step_fn, abstract_state, batch_size: int, curriculum, mesh,
                            samples: int) -> list[float]:
  """Seconds to trace and compile the step at `samples` of the reference's
  lengths (2n positions), spread over 1..max_length, none a bucket of ours (so
  nothing is reused from the run)."""
  lengths = [n for n in range(1, curriculum.max_length + 1) if 2 * n not in curriculum.buckets]
  picks = sorted({lengths[int(i)] for i in np.linspace(0, len(lengths) - 1, samples)})
  seconds = []
  for n in picks:
    start = time.perf_counter()
    compile_step(step_fn, abstract_state, batch_size, 2 * n, mesh)
    seconds.append(time.perf_counter() - start)
  return seconds


def run(steps: int, kind: str, *, in_flight: int = 2, fixed_steps: int = 10,
        bucket_every: int = 8, reference_compile_samples: int = 4, haiku_rebuild: bool = True,
        smoke: bool = False) -> dict:
  config = reference_config(kind, steps, smoke)
  mesh = sharding.make_mesh(config.mesh)
  max_length = 4 if smoke else MAX_INPUT_LENGTH
  curriculum = Curriculum(config.task, batch_size=config.batch_size, seed=config.seed,
                          max_length=max_length, bucket_every=bucket_every)
  lengths = np.array([curriculum.length(s) for s in range(steps)])
  valid_tokens = int(2 * lengths.sum()) * config.batch_size
  padded_tokens = sum(curriculum.bucket(int(n)) for n in lengths) * config.batch_size
  with jax.set_mesh(mesh):
    start = time.perf_counter()
    s, state = state_lib.setup(config, mesh, task=curriculum.tasks[max_length])
    setup_done = time.perf_counter()
    step_fn = steps_lib.make_train_step(s)
    compiled = compile_buckets(step_fn, s.abstract_state, config.batch_size, curriculum.buckets,
                               mesh)
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
    end = time.perf_counter()
    # Steady state at their setting: input length 40 (bucket 80), no data work.
    fixed = steps_lib.to_global_batch(curriculum.batch(steps, max_length), mesh)
    fixed_step = compiled[fixed["inputs"].shape[1]]
    fixed_start = time.perf_counter()
    for _ in range(fixed_steps):
      state, metrics = fixed_step(state, fixed)
    jax.block_until_ready(metrics)
    fixed_seconds = (time.perf_counter() - fixed_start) / max(fixed_steps, 1)
    reference_compiles = time_reference_compiles(
        step_fn, s.abstract_state, config.batch_size, curriculum, mesh,
        reference_compile_samples) if reference_compile_samples else []
  loop_seconds = end - compile_done
  reference_seconds = valid_tokens / REFERENCE_TOKENS_PER_SEC
  # Their trainer meets every length 1..max_length within the first few hundred steps.
  reference_compile_seconds = (max_length * float(np.mean(reference_compiles))
                               if reference_compiles else None)
  reference_estimate = (reference_seconds + reference_compile_seconds
                        if reference_compiles else None)
  fixed_tokens = config.batch_size * fixed["inputs"].shape[1]
  rebuild = None
  if haiku_rebuild:
    import haiku_reference  # pylint: disable=g-import-not-at-top
    rebuild = haiku_reference.run(steps, fixed_steps=fixed_steps, smoke=smoke, lengths=lengths)
    if rebuild["tokens"] != valid_tokens:
      raise AssertionError(f"the rebuild trained {rebuild['tokens']} tokens, ours {valid_tokens}")
  return dict(
      machine=bench_util.machine(), kind=kind, steps=steps, batch_size=config.batch_size,
      max_input_length=max_length,
      model=config.model.to_dict(), buckets=list(curriculum.buckets),
      compilations=len(compiled),
      setup_seconds=setup_done - start, compile_seconds=compile_done - setup_done,
      loop_seconds=loop_seconds, end_to_end_seconds=end - start,
      valid_tokens=valid_tokens, padded_tokens=padded_tokens,
      steady_tokens_per_sec=valid_tokens / loop_seconds,
      steady_padded_tokens_per_sec=padded_tokens / loop_seconds,
      fixed_length_tokens_per_sec=fixed_tokens / fixed_seconds if fixed_steps else None,
      first_loss=losses[0], last_loss=float(np.mean(losses[-20:])),
      reference_tokens_per_sec=REFERENCE_TOKENS_PER_SEC,
      reference_end_to_end_seconds_lower_bound=reference_seconds,
      speedup_vs_reference=reference_seconds / (end - start),
      reference_compile_sample_seconds=reference_compiles,
      reference_compile_seconds_estimate=reference_compile_seconds,
      reference_end_to_end_seconds_estimate=reference_estimate,
      speedup_vs_reference_estimate=(reference_estimate / (end - start)
                                     if reference_estimate else None),
      haiku_rebuild=rebuild,
      speedup_vs_haiku_rebuild=rebuild["end_to_end_seconds"] / (end - start) if rebuild else None)


def main(argv):
  del argv
  r = run(_STEPS.value, _KIND.value, in_flight=_IN_FLIGHT.value, fixed_steps=_FIXED_STEPS.value,
          bucket_every=_BUCKET_EVERY.value,
          reference_compile_samples=_REFERENCE_COMPILE_SAMPLES.value,
          haiku_rebuild=_HAIKU_REBUILD.value, smoke=_SMOKE.value)
  m = r["machine"]
  print(f"{m['cpu']}, {m['cores']} cores, {m['date']}, load average {m['load_average']}")
  print(f"odds_first, {r['kind']}, {r['model']['num_layers']} layers, width "
        f"{r['model']['d_model']}, {r['model']['num_heads']} heads, batch {r['batch_size']}, "
        f"{r['steps']} steps, uniform input lengths 1..{r['max_input_length']} per batch, buckets "
        f"{r['buckets']} ({r['compilations']} compilations)")
  print(f"end-to-end {r['end_to_end_seconds']:.0f} s = setup {r['setup_seconds']:.1f} s + "
        f"compile {r['compile_seconds']:.1f} s + {r['steps']} steps {r['loop_seconds']:.1f} s")
  print(f"steady state: {r['steady_tokens_per_sec']:,.0f} tokens/s "
        f"({r['steady_padded_tokens_per_sec']:,.0f} with padding); fixed length 40: "
        f"{r['fixed_length_tokens_per_sec'] or 0:,.0f} tokens/s")
  print(f"loss {r['first_loss']:.3f} -> {r['last_loss']:.3f}")
  print(f"reference: >= {r['reference_end_to_end_seconds_lower_bound']:.0f} s for the same "
        f"tokens at {REFERENCE_TOKENS_PER_SEC:,.0f} tokens/s (plus their recompilations): "
        f"{r['speedup_vs_reference']:.2f}x faster end to end")
  if r["reference_end_to_end_seconds_estimate"]:
    samples = ", ".join(f"{x:.1f}" for x in r["reference_compile_sample_seconds"])
    print(f"reference with {r['max_input_length']} recompilations "
          f"(ours at their lengths: {samples} s each): ~"
          f"{r['reference_end_to_end_seconds_estimate']:.0f} s: "
          f"{r['speedup_vs_reference_estimate']:.2f}x faster end to end")
  h = r["haiku_rebuild"]
  if h:
    print(f"their trainer rebuilt in Haiku, same lengths, measured after ours: end-to-end "
          f"{h['end_to_end_seconds']:.0f} s (setup {h['setup_seconds']:.1f} s, first calls at its "
          f"{h['compilations']} lengths {h['first_call_seconds_sum']:.1f} s, loop "
          f"{h['loop_seconds']:.1f} s); fixed length 40: {h['fixed_length_tokens_per_sec'] or 0:,.0f} "
          f"tokens/s; ours is {r['speedup_vs_haiku_rebuild']:.2f}x faster end to end")
  bench_util.write_json(_OUT.value, r)


if __name__ == "__main__":
  app.run(main)
