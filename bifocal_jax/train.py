"""Training: `train_and_evaluate(config, workdir)`, the whole job as a function.

Structure (read top to bottom):
  build_model / TrainState    the model is split into a static graph, its
                              parameters and its non-trainable constants; the
                              train state is a plain pytree of arrays.
  make_train_step             one jit-compiled step with explicit shardings and
                              donated state: loss, grads, Spectral Evolution
                              update, non-finite guard, trajectory record.
  train_and_evaluate          the loop: resume, data, logging, evaluation,
                              checkpoints, preemption.

`train.py` at the top level is only flag parsing around this module, so
notebooks call `train_and_evaluate` directly.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import shutil
import signal
import threading
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from absl import logging
from flax import nnx

from bifocal_jax import checkpoint as checkpoint_lib
from bifocal_jax import config as config_lib
from bifocal_jax import metrics as metrics_lib
from bifocal_jax import model as model_lib
from bifocal_jax import optim
from bifocal_jax import sharding as sharding_lib
from bifocal_jax import tasks
from bifocal_jax.tasks import pipeline

# Codes for the quantity that went non-finite (recorded on device).
NONFINITE_WHAT = {1: "loss", 2: "gradient norm"}


class NonFiniteError(FloatingPointError):
  pass


class WorkdirConflictError(ValueError):
  pass


# ----------------------------------------------------------------------------
# Model and state.
# ----------------------------------------------------------------------------


def build_model(config: ml_collections.ConfigDict, task, *, seed: int | None = None):
  return model_lib.Transformer(
      config.model, config.position, vocab_size=task.vocab_size, causal=task.causal,
      rngs=nnx.Rngs(config.seed if seed is None else seed))


def trajectory_capacity(config) -> int:
  """Records at step 0, every `record_every` steps, and at the last step."""
  return config.steps // config.spectral.record_every + 2


@dataclasses.dataclass
class Setup:
  """Everything static about a run: built once, before the loop."""
  config: ml_collections.ConfigDict
  task: Any
  mesh: jax.sharding.Mesh
  graphdef: Any
  constants: Any            # non-trainable model Variables (e.g. ALiBi slopes)
  tx: optax.GradientTransformation
  schedules: dict[str, Callable]
  state_shardings: Any
  abstract_state: Any
  has_spectral: bool


def _spectral_of(graphdef, params, constants):
  return model_lib.spectral_frequencies(nnx.merge(graphdef, params, constants))


def init_state(config, task, mesh, tx, *, params_override=None):
  """Builds the model and the initial train state directly onto the mesh."""
  abstract_model = nnx.eval_shape(lambda: build_model(config, task))
  graphdef, abstract_params, _ = nnx.split(abstract_model, nnx.Param, ...)
  param_shardings = sharding_lib.param_shardings(abstract_params, mesh)
  # Built under jit: eagerly, every initializer compiles on its own. The
  # initializers' random-number code is slow to optimise and runs once, so
  # XLA's backend optimisations are off here (seconds of compile saved).
  init_jit = functools.partial(jax.jit, compiler_options={"xla_backend_optimization_level": 0})
  constants = init_jit(lambda: nnx.split(build_model(config, task), nnx.Param, ...)[2],
                       out_shardings=sharding_lib.replicated(mesh))()

  def make_params():
    return nnx.split(build_model(config, task), nnx.Param, ...)[1]

  if params_override is None:
    params = init_jit(make_params, out_shardings=param_shardings)()
  else:
    params = jax.device_put(params_override, param_shardings)

  spectral0 = _spectral_of(graphdef, params, constants)
  capacity = trajectory_capacity(config)
  if spectral0 is None:
    traj_freqs = jnp.zeros((capacity, 0, 0, 0), jnp.float32)
  else:
    traj_freqs = jnp.zeros((capacity,) + spectral0.shape, jnp.float32).at[0].set(spectral0)
  rep = sharding_lib.replicated(mesh)
  state = dict(
      step=jnp.zeros((), jnp.int32),
      params=params,
      opt_state=jax.jit(tx.init)(params),
      trajectory=dict(
          frequencies=traj_freqs,
          steps=jnp.zeros((capacity,), jnp.int32),
          count=jnp.ones((), jnp.int32),
          start=(jnp.zeros((0, 0, 0), jnp.float32) if spectral0 is None else spectral0)),
      nonfinite=dict(step=jnp.full((), -1, jnp.int32), what=jnp.zeros((), jnp.int32)),
  )
  # Everything not already laid out on the mesh (scalars, trajectory) is replicated.
  state = jax.tree.map(lambda x: x if _is_sharded(x, mesh) else jax.device_put(x, rep), state)
  return graphdef, constants, state


def _is_sharded(x, mesh) -> bool:
  sharding = getattr(x, "sharding", None)
  return isinstance(sharding, jax.sharding.NamedSharding) and sharding.mesh == mesh


def setup(config: ml_collections.ConfigDict, mesh: jax.sharding.Mesh, *, task=None,
          params_override=None) -> tuple[Setup, Any]:
  task = tasks.get_task(config.task) if task is None else task
  tx, schedules = optim.default_optimizer(
      learning_rate=config.learning_rate, weight_decay=config.weight_decay,
      warmup_steps=config.warmup_steps, total_steps=max(config.steps, config.warmup_steps + 1),
      spectral_learning_rate=config.spectral.learning_rate,
      spectral_warmup_steps=config.spectral.warmup_steps,
      spectral_freeze_steps=config.spectral.freeze_steps,
      clip_norm=config.clip_norm, spectral_clip_norm=config.spectral.clip_norm)
  graphdef, constants, state = init_state(config, task, mesh, tx, params_override=params_override)
  state_shardings = jax.tree.map(lambda x: x.sharding, state)
  abstract_state = jax.tree.map(
      lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), state)
  has_spectral = state["trajectory"]["frequencies"].shape[1] > 0
  return Setup(config, task, mesh, graphdef, constants, tx, schedules, state_shardings,
               abstract_state, has_spectral), state


# ----------------------------------------------------------------------------
# The train step.
# ----------------------------------------------------------------------------


def _grad_norms(grads) -> tuple[jax.Array, jax.Array]:
  """Global norms of the base and of the spectral gradients."""
  is_variable = lambda x: isinstance(x, nnx.Variable)
  leaves = jax.tree.leaves(grads, is_leaf=is_variable)
  labels = jax.tree.leaves(optim.spectral_labels(grads))
  sums = {optim.BASE: jnp.zeros((), jnp.float32), optim.SPECTRAL: jnp.zeros((), jnp.float32)}
  for leaf, label in zip(leaves, labels, strict=True):
    value = leaf[...] if is_variable(leaf) else leaf
    sums[label] = sums[label] + jnp.sum(jnp.square(value.astype(jnp.float32)))
  return jnp.sqrt(sums[optim.BASE]), jnp.sqrt(sums[optim.SPECTRAL])


def make_train_step(s: Setup):
  """`state, metrics = train_step(state, batch)`, jit-compiled with shardings."""
  config = s.config
  nan_skip = config.nan_policy == "skip"
  record_every = config.spectral.record_every
  last_step = config.steps
  base_key = jax.random.key(config.seed)

  def loss_fn(params, batch, rng):
    model = nnx.merge(s.graphdef, params, s.constants)
    logits = model(batch["inputs"], batch["valid"], rng=rng, train=True)
    # The loss covers `loss_mask` (for Chomsky tasks also the padding after END, as theirs).
    loss, weight = metrics_lib.masked_cross_entropy(
        logits, batch["targets"], batch.get("loss_mask", batch["mask"]))
    counts = metrics_lib.accuracy_counts(logits, batch["targets"], batch["mask"])
    return loss, (weight, counts)

  def train_step(state, batch):
    step = state["step"]
    rng = jax.random.fold_in(base_key, step)
    (loss, (weight, counts)), grads = jax.value_and_grad(loss_fn, has_aux=True)(
        state["params"], batch, rng)
    grad_norm, spectral_grad_norm = _grad_norms(grads)
    updates, opt_state = s.tx.update(grads, state["opt_state"], state["params"])
    params = optax.apply_updates(state["params"], updates)

    finite_loss = jnp.isfinite(loss)
    finite_grads = jnp.isfinite(grad_norm) & jnp.isfinite(spectral_grad_norm)
    finite = finite_loss & finite_grads
    already_bad = state["nonfinite"]["step"] >= 0
    # Under "error", the first non-finite step freezes the state for good (the
    # host raises at its next check); under "skip", only that update is dropped.
    keep_old = ~finite if nan_skip else (~finite | already_bad)
    params = jax.tree.map(lambda o, n: jnp.where(keep_old, o, n), state["params"], params)
    opt_state = jax.tree.map(lambda o, n: jnp.where(keep_old, o, n), state["opt_state"], opt_state)
    first_bad = (~finite) & ~already_bad & (not nan_skip)
    # Named like metrics and checkpoints name steps: the update that makes step + 1.
    nonfinite = dict(
        step=jnp.where(first_bad, step + 1, state["nonfinite"]["step"]),
        what=jnp.where(first_bad, jnp.where(finite_loss, 2, 1), state["nonfinite"]["what"]))
    new_step = jnp.where(keep_old & ~jnp.asarray(nan_skip), step, step + 1)

    trajectory = state["trajectory"]
    if s.has_spectral:
      record = (new_step % record_every == 0) | (new_step == last_step)
      record = record & (new_step != step)
      freqs = _spectral_of(s.graphdef, params, s.constants)
      count = trajectory["count"]
      trajectory = dict(
          frequencies=jnp.where(
              record, jax.lax.dynamic_update_index_in_dim(trajectory["frequencies"], freqs, count, 0),
              trajectory["frequencies"]),
          steps=jnp.where(
              record, jax.lax.dynamic_update_index_in_dim(trajectory["steps"], new_step, count, 0),
              trajectory["steps"]),
          count=count + record.astype(jnp.int32),
          start=trajectory["start"])
      drift = jnp.abs(jnp.log(freqs) - jnp.log(trajectory["start"])).mean()
    else:
      drift = jnp.zeros((), jnp.float32)

    new_state = dict(step=new_step, params=params, opt_state=opt_state,
                     trajectory=trajectory, nonfinite=nonfinite)
    metrics = dict(loss=loss, loss_weight=weight, grad_norm=grad_norm,
                   spectral_grad_norm=spectral_grad_norm, spectral_drift=drift,
                   token_correct=counts["token_correct"].sum(),
                   token_total=counts["token_total"].sum(),
                   skipped=(~finite).astype(jnp.int32))
    return new_state, metrics

  batch_sharding = sharding_lib.batch_sharding(s.mesh)
  return jax.jit(
      train_step,
      in_shardings=(s.state_shardings, batch_sharding),
      out_shardings=(s.state_shardings, sharding_lib.replicated(s.mesh)),
      donate_argnums=(0,))


def make_eval_step(s: Setup, *, close_ids=None):
  """`counts = eval_step(params, batch, rng)`: per-example accuracy counts of the
  global batch, replicated (so every process can read them)."""

  def eval_step(params, batch, rng):
    model = nnx.merge(s.graphdef, params, s.constants)
    logits = model(batch["inputs"], batch["valid"], rng=rng, train=False)
    loss, weight = metrics_lib.masked_cross_entropy(logits, batch["targets"], batch["mask"])
    counts = metrics_lib.accuracy_counts(logits, batch["targets"], batch["mask"],
                                         close_ids=close_ids)
    counts["loss_sum"] = loss * weight
    return counts

  return jax.jit(eval_step, out_shardings=sharding_lib.replicated(s.mesh))


# ----------------------------------------------------------------------------
# Host side helpers.
# ----------------------------------------------------------------------------


def to_global_batch(batch: dict, mesh) -> dict:
  """Each process's local batch -> one global array per field, on the mesh."""
  sharding = sharding_lib.batch_sharding(mesh)
  fields = ("inputs", "targets", "mask", "loss_mask", "valid")
  return {k: jax.make_array_from_process_local_data(sharding, np.asarray(batch[k]))
          for k in fields if k in batch}


def dyck_close_ids(task) -> tuple[int, ...] | None:
  """Token ids of the closing brackets (for the 0.8-ratio metric), if Dyck."""
  ids = getattr(task, "close_ids", None)
  if ids is not None:
    return tuple(int(i) for i in ids)
  if task.name == "dyck":
    k = int(task.config.k) if hasattr(task, "config") else 8
    return tuple(range(k + 1, 2 * k + 1))
  return None


def evaluate_split(s: Setup, params, split: str, *, num_examples: int | None, batch_size: int,
                   eval_step=None, batches=None) -> dict:
  """Accuracy on one held-out split; counts summed on host in float64."""
  close_ids = dyck_close_ids(s.task)
  eval_step = eval_step or make_eval_step(s, close_ids=close_ids)
  if batches is None:
    batches = pipeline.eval_batches(
        s.task, split, batch_size=batch_size, num_examples=num_examples,
        process_index=jax.process_index(), process_count=jax.process_count())
  totals: dict[str, float] = {}
  rng = jax.random.key(s.config.seed + 1)
  for batch in batches:
    global_batch = to_global_batch(batch, s.mesh)
    counts = jax.device_get(eval_step(params, global_batch, rng))
    valid_rows = np.asarray(jax.device_get(_valid_rows(s.mesh)(global_batch["valid"])))
    for k, v in counts.items():
      v = np.asarray(v, np.float64)
      totals[k] = totals.get(k, 0.0) + float(v.sum() if v.ndim == 0 else v[valid_rows].sum())
    correct_rows = counts["token_correct"] == counts["token_total"]
    totals["seq_correct"] = totals.get("seq_correct", 0.0) + float(
        (correct_rows & valid_rows).sum())
    totals["seq_total"] = totals.get("seq_total", 0.0) + float(valid_rows.sum())
  out = dict(
      token_accuracy=totals.get("token_correct", 0.0) / max(totals.get("token_total", 0.0), 1.0),
      sequence_accuracy=totals.get("seq_correct", 0.0) / max(totals.get("seq_total", 0.0), 1.0),
      loss=totals.get("loss_sum", 0.0) / max(totals.get("token_total", 0.0), 1.0),
      examples=int(totals.get("seq_total", 0)))
  if "close_correct" in totals:
    out["close_accuracy"] = totals["close_correct"] / max(totals["token_total"], 1.0)
  return out


@functools.cache
def _valid_rows(mesh):
  """`rows = f(valid_BxL)`: the rows holding an example, replicated to every process."""
  return jax.jit(lambda valid: valid.any(-1), out_shardings=sharding_lib.replicated(mesh))


class PreemptionGuard:
  """Turns SIGTERM/SIGINT into a flag the loop checks between steps.

  Single-process runs only: with several processes, each would see its signal
  at a different step, so there SIGTERM is left to JAX's preemption service,
  which agrees on one step for all of them (`Checkpointer.reached_preemption`).
  """

  def __init__(self, *, enabled: bool = True):
    self.enabled = enabled
    self.signal = None
    self._previous = {}

  def __enter__(self):
    if self.enabled and threading.current_thread() is threading.main_thread():
      for sig in (signal.SIGTERM, signal.SIGINT):
        self._previous[sig] = signal.signal(sig, self._handle)
    return self

  def _handle(self, signum, frame):
    del frame
    if self.signal is not None:  # a second signal: stop now
      raise KeyboardInterrupt
    self.signal = signal.Signals(signum).name

  def __exit__(self, *exc):
    for sig, handler in self._previous.items():
      signal.signal(sig, handler)


def config_to_json(config) -> dict:
  return json.loads(config.to_json_best_effort())


def _flatten_config(d: dict, prefix: str = "") -> dict:
  out = {}
  for k, v in d.items():
    key = f"{prefix}{k}"
    if isinstance(v, dict):
      out.update(_flatten_config(v, key + "."))
    else:
      out[key] = v
  return out


def config_differences(old: dict, new: dict) -> list[str]:
  """Keys (dotted) whose values differ, ignoring `config.RUNTIME_KEYS`."""
  a, b = _flatten_config(old), _flatten_config(new)
  diffs = []
  for key in sorted(set(a) | set(b)):
    if key.split(".")[0] in config_lib.RUNTIME_KEYS:
      continue
    if a.get(key, "<absent>") != b.get(key, "<absent>"):
      diffs.append(f"{key}: {a.get(key, '<absent>')!r} -> {b.get(key, '<absent>')!r}")
  return diffs


def check_workdir_config(workdir: str, config, *, overwrite: bool) -> None:
  """Refuses a workdir holding a different experiment; with `overwrite`, process 0
  deletes that run's outputs instead."""
  path = os.path.join(workdir, "config.json")
  if not os.path.exists(path):
    return
  try:
    with open(path) as f:
      old = json.load(f)
  except (OSError, json.JSONDecodeError) as e:
    raise WorkdirConflictError(f"{path} is unreadable ({e}); pass --overwrite to start over")
  diffs = config_differences(old, config_to_json(config))
  if not diffs:
    return
  if overwrite:
    if jax.process_index() != 0:
      return
    for name in ("checkpoints", "damaged_checkpoints", "metrics.jsonl", "tensorboard", "eval",
                 "config.json"):
      target = os.path.join(workdir, name)
      if os.path.isdir(target):
        shutil.rmtree(target)
      elif os.path.exists(target):
        os.remove(target)
    return
  raise WorkdirConflictError(
      f"{workdir} holds a run with a different config ({'; '.join(diffs)}); "
      "use another --workdir, or pass --overwrite to replace it")


def truncate_metrics(path: str, last_step: int) -> None:
  """Drops records past `last_step` (steps redone after a resume), atomically."""
  if not os.path.exists(path):
    return
  with open(path) as f:
    lines = [l for l in f if l.strip()]
  kept = []
  for line in lines:
    try:
      if json.loads(line)["step"] <= last_step:
        kept.append(line)
    except (json.JSONDecodeError, KeyError):
      continue  # a line cut by a crash
  if len(kept) != len(lines):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
      f.writelines(kept)
    os.replace(tmp, path)


# ----------------------------------------------------------------------------
# The loop.
# ----------------------------------------------------------------------------


INIT_FROM_KINDS = ("spectral", "bifocal")


def init_from_config(config, task) -> ml_collections.ConfigDict:
  """The config of the run `config.init_from` names, checked against `config`.

  `init_from` fine-tunes a trained `rope` run of ours: its latest checkpoint is
  converted by surgery (`load_init_params`) and training continues with
  Spectral Evolution from its geometric spectrum. This requires
    * of the source: a workdir of a `position.kind='rope'` run holding a
      checkpoint;
    * of this run: `position.kind` 'spectral' or 'bifocal' (either split), the
      source's model sizes (`num_layers`, `d_model`, `num_heads`, `head_dim`,
      `mlp_dim`) and rotary spectrum (`position.base`, `position.layout`),
      and a task with the source's vocabulary size and direction (causal or
      not).
  Anything else (task lengths, steps, learning rates, dtype, batch, mesh) may
  differ. Raises `ConfigError` naming `config.init_from` otherwise.
  """
  source_dir = config.init_from

  def fail(why):
    raise config_lib.ConfigError(f"config.init_from={source_dir!r}: {why}")

  path = os.path.join(source_dir, "config.json")
  if not os.path.isfile(path):
    fail("no config.json there (not a training run directory)")
  with open(path) as f:
    source = ml_collections.ConfigDict(json.load(f))
  if source.position.kind != "rope":
    fail(f"the source run has position.kind={source.position.kind!r}; init_from converts a "
         "'rope' run")
  if config.position.kind not in INIT_FROM_KINDS:
    fail(f"needs position.kind in {INIT_FROM_KINDS} (the spectral model it becomes), "
         f"got {config.position.kind!r}")
  sizes = lambda c: (c.model.num_layers,) + model_lib.resolved_dims(c.model)
  if sizes(source) != sizes(config):
    names = ("num_layers", "d_model", "num_heads", "head_dim", "mlp_dim")
    fail("model sizes differ from the source run's: " + ", ".join(
        f"model.{n}={b} (source {a})" for n, a, b in zip(names, sizes(source), sizes(config))
        if a != b))
  for key in ("base", "layout"):
    if source.position[key] != config.position[key]:
      fail(f"position.{key}={config.position[key]!r} differs from the source run's "
           f"{source.position[key]!r}")
  source_task = tasks.get_task(source.task)
  if (source_task.vocab_size, source_task.causal) != (task.vocab_size, task.causal):
    fail(f"task {task.name!r} (vocab {task.vocab_size}, causal={task.causal}) does not fit the "
         f"source run's task {source_task.name!r} (vocab {source_task.vocab_size}, "
         f"causal={source_task.causal})")
  if not checkpoint_steps(source_dir):
    fail(f"no checkpoint in {checkpoint_lib.checkpoint_dir(source_dir)}")
  return source


def checkpoint_steps(workdir: str) -> list[int]:
  """Steps checkpointed in `workdir` (none when it has no checkpoint directory)."""
  if not os.path.isdir(checkpoint_lib.checkpoint_dir(workdir)):
    return []
  ckpt = checkpoint_lib.Checkpointer(workdir, save_every=1, keep=1, read_only=True)
  try:
    return ckpt.steps()
  finally:
    ckpt.close()


def load_init_params(config, source_config, mesh):
  """This run's initial params: the latest checkpoint of `config.init_from`
  (its config `source_config`, see `init_from_config`) converted by surgery into
  `config.position`'s spectral rope, so the model computes the same function."""
  from bifocal_jax import surgery  # pylint: disable=g-import-not-at-top
  source_config = ml_collections.ConfigDict(source_config.to_dict())
  source_config.mesh = config.mesh
  src_setup, _ = setup(source_config, mesh)
  ckpt = checkpoint_lib.Checkpointer(config.init_from, save_every=1, keep=1, read_only=True)
  try:
    _, state, _ = ckpt.restore_latest(src_setup.abstract_state)
  finally:
    ckpt.close()
  model = nnx.merge(src_setup.graphdef, state["params"], src_setup.constants)
  position = config.position
  if position.kind == "spectral":
    surgery.spectralize(model, per_head=True)
  else:  # bifocal: the eyes `attention.make_rope` builds from the same keys
    surgery.spectralize(
        model, split=position.split,
        spectral_heads=(position.spectral_heads
                        if position.split == "heads" and position.spectral_heads != -1 else None),
        spectral_pairs=(position.spectral_pairs
                        if position.split == "pairs" and position.spectral_pairs != -1 else None))
  return nnx.state(model, nnx.Param)


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str, *,
                       overwrite: bool = False) -> dict:
  """Trains (resuming from `workdir` if it holds a checkpoint).

  Returns the last logged metrics with `step`, plus `preempted_at` when a
  signal stopped the run (after saving it).
  """
  config_lib.validate(config, num_devices=jax.device_count(),
                      num_processes=jax.process_count(), workdir=workdir)
  task = tasks.get_task(config.task)
  # Checked before anything touches the workdir; used only if it has no checkpoint.
  source_config = init_from_config(config, task) if config.init_from else None
  is_main = jax.process_index() == 0
  workdir = os.path.abspath(workdir)
  check_workdir_config(workdir, config, overwrite=overwrite)
  if is_main:
    os.makedirs(workdir, exist_ok=True)
    _write_json_atomically(os.path.join(workdir, "config.json"), config_to_json(config))
  # The others go on once process 0 has cleared (`overwrite`) and claimed the workdir.
  sharding_lib.barrier("workdir ready")

  mesh = sharding_lib.make_mesh(config.mesh)
  with jax.set_mesh(mesh):
    return _run(config, workdir, mesh, task, is_main, source_config)


def _write_json_atomically(path: str, value) -> None:
  """A crash while writing leaves the old file, never a truncated one."""
  tmp = path + ".tmp"
  with open(tmp, "w") as f:
    json.dump(value, f, indent=2, sort_keys=True)
  os.replace(tmp, path)


class MetricsWindow:
  """Per-step metrics summed on device since the last log step.

  Saved with each checkpoint (`to_json`), so that a run resumed between two
  log steps logs exactly the numbers an uninterrupted run logs.
  """

  def __init__(self, sums: dict | None = None, steps: int = 0):
    self.sums, self.steps = sums, steps

  def add(self, metrics: dict) -> None:
    self.sums = metrics if self.sums is None else jax.tree.map(jnp.add, self.sums, metrics)
    self.steps += 1

  def to_json(self) -> dict:
    sums = {} if self.sums is None else jax.device_get(self.sums)
    return dict(steps=self.steps,
                sums={k: [np.asarray(v).item(), str(np.asarray(v).dtype)] for k, v in sums.items()})

  @classmethod
  def from_json(cls, value: dict | None) -> MetricsWindow:
    if not value or not value["steps"]:
      return cls()
    sums = {k: np.asarray(v, dtype) for k, (v, dtype) in value["sums"].items()}
    return cls(sums, value["steps"])


def _test_signal() -> tuple[int, signal.Signals] | None:
  """Test-only hook: `BIFOCAL_TEST_SIGNAL=STEP:NAME` (e.g. `20:KILL`, `7:TERM`)
  makes the process send itself SIGNAME after step STEP. At a checkpoint step
  the signal comes right after that step's save began, so a KILL lands during
  the asynchronous save; at other steps, once earlier saves are complete."""
  spec = os.environ.get("BIFOCAL_TEST_SIGNAL")
  if not spec:
    return None
  step, name = spec.split(":")
  return int(step), signal.Signals["SIG" + name]


def _run(config, workdir, mesh, task, is_main, source_config):
  params_override = None
  ckpt = checkpoint_lib.Checkpointer(
      workdir, save_every=config.checkpoint_every, keep=config.keep_checkpoints,
      async_save=config.async_checkpointing)
  if source_config is not None and not ckpt.steps():
    params_override = load_init_params(config, source_config, mesh)
  s, state = setup(config, mesh, task=task, params_override=params_override)
  restored = ckpt.restore_latest(s.abstract_state)
  buckets = tuple(config.buckets) or pipeline.length_buckets(task.max_sequence_length("train"))
  local_batch = config.batch_size // jax.process_count()

  def make_iterator(start_step: int):
    ds = pipeline.train_dataset(
        task, batch_size_per_process=local_batch, seed=config.seed, buckets=buckets,
        process_index=jax.process_index(), process_count=jax.process_count(),
        start_step=start_step, examples=config.data.examples, lengths=config.data.lengths)
    return iter(ds)

  start, window = 0, MetricsWindow()
  if restored is not None:
    start, state, restored_meta = restored
    data_iter = make_iterator(0)
    if (restored_meta.get("process_count") != jax.process_count()
        or not ckpt.restore_data(start, data_iter)):
      # Iterator state is tied to the process layout: rebuild at the step instead.
      data_iter = make_iterator(start)
    window = MetricsWindow.from_json(restored_meta.get("metrics_window"))
    logging.info("resumed from step %d", start)
    if is_main:
      print(f"resuming {workdir} from step {start}", flush=True)
  else:
    data_iter = make_iterator(0)
  if is_main:
    truncate_metrics(os.path.join(workdir, "metrics.jsonl"), start)

  train_step = sharding_lib.compile_ahead(make_train_step(s), "train_step")
  eval_step = sharding_lib.compile_ahead(make_eval_step(s, close_ids=dyck_close_ids(task)),
                                         "eval_step")
  writer = metrics_lib.MetricWriter(workdir, enabled=is_main, start_step=start)
  meta = dict(process_count=jax.process_count(), config=config_to_json(config))

  def trajectory_numpy(st):
    t = jax.device_get(st["trajectory"])
    n = int(t["count"])
    return dict(steps=np.asarray(t["steps"][:n]), frequencies=np.asarray(t["frequencies"][:n]))

  def check_finite(st):
    bad = jax.device_get(st["nonfinite"])
    if int(bad["step"]) >= 0:
      raise NonFiniteError(
          f"non-finite {NONFINITE_WHAT[int(bad['what'])]} at step {int(bad['step'])}; "
          f"stopped, the last good checkpoint is kept (set config.nan_policy='skip' to drop "
          f"such updates instead)")

  def save(st, step, force=False):
    check_finite(st)  # never checkpoint a state past a non-finite step
    return ckpt.save(step, st, data_iter, trajectory_numpy(st),
                     dict(meta, step=step, metrics_window=window.to_json()), force=force)

  def summarize(step, last):
    sums = jax.device_get(window.sums)
    dt = time.perf_counter() - timer_start
    out = dict(
        loss=float(sums["loss"]) / window.steps,
        accuracy=float(sums["token_correct"]) / max(float(sums["token_total"]), 1.0),
        grad_norm=float(sums["grad_norm"]) / window.steps,
        spectral_grad_norm=float(sums["spectral_grad_norm"]) / window.steps,
        spectral_drift=float(last["spectral_drift"]),
        learning_rate=float(s.schedules["learning_rate"](step - 1)),
        spectral_learning_rate=float(s.schedules["spectral_learning_rate"](step - 1)),
        skipped_steps=int(sums["skipped"]),
        steps_per_sec=timed_steps / dt,
        tokens_per_sec=timed_tokens / dt)
    if config.peak_flops > 0:
      out["mfu"] = flops_per_step * timed_steps / dt / config.peak_flops
    return out

  seq_len = buckets[-1]
  flops_per_step = model_lib.flops_per_token(
      config.model, vocab_size=task.vocab_size, seq_len=seq_len) * config.batch_size * seq_len
  bar = _progress(config, start, is_main)
  kill_at = _test_signal()
  summary: dict = {}
  # Throughput is timed over the steps of this process only (not a restored window).
  timer_start, timed_steps, timed_tokens = time.perf_counter(), 0, 0
  step = saved = start
  with PreemptionGuard(enabled=jax.process_count() == 1) as guard:
    try:
      while step < config.steps:
        batch = next(data_iter)
        state, m = train_step(state, to_global_batch(batch, mesh))
        step += 1
        window.add(m)
        timed_steps += 1
        timed_tokens += int(np.asarray(batch["valid"]).sum()) * jax.process_count()
        if step % config.log_every == 0 or step == config.steps:
          summary = summarize(step, m)
          if step % config.eval_every == 0 or step == config.steps:
            valid = evaluate_split(s, state["params"], "valid", num_examples=config.eval_examples,
                                   batch_size=config.eval_batch_size, eval_step=eval_step)
            summary.update({f"valid_{k}": v for k, v in valid.items() if k != "examples"})
          writer.write(step, summary)
          if bar is not None:
            bar.set_postfix(loss=f"{summary['loss']:.4f}", tok_s=f"{summary['tokens_per_sec']:.0f}")
          check_finite(state)
          window = MetricsWindow()
          timer_start, timed_steps, timed_tokens = time.perf_counter(), 0, 0
        if bar is not None:
          bar.update(1)
        if step % config.checkpoint_every == 0 and save(state, step):
          saved = step
        if kill_at is not None and step == kill_at[0]:
          if saved != step:
            ckpt.wait()  # deterministic tests: earlier saves are complete
          os.kill(os.getpid(), kill_at[1])
        if guard.signal is not None or ckpt.reached_preemption(step):
          if saved != step:
            save(state, step, force=True)
          ckpt.wait()
          msg = (f"preempted ({guard.signal or 'preemption notice'}): saved step {step} in "
                 f"{workdir}; re-run the same command to resume")
          logging.warning(msg)
          if is_main:
            print(msg, flush=True)
          summary["preempted_at"] = step
          break
      else:
        if saved != step:
          save(state, step, force=True)
        ckpt.wait()
    finally:
      if bar is not None:
        bar.close()
      writer.close()
      ckpt.close()
  summary["step"] = step
  return summary


def _progress(config, start, is_main):
  if not (is_main and config.progress_bar):
    return None
  from tqdm import tqdm  # pylint: disable=g-import-not-at-top
  return tqdm(total=config.steps, initial=start, desc="train", dynamic_ncols=True)
