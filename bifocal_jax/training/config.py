"""The training configuration: defaults shared by every config (`bifocal_jax/configs/`), and
validation of a whole config before any work is done.

`validate(config, num_devices=..., num_processes=...)` raises `ConfigError`
(a ValueError) whose message is one line naming the key and the value;
`train.py` prints it and exits with status 2.
"""

from __future__ import annotations

import os

import ml_collections

from bifocal_jax.nn import attention
from bifocal_jax.nn import model as model_lib
from bifocal_jax.nn import positions
from bifocal_jax import tasks

NAN_POLICIES = ("error", "skip")
# Keys that may change between runs in one workdir without making it a
# different experiment (see `workdir.check_config`). Like the mesh, length
# groups change only the order of float sums, not the update.
RUNTIME_KEYS = ("log_every", "eval_every", "checkpoint_every", "keep_checkpoints", "progress_bar",
                "mesh", "init_from", "peak_flops", "async_checkpointing", "eval_examples",
                "eval_batch_size", "prefetch", "population.data_workers", "precompile",
                "data.length_groups")


class ConfigError(ValueError):
  """A config value that cannot work; the message names the key and the value."""


def use_tiny_run(c: ml_collections.ConfigDict) -> None:
  """The task configs' `tiny` variant (tests: seconds): a 1-layer, width-32
  model, 20 steps of batch 8, small evaluations, no progress bar."""
  c.model.num_layers, c.model.d_model, c.model.mlp_dim = 1, 32, 64
  c.steps, c.batch_size, c.warmup_steps = 20, 8, 5
  c.checkpoint_every, c.eval_every, c.log_every = 10, 20, 10
  c.eval_examples = c.eval_batch_size = 16
  c.spectral.record_every = 5
  c.progress_bar = False


def use_paper_model(c: ml_collections.ConfigDict) -> None:
  """The Chomsky-hierarchy protocol's model (Deletang et al.): 5 layers,
  width 64, 8 heads, batch 128, learning rate 1e-3 after 1,000 warm-up steps."""
  c.model.num_layers, c.model.d_model, c.model.num_heads = 5, 64, 8
  c.batch_size, c.learning_rate, c.warmup_steps = 128, 1e-3, 1000


def base_config(task_name: str) -> ml_collections.ConfigDict:
  """Every key a training config has, with defaults for a small CPU run."""
  c = ml_collections.ConfigDict()
  c.seed = 0
  c.steps = 2000
  c.batch_size = 64
  c.learning_rate = 1e-3
  c.weight_decay = 0.01
  c.warmup_steps = 100
  c.clip_norm = 1.0
  c.checkpoint_every = 500
  c.keep_checkpoints = 3
  c.async_checkpointing = True
  c.log_every = 50
  c.eval_every = 500
  c.eval_examples = 512  # per held-out split, during training
  c.eval_batch_size = 64
  c.nan_policy = "error"  # "error": stop and name the step; "skip": drop the update
  c.init_from = ""  # workdir of a trained `rope` run to start from (init_from.py)
  c.peak_flops = 0.0  # device peak FLOP/s for MFU; 0: not reported
  c.progress_bar = True
  c.prefetch = 8  # training batches generated ahead of the train step (0: none)
  c.buckets = ()  # padded lengths; () = powers of two up to the longest example
  # Compile the train step's likely widths and the evaluation step before the
  # first step, in parallel threads (train.py `_precompile`); False: each at first use.
  c.precompile = True
  # Training data (`tasks.pipeline`): "finite" epochs over task.train.size examples, or
  # "fresh" ones every step (as the original Chomsky-hierarchy trainer); lengths drawn
  # "per_example" (mixed-length batches) or "per_batch" (their curriculum);
  # length_groups > 1: each batch's rows trained in that many groups of similar
  # length, each padded to its own bucket (the same update, less padding: length_groups.py).
  c.data = ml_collections.ConfigDict(dict(examples="finite", lengths="per_example",
                                          length_groups=1))
  c.task = tasks.default_task_config(task_name)
  c.model = model_lib.default_model_config()
  c.position = attention.default_position_config()
  c.spectral = ml_collections.ConfigDict(
      dict(
          learning_rate=1e-2,  # Spectral Evolution: their own learning rate ...
          warmup_steps=0,  # ... and warm-up,
          freeze_steps=0,  # held exactly geometric for the first steps,
          clip_norm=1.0,  # their own gradient clipping (no weight decay),
          record_every=10,  # trajectory sampling interval (steps)
      ))
  c.mesh = ml_collections.ConfigDict(dict(data=-1, fsdp=1, model=1))
  # Population training (`bifocal_jax.training.population`): one member per combination of
  # seed x learning rate x spectral learning rate, all trained by one compiled
  # program (vmap over members). Empty tuples take the single value of `seed`,
  # `learning_rate`, `spectral.learning_rate`; all three empty: an ordinary run.
  c.population = ml_collections.ConfigDict(
      dict(
          seeds=(),
          learning_rates=(),
          spectral_learning_rates=(),
          data_workers=0,  # processes generating the members' batches (0: threads here)
      ))
  return c


def _fail(key: str, value, why: str):
  raise ConfigError(f"config.{key}={value!r}: {why}")


def validate(config: ml_collections.ConfigDict, *, num_devices: int, num_processes: int = 1,
             workdir: str | None = None) -> None:
  """Checks everything that can be checked without doing work: the one place
  a training config is checked (the modules it builds trust it)."""
  _check_optimisation(config)
  task = _checked_task(config)
  heads = _check_model_and_position(config, task)
  _check_batches(config, task, heads, num_devices=num_devices, num_processes=num_processes)
  _check_population(config, num_processes=num_processes)
  if workdir is not None:
    parent = os.path.abspath(workdir)
    while not os.path.exists(parent):
      parent = os.path.dirname(parent)
    if not os.path.isdir(parent) or not os.access(parent, os.W_OK | os.X_OK):
      raise ConfigError(f"--workdir={workdir!r}: {parent!r} is not a writable directory")


def _reraise(error: ValueError):
  """A module's ValueError naming `KEY=VALUE` as a ConfigError naming `config.KEY`."""
  raise ConfigError(f"config.{error}") from None


def _check_optimisation(config) -> None:
  for key in ("steps", "batch_size", "checkpoint_every", "log_every", "eval_every",
              "keep_checkpoints", "eval_batch_size"):
    value = config[key]
    if not isinstance(value, int) or value <= 0:
      _fail(key, value, "must be a positive integer")
  for key in ("learning_rate", "spectral.learning_rate"):
    value = config.spectral.learning_rate if key.startswith("spectral") else config.learning_rate
    if not isinstance(value, (int, float)) or not value > 0:
      _fail(key, value, "must be a positive number")
  if config.weight_decay < 0:
    _fail("weight_decay", config.weight_decay, "must be >= 0")
  if not 0 <= config.warmup_steps <= config.steps:
    _fail("warmup_steps", config.warmup_steps, f"must be in [0, steps={config.steps}]")
  if not isinstance(config.precompile, bool):
    _fail("precompile", config.precompile, "must be True or False")
  if config.nan_policy not in NAN_POLICIES:
    _fail("nan_policy", config.nan_policy, f"must be one of {NAN_POLICIES}")
  spectral = config.spectral
  if not 0 <= spectral.freeze_steps <= config.steps:
    _fail("spectral.freeze_steps", spectral.freeze_steps, f"must be in [0, steps={config.steps}]")
  if spectral.warmup_steps < 0:
    _fail("spectral.warmup_steps", spectral.warmup_steps, "must be >= 0")
  if not isinstance(spectral.record_every, int) or spectral.record_every <= 0:
    _fail("spectral.record_every", spectral.record_every, "must be a positive integer")


def _checked_task(config):
  """The task (its ranges and depths checked by the task itself)."""
  try:
    return tasks.get_task(config.task)
  except ValueError as e:  # the task's messages name their key as `task.KEY=VALUE`
    message = f"config.{e}" if str(e).startswith("task.") else f"config.task: {e}"
    raise ConfigError(message) from None


def _check_model_and_position(config, task) -> int:
  """Model shapes and the position encoding; returns the number of heads."""
  try:
    _, heads, head_dim, _ = model_lib.resolved_dims(config.model)
  except ValueError as e:
    _reraise(e)
  try:
    model_lib.compute_dtype(config.model)
  except ValueError as e:
    _reraise(e)
  position = config.position
  # A base kind or a mixed `a+b` kind (`positions.mixed`): `get` names why not.
  try:
    scheme = positions.get(position.kind)
  except (ValueError, TypeError) as e:
    if not isinstance(position.kind, str):
      _fail("position.kind", position.kind, f"must be one of {attention.POSITION_KINDS}")
    _reraise(e)
  try:
    scheme.check_direction(causal=task.causal)
    if scheme.check is not None:
      scheme.check(position, num_heads=heads, head_dim=head_dim)
    scheme.draws_per_layer(position)
  except ValueError as e:
    raise ConfigError(f"config.{e} (task {config.task.name!r})") from None
  if position.layout not in ("half", "interleaved"):
    _fail("position.layout", position.layout, "must be 'half' or 'interleaved'")
  if not 0 < position.rotary_fraction <= 1:
    _fail("position.rotary_fraction", position.rotary_fraction, "must be in (0, 1]")
  if scheme.randomized:
    longest = max(task.max_sequence_length(s) for s in task.split_names)
    if position.max_position < longest:
      _fail("position.max_position", position.max_position,
            f"must be >= the longest sequence of the task ({longest})")
  return heads


def _check_batches(config, task, heads: int, *, num_devices: int, num_processes: int) -> None:
  """Mesh and batch against the devices, length buckets, evaluation sizes."""
  from bifocal_jax.training import sharding  # local: keeps `config` importable without touching devices
  try:
    data, fsdp, model_axis = sharding.mesh_shape(config.mesh, num_devices)
  except ValueError as e:
    _reraise(e)
  if heads % model_axis:
    _fail("model.num_heads", heads, f"must be divisible by the model mesh axis ({model_axis})")
  if config.batch_size % (data * fsdp):
    _fail("batch_size", config.batch_size,
          f"must be divisible by the data-parallel devices (data*fsdp={data * fsdp})")
  if config.batch_size % num_processes:
    _fail("batch_size", config.batch_size, f"must be divisible by the {num_processes} processes")
  if config.buckets:
    longest = task.max_sequence_length("train")
    if (any(b <= 0 for b in config.buckets) or list(config.buckets) != sorted(config.buckets) or
        config.buckets[-1] < longest):
      _fail(
          "buckets", tuple(config.buckets), f"must be increasing positive lengths, the last "
          f">= {longest} (the longest training sequence)")
  from bifocal_jax.tasks import pipeline  # local: it needs grain
  try:
    pipeline.check_sampling(task, config.data.examples, config.data.lengths)
    pipeline.read_options(config.prefetch)
    pipeline.check_length_groups(config.data.length_groups, config.batch_size // num_processes)
  except ValueError as e:
    _reraise(e)
  groups = config.data.length_groups
  if groups > 1 and (config.batch_size // groups) % (data * fsdp):
    _fail(
        "data.length_groups", groups, f"must leave groups of rows divisible by the "
        f"data-parallel devices (batch_size/length_groups={config.batch_size // groups}, "
        f"data*fsdp={data * fsdp})")
  if groups > 1 and is_population(config):
    _fail(
        "data.length_groups", groups, "not supported for a population (population.* set): "
        "its members are padded to one width")
  if not 1 <= config.eval_examples <= task.split("valid").size:
    _fail("eval_examples", config.eval_examples,
          f"must be in [1, {task.split('valid').size}] (the size of the valid split)")


def _check_population(config, *, num_processes: int) -> None:
  """The population's members: distinct, valid values; one process; no `init_from`."""
  population = config.get("population")
  if population is None:
    return
  for key in ("seeds", "learning_rates", "spectral_learning_rates"):
    values = population[key]
    if not isinstance(values, (tuple, list)):
      _fail(f"population.{key}", values, "must be a tuple (empty: the run's single value)")
    if len(set(values)) != len(values):
      _fail(f"population.{key}", tuple(values), "must not repeat a value")
    for v in values:
      ok = (isinstance(v, int) and not isinstance(v, bool) and v >= 0 if key == "seeds" else
            isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0)
      if not ok:
        _fail(f"population.{key}", tuple(values),
              "must hold non-negative integers" if key == "seeds" else "must hold positive numbers")
  workers = population.data_workers
  if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
    _fail("population.data_workers", workers, "must be a non-negative integer")
  if not is_population(config):
    return
  if num_processes != 1:
    _fail("population.seeds", tuple(population.seeds),
          f"population training runs in one process (got {num_processes})")
  if config.init_from:
    _fail("init_from", config.init_from, "not supported for a population (population.* set)")


def is_population(config: ml_collections.ConfigDict) -> bool:
  """Whether `config` trains a population (any `population.*` value list set)."""
  population = config.get("population")
  return population is not None and any(
      len(population[k]) for k in ("seeds", "learning_rates", "spectral_learning_rates"))
