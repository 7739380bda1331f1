"""`config.init_from`: fine-tune a trained `rope` run by Surgical Integration.

The source run's latest checkpoint is restored, its fixed rotary embeddings
are swapped by `surgery.spectralize` for the spectral eyes this run's
`config.position` asks for (so the model computes the same function), and
training continues with Spectral Evolution from the geometric spectrum.

A target of kind `rope` continues the source's parameters unchanged: the
control arm of the paper's protocol (the same further steps, from the same
checkpoint, with a fresh optimizer as the converted run has).
"""

from __future__ import annotations

import ml_collections
from flax import nnx

from bifocal_jax.nn import positions
from bifocal_jax.training import checkpoint as checkpoint_lib
from bifocal_jax.training import config as config_lib
from bifocal_jax.nn import model as model_lib
from bifocal_jax.training import state as state_lib
from bifocal_jax import surgery
from bifocal_jax import tasks
from bifocal_jax.training import workdir as workdir_lib

TARGET_KINDS = tuple(k for k in positions.POSITION_KINDS if positions.get(k).from_rope is not None)
_SIZES = ("num_layers", "d_model", "num_heads", "head_dim", "mlp_dim")


def source_config(config, task) -> ml_collections.ConfigDict:
  """The config of the run `config.init_from` names, checked against `config`.

  This requires
    * of the source: a workdir of a `position.kind='rope'` run holding a
      checkpoint;
    * of this run: `position.kind` 'spectral', 'bifocal' (either split) or
      'rope' (a plain continuation), the
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

  try:
    source = workdir_lib.load_config(source_dir)
  except ValueError:
    fail("no config.json there (not a training run directory)")
  if source.position.kind != "rope":
    fail(f"the source run has position.kind={source.position.kind!r}; init_from converts a "
         "'rope' run")
  if config.position.kind not in TARGET_KINDS:
    fail(f"needs position.kind in {TARGET_KINDS} (what the rope model becomes), "
         f"got {config.position.kind!r}")
  sizes = lambda c: (c.model.num_layers,) + model_lib.resolved_dims(c.model)
  if sizes(source) != sizes(config):
    fail("model sizes differ from the source run's: " +
         ", ".join(f"model.{n}={b} (source {a})"
                   for n, a, b in zip(_SIZES, sizes(source), sizes(config))
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
  if not checkpoint_lib.steps_in(source_dir):
    fail(f"no checkpoint in {checkpoint_lib.checkpoint_dir(source_dir)}")
  return source


def load_params(config, source: ml_collections.ConfigDict, mesh):
  """This run's initial params: the latest checkpoint of `config.init_from`
  (whose config `source_config` returned) converted by surgery into
  `config.position`'s spectral eyes."""
  source = ml_collections.ConfigDict(source.to_dict())
  source.mesh = config.mesh
  src_setup, _ = state_lib.setup(source, mesh)
  with checkpoint_lib.Checkpointer.read_only(config.init_from) as ckpt:
    _, state, _ = ckpt.restore_latest(src_setup.abstract_state)
  model = src_setup.model(state["params"])
  num_heads, head_dim = model_lib.resolved_dims(config.model)[1:3]
  # The same eyes `attention.make_rope` builds from these keys.
  conversion = positions.get(config.position.kind).from_rope(config.position, num_heads=num_heads,
                                                             head_dim=head_dim)
  if conversion is not None:
    surgery.spectralize(model, **conversion)
  return nnx.state(model, nnx.Param)
