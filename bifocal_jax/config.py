"""The training configuration: defaults shared by every `configs/*.py`, and
validation of a whole config before any work is done.

`validate(config, num_devices=..., num_processes=...)` raises `ConfigError`
(a ValueError) whose message is one line naming the key and the value;
`train.py` prints it and exits with status 2.
"""

from __future__ import annotations

import os

import ml_collections

from bifocal_jax import attention
from bifocal_jax import model as model_lib
from bifocal_jax import tasks

NAN_POLICIES = ("error", "skip")
# Keys that may change between runs in one workdir without making it a
# different experiment (see `train.check_workdir_config`).
RUNTIME_KEYS = ("log_every", "eval_every", "checkpoint_every", "keep_checkpoints",
                "progress_bar", "mesh", "init_from", "peak_flops", "async_checkpointing",
                "eval_examples", "eval_batch_size", "prefetch")


class ConfigError(ValueError):
  """A config value that cannot work; the message names the key and the value."""


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
  c.eval_examples = 512       # per held-out split, during training
  c.eval_batch_size = 64
  c.nan_policy = "error"      # "error": stop and name the step; "skip": drop the update
  c.init_from = ""            # workdir of a trained `rope` run to convert by surgery
  c.peak_flops = 0.0          # device peak FLOP/s for MFU; 0: not reported
  c.progress_bar = True
  c.prefetch = 2              # batches prepared ahead of the train step
  c.buckets = ()              # padded lengths; () = powers of two up to the longest example
  # Training data (`tasks.pipeline`): "finite" epochs over task.train.size examples, or
  # "fresh" ones every step (as the original Chomsky-hierarchy trainer); lengths drawn
  # "per_example" (mixed-length batches) or "per_batch" (their curriculum).
  c.data = ml_collections.ConfigDict(dict(examples="finite", lengths="per_example"))
  c.task = tasks.default_task_config(task_name)
  c.model = model_lib.default_model_config()
  c.position = attention.default_position_config()
  c.spectral = ml_collections.ConfigDict(dict(
      learning_rate=1e-2,     # Spectral Evolution: their own learning rate ...
      warmup_steps=0,         # ... and warm-up,
      freeze_steps=0,         # held exactly geometric for the first steps,
      clip_norm=1.0,          # their own gradient clipping (no weight decay),
      record_every=10,        # trajectory sampling interval (steps)
  ))
  c.mesh = ml_collections.ConfigDict(dict(data=-1, fsdp=1, model=1))
  return c


def _fail(key: str, value, why: str):
  raise ConfigError(f"config.{key}={value!r}: {why}")


def validate(config: ml_collections.ConfigDict, *, num_devices: int, num_processes: int = 1,
             workdir: str | None = None) -> None:
  """Checks everything that can be checked without doing work."""
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
  if config.nan_policy not in NAN_POLICIES:
    _fail("nan_policy", config.nan_policy, f"must be one of {NAN_POLICIES}")
  spectral = config.spectral
  if not 0 <= spectral.freeze_steps <= config.steps:
    _fail("spectral.freeze_steps", spectral.freeze_steps, f"must be in [0, steps={config.steps}]")
  if spectral.warmup_steps < 0:
    _fail("spectral.warmup_steps", spectral.warmup_steps, "must be >= 0")
  if not isinstance(spectral.record_every, int) or spectral.record_every <= 0:
    _fail("spectral.record_every", spectral.record_every, "must be a positive integer")

  # Task (ranges, depths) and model shapes.
  try:
    task = tasks.get_task(config.task)
  except ValueError as e:  # the task's messages name their key as `task.KEY=VALUE`
    message = f"config.{e}" if str(e).startswith("task.") else f"config.task: {e}"
    raise ConfigError(message) from None
  m = config.model
  try:
    d_model, heads, head_dim, _ = model_lib.resolved_dims(m)
  except ValueError as e:
    raise ConfigError(f"config.{e}") from None
  if m.dtype not in model_lib.DTYPES:
    _fail("model.dtype", m.dtype, f"must be one of {tuple(model_lib.DTYPES)}")
  position = config.position
  if position.kind not in attention.POSITION_KINDS:
    _fail("position.kind", position.kind, f"must be one of {attention.POSITION_KINDS}")
  if position.layout not in ("half", "interleaved"):
    _fail("position.layout", position.layout, "must be 'half' or 'interleaved'")
  if not 0 < position.rotary_fraction <= 1:
    _fail("position.rotary_fraction", position.rotary_fraction, "must be in (0, 1]")
  if position.kind == "bifocal":
    if position.split not in ("heads", "pairs"):
      _fail("position.split", position.split, "must be 'heads' or 'pairs'")
    if position.split == "heads":
      n = heads // 2 if position.spectral_heads == -1 else position.spectral_heads
      if not 1 <= n <= heads:
        _fail("position.spectral_heads", position.spectral_heads,
              f"must be -1 or in [1, model.num_heads={heads}]")
    else:
      pairs = head_dim // 2
      if position.spectral_pairs != -1 and not 1 <= position.spectral_pairs <= pairs:
        _fail("position.spectral_pairs", position.spectral_pairs,
              f"must be -1 or in [1, head_dim/2={pairs}]")
  if position.kind == "randomized_rope":
    longest = max(task.max_sequence_length(s) for s in task.split_names)
    if position.max_position < longest:
      _fail("position.max_position", position.max_position,
            f"must be >= the longest sequence of the task ({longest})")

  # Mesh and batch against the devices.
  from bifocal_jax import sharding  # local: keeps `config` importable without touching devices
  try:
    data, fsdp, model_axis = sharding.mesh_shape(config.mesh, num_devices)
  except ValueError as e:
    raise ConfigError(f"config.{e}") from None
  if heads % model_axis:
    _fail("model.num_heads", heads, f"must be divisible by the model mesh axis ({model_axis})")
  if config.batch_size % (data * fsdp):
    _fail("batch_size", config.batch_size,
          f"must be divisible by the data-parallel devices (data*fsdp={data * fsdp})")
  if config.batch_size % num_processes:
    _fail("batch_size", config.batch_size, f"must be divisible by the {num_processes} processes")
  if config.buckets:
    longest = task.max_sequence_length("train")
    if (any(b <= 0 for b in config.buckets) or list(config.buckets) != sorted(config.buckets)
        or config.buckets[-1] < longest):
      _fail("buckets", tuple(config.buckets), f"must be increasing positive lengths, the last "
            f">= {longest} (the longest training sequence)")
  from bifocal_jax.tasks import pipeline  # local: it needs grain
  try:
    pipeline.check_sampling(task, config.data.examples, config.data.lengths)
  except ValueError as e:
    raise ConfigError(f"config.{e}") from None
  if not 1 <= config.eval_examples <= task.split("valid").size:
    _fail("eval_examples", config.eval_examples,
          f"must be in [1, {task.split('valid').size}] (the size of the valid split)")
  if workdir is not None:
    parent = os.path.abspath(workdir)
    while not os.path.exists(parent):
      parent = os.path.dirname(parent)
    if not os.path.isdir(parent) or not os.access(parent, os.W_OK | os.X_OK):
      raise ConfigError(f"--workdir={workdir!r}: {parent!r} is not a writable directory")
  del d_model


def chomsky_config(task_name: str, arg: str | None = None) -> ml_collections.ConfigDict:
  """The config of `configs/<task_name>.py` for a Chomsky-hierarchy task.

  Variants: default (a CPU-sized run, test lengths 41..500 of Deletang et al.),
  `tiny` (tests), `paper` (their protocol: 5 layers, width 64, 8 heads, batch
  128, for an accelerator).
  """
  c = base_config(task_name)
  c.position.kind = "bifocal"
  c.model.num_layers = 2
  c.model.d_model = 64
  c.model.num_heads = 4
  c.steps = 3000
  c.batch_size = 32
  c.learning_rate = 1e-3
  c.checkpoint_every = 1000
  c.eval_every = 1000
  c.spectral.record_every = 25
  if arg == "tiny":
    c.model.num_layers = 1
    c.model.d_model = 32
    c.model.mlp_dim = 64
    c.steps = 20
    c.batch_size = 8
    c.warmup_steps = 5
    c.checkpoint_every = 10
    c.eval_every = 20
    c.log_every = 10
    c.eval_examples = 16
    c.eval_batch_size = 16
    c.spectral.record_every = 5
    c.progress_bar = False
    c.task.train.max_length = 12
    c.task.valid.max_length = 12
    c.task.test_length.min_length = 13
    c.task.test_length.max_length = 24
    c.task.test_length.size = 16
  elif arg == "paper":
    c.model.num_layers = 5
    c.model.d_model = 64
    c.model.num_heads = 8
    c.batch_size = 128
    c.steps = 100_000
    c.learning_rate = 1e-3
    c.warmup_steps = 1000
    c.checkpoint_every = 5000
    c.eval_every = 5000
  elif arg not in (None, ""):
    raise ValueError(f"configs/{task_name}.py: unknown variant {arg!r} (use tiny or paper)")
  return c
