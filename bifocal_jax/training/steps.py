"""The jit-compiled train and eval steps, and host batches -> global arrays.

`make_train_step(setup)` jit-compiles `train_step`, which composes three
pure parts, each testable alone: `update` (loss, gradients, the optimizer),
`guard_nonfinite` (the `nan_policy`) and `record_trajectory` (Spectral
Evolution's record). The state is donated and laid out by the `Setup`'s
shardings. `population` vmaps the same `train_step` over its members.
"""

from __future__ import annotations

import concurrent.futures
import os
import time
from collections.abc import Callable, Hashable, Mapping

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from bifocal_jax.training import metrics as metrics_lib
from bifocal_jax.nn import optim
from bifocal_jax.training import sharding as sharding_lib
from bifocal_jax.nn.positions import bounded
from bifocal_jax.training.state import Setup

# Codes for the quantity that went non-finite (recorded on device).
NONFINITE_WHAT = {1: "loss", 2: "gradient norm"}


class NonFiniteError(FloatingPointError):
  pass


def check_finite(state) -> None:
  """Raises `NonFiniteError` naming the step and quantity if the state's
  update went non-finite (`guard_nonfinite` under `nan_policy="error"`)."""
  bad = jax.device_get(state["nonfinite"])
  if int(bad["step"]) >= 0:
    raise NonFiniteError(
        f"non-finite {NONFINITE_WHAT[int(bad['what'])]} at step {int(bad['step'])}; "
        f"stopped, the last good checkpoint is kept (set config.nan_policy='skip' to drop "
        f"such updates instead)")


TRAIN_FIELDS = ("inputs", "targets", "mask", "loss_mask", "valid")
# Evaluation also carries each row's length and depth, so that the counts of
# a global batch (several processes) can be tallied without the local batches.
EVAL_FIELDS = TRAIN_FIELDS + ("length", "depth")


def to_global_batch(batch: dict | tuple, mesh, fields=TRAIN_FIELDS) -> dict | tuple:
  """Each process's local batch -> one global array per field, on the mesh
  (a tuple of length groups, `length_groups.py`: each group so)."""
  if isinstance(batch, tuple):
    return tuple(to_global_batch(group, mesh, fields) for group in batch)
  sharding = sharding_lib.batch_sharding(mesh)
  return {k: jax.make_array_from_process_local_data(sharding, np.asarray(batch[k])) for k in fields}


def grad_norms(grads) -> tuple[jax.Array, jax.Array]:
  """Global norms of the base and of the spectral gradients."""
  is_variable = lambda x: isinstance(x, nnx.Variable)
  leaves = jax.tree.leaves(grads, is_leaf=is_variable)
  labels = jax.tree.leaves(optim.spectral_labels(grads))
  sums = {optim.BASE: jnp.zeros((), jnp.float32), optim.SPECTRAL: jnp.zeros((), jnp.float32)}
  for leaf, label in zip(leaves, labels, strict=True):
    value = leaf[...] if is_variable(leaf) else leaf
    sums[label] = sums[label] + jnp.sum(jnp.square(value.astype(jnp.float32)))
  return jnp.sqrt(sums[optim.BASE]), jnp.sqrt(sums[optim.SPECTRAL])


def loss_and_counts(s: Setup, params, batch, rng, *, train: bool, close_ids=None, class_ids=None):
  """`(mean masked cross-entropy, (its weight, per-example accuracy counts))`.

  The loss covers `loss_mask` (for the Chomsky-hierarchy tasks also the
  padding after END, as their trainer's loss does), accuracy `mask`.
  """
  logits = s.model(params)(batch["inputs"], batch["valid"], rng=rng, train=train)
  loss, weight = metrics_lib.masked_cross_entropy(logits, batch["targets"], batch["loss_mask"])
  counts = metrics_lib.accuracy_counts(logits, batch["targets"], batch["mask"], close_ids=close_ids,
                                       class_ids=class_ids)
  return loss, (weight, counts)


def update(s: Setup, state, batch, rng):
  """One optimizer update, unguarded: `(params, opt_state, step metrics)`."""
  loss_fn = lambda p: loss_and_counts(s, p, batch, rng, train=True)
  (loss, (weight, counts)), grads = jax.value_and_grad(loss_fn, has_aux=True)(state["params"])
  return apply_gradients(
      s, state, grads,
      dict(loss=loss, loss_weight=weight, token_correct=counts["token_correct"].sum(),
           token_total=counts["token_total"].sum()))


def apply_gradients(s: Setup, state, grads, metrics: dict):
  """The optimizer update by `grads` (of the loss in `metrics`), unguarded:
  `(params, opt_state, metrics with the gradient norms)`. Parameters with
  bounds (`positions.bounded.BoundedParam`) are then projected onto them."""
  grad_norm, spectral_grad_norm = grad_norms(grads)
  updates, opt_state = s.tx.update(grads, state["opt_state"], state["params"])
  params = bounded.project(optax.apply_updates(state["params"], updates))
  return params, opt_state, dict(metrics, grad_norm=grad_norm,
                                 spectral_grad_norm=spectral_grad_norm)


def guard_nonfinite(state, params, opt_state, metrics, *, skip: bool):
  """The `nan_policy`: `(params, opt_state, nonfinite, next step, skipped)`.

  Under "error" (`skip=False`) the first non-finite update freezes the state
  for good and is recorded (the host raises at its next check); under "skip",
  only that update is dropped, and the step counter still advances.
  """
  step = state["step"]
  finite_loss = jnp.isfinite(metrics["loss"])
  finite = (finite_loss & jnp.isfinite(metrics["grad_norm"]) &
            jnp.isfinite(metrics["spectral_grad_norm"]))
  already_bad = state["nonfinite"]["step"] >= 0
  keep_old = ~finite if skip else (~finite | already_bad)
  keep = lambda old, new: jax.tree.map(lambda o, n: jnp.where(keep_old, o, n), old, new)
  first_bad = (~finite) & ~already_bad & (not skip)
  # Named like metrics and checkpoints name steps: the update that makes step + 1.
  nonfinite = dict(
      step=jnp.where(first_bad, step + 1, state["nonfinite"]["step"]),
      what=jnp.where(first_bad, jnp.where(finite_loss, 2, 1), state["nonfinite"]["what"]))
  next_step = jnp.where(keep_old & (not skip), step, step + 1)
  return (keep(state["params"],
               params), keep(state["opt_state"],
                             opt_state), nonfinite, next_step, (~finite).astype(jnp.int32))


def record_trajectory(trajectory, frequencies, step, next_step, *, record_every: int,
                      last_step: int) -> dict:
  """Appends `frequencies` when the update to `next_step` happened and that
  step is a recording step (every `record_every`, and the last)."""
  record = ((next_step % record_every == 0) | (next_step == last_step)) & (next_step != step)
  count = trajectory["count"]
  at_count = lambda buffer, value: jnp.where(
      record, jax.lax.dynamic_update_index_in_dim(buffer, value, count, 0), buffer)
  return dict(frequencies=at_count(trajectory["frequencies"],
                                   frequencies), steps=at_count(trajectory["steps"], next_step),
              count=count + record.astype(jnp.int32), start=trajectory["start"])


def train_step(s: Setup, state, batch, base_key):
  """One training step, unjitted: `(new state, step metrics)`. `base_key`: the
  run's key, folded with the step (`make_train_step` closes over the seed's;
  a population vmaps this over its members' states, batches and keys)."""
  rng = jax.random.fold_in(base_key, state["step"])
  params, opt_state, metrics = update(s, state, batch, rng)
  return finish_step(s, state, params, opt_state, metrics)


def finish_step(s: Setup, state, params, opt_state, metrics):
  """The step after the update: the `nan_policy` guard, the next step and
  Spectral Evolution's record: `(new state, step metrics)`."""
  config = s.config
  params, opt_state, nonfinite, next_step, skipped = guard_nonfinite(
      state, params, opt_state, metrics, skip=config.nan_policy == "skip")
  trajectory = state["trajectory"]
  drift = jnp.zeros((), jnp.float32)
  if s.has_spectral:
    frequencies = s.spectral_frequencies(params)
    trajectory = record_trajectory(trajectory, frequencies, state["step"], next_step,
                                   record_every=config.spectral.record_every,
                                   last_step=config.steps)
    drift = jnp.abs(jnp.log(frequencies) - jnp.log(trajectory["start"])).mean()
  new_state = dict(step=next_step, params=params, opt_state=opt_state, trajectory=trajectory,
                   nonfinite=nonfinite)
  return new_state, dict(metrics, spectral_drift=drift, skipped=skipped)


def make_train_step(s: Setup):
  """`state, metrics = train_step(state, batch)`, jit-compiled with shardings."""
  base_key = jax.random.key(s.config.seed)

  def train_step_fn(state, batch):
    return train_step(s, state, batch, base_key)

  train_step_fn.__name__ = "train_step"  # the compiled program's name, as before
  return jax.jit(train_step_fn,
                 in_shardings=(s.state_shardings, sharding_lib.batch_sharding(s.mesh)),
                 out_shardings=(s.state_shardings, sharding_lib.replicated(s.mesh)),
                 donate_argnums=(0,), compiler_options=compiler_options())


def compiler_options() -> dict | None:
  """XLA options of the compiled steps. On CPU, backend optimisation level 1,
  which compiles the train step faster than the default level with bitwise
  the same results and no slower steps (`python -m benchmarks.compile_options`; the
  figures: docs/performance.md); elsewhere XLA's defaults."""
  return {"xla_backend_optimization_level": 1} if jax.default_backend() == "cpu" else None


_BATCH_DTYPES = dict(inputs=np.int32, targets=np.int32, mask=np.float32, loss_mask=np.float32,
                     valid=bool)


def abstract_train_batch(batch_size: int, width: int, mesh) -> dict[str, jax.ShapeDtypeStruct]:
  """The global train batch of `batch_size` rows of `width` tokens, as shapes."""
  sharding = sharding_lib.batch_sharding(mesh)
  return {
      k: jax.ShapeDtypeStruct((batch_size, width), d, sharding=sharding)
      for k, d in _BATCH_DTYPES.items()
  }


def compile_in_parallel(jobs: Mapping[Hashable, tuple], *, mesh=None, workers: int | None = None,
                        compiler_options: dict | None = None) -> dict:
  """`{key: (executable, trace_and_lower_seconds, compile_seconds)}` for
  `jobs = {key: (jitted, args)}`: each `jitted.lower(*args).compile()` ahead of
  time (args may be `jax.ShapeDtypeStruct`s), in `workers` threads (default:
  the CPU count). Tracing and lowering hold the GIL; XLA's compilation
  releases it, so one program compiles while the next is traced, and
  compilations share the cores. `mesh`: set in each thread (JAX's mesh
  context is per thread); `compiler_options`: XLA options for every job."""

  def one(jitted, args):
    start = time.perf_counter()
    if mesh is None:
      lowered = jitted.lower(*args)
    else:
      with jax.set_mesh(mesh):
        lowered = jitted.lower(*args)
    lowered_at = time.perf_counter()
    executable = lowered.compile(compiler_options=compiler_options or None)
    return executable, lowered_at - start, time.perf_counter() - lowered_at

  workers = min(workers or os.cpu_count() or 1, max(len(jobs), 1))
  with concurrent.futures.ThreadPoolExecutor(max_workers=workers,
                                             thread_name_prefix="compile") as pool:
    futures = {key: pool.submit(one, *job) for key, job in jobs.items()}
    return {key: future.result() for key, future in futures.items()}


class Precompiled:
  """A jitted step and executables of it compiled ahead, chosen by
  `key_fn(*args)` (e.g. the batch's width); other calls go to the jitted step."""

  def __init__(self, jitted, executables: Mapping[Hashable, Callable], key_fn: Callable[...,
                                                                                        Hashable]):
    self.jitted, self.executables, self.key_fn = jitted, dict(executables), key_fn

  def __call__(self, *args):
    return self.executables.get(self.key_fn(*args), self.jitted)(*args)


def batch_width(state, batch) -> int:
  """`Precompiled`'s key of the train step: the batch's padded length."""
  del state
  return batch["inputs"].shape[1]


def train_step_jobs(s: Setup, jitted, widths) -> dict:
  """`compile_in_parallel` jobs of the train step `jitted` at each batch width."""
  return {
      ("train_step", w):
          (jitted, (s.abstract_state, abstract_train_batch(s.config.batch_size, w, s.mesh)))
      for w in widths
  }


def make_eval_step(s: Setup, *, close_ids=None, class_ids=None):
  """`counts = eval_step(params, batch, rng)` on a global batch of `EVAL_FIELDS`:
  per-example accuracy counts (`metrics.accuracy_counts`, argmax over
  `class_ids`), `loss_sum`, and each row's `length`, `depth` and `row_valid`
  (holds an example), all replicated so that every process can read them."""

  def eval_step(params, batch, rng):
    loss, (weight, counts) = loss_and_counts(s, params, batch, rng, train=False,
                                             close_ids=close_ids, class_ids=class_ids)
    return dict(counts, loss_sum=loss * weight, length=batch["length"], depth=batch["depth"],
                row_valid=batch["valid"].any(-1))

  return jax.jit(eval_step, out_shardings=sharding_lib.replicated(s.mesh))
