"""The model and its train state, built once before the loop (`setup`).

The model is split into a static graph, its parameters and its non-trainable
constants (ALiBi slopes, ...); the train state is a plain pytree of arrays laid
out on the mesh:

  step        int32, the number of updates applied
  params      the model's parameters (sharded by their logical axes)
  opt_state   the optimizer's state (base and Spectral Evolution groups)
  trajectory  the spectral frequencies recorded every `spectral.record_every`
              steps: `frequencies[T, layers, heads, pairs]`, `steps[T]`, the
              number recorded (`count`) and the spectrum at step 0 (`start`)
  nonfinite   the step whose update went non-finite (-1: none) and what did
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

import jax
import jax.numpy as jnp
import ml_collections
import optax
from flax import nnx

from bifocal_jax.nn import model as model_lib
from bifocal_jax.nn import optim
from bifocal_jax.nn import positions
from bifocal_jax.training import sharding as sharding_lib
from bifocal_jax import tasks


def build_model(config: ml_collections.ConfigDict, task, *, seed: int | jax.Array | None = None):
  """The model, initialised from `seed` (default `config.seed`; a key array
  works too, traced ones included: `population` vmaps this over seeds)."""
  position = positions.with_context_length(config.position, task.max_sequence_length("train"))
  return model_lib.Transformer(config.model, position, vocab_size=task.vocab_size,
                               causal=task.causal,
                               rngs=nnx.Rngs(config.seed if seed is None else seed))


def make_optimizer(
    config: ml_collections.ConfigDict) -> tuple[optax.GradientTransformation, dict[str, Callable]]:
  """The optimizer (base and spectral groups) and its learning-rate schedules."""
  return optim.default_optimizer(learning_rate=config.learning_rate,
                                 weight_decay=config.weight_decay, warmup_steps=config.warmup_steps,
                                 total_steps=max(config.steps, config.warmup_steps + 1),
                                 spectral_learning_rate=config.spectral.learning_rate,
                                 spectral_warmup_steps=config.spectral.warmup_steps,
                                 spectral_freeze_steps=config.spectral.freeze_steps,
                                 clip_norm=config.clip_norm,
                                 spectral_clip_norm=config.spectral.clip_norm)


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
  constants: Any  # non-trainable model Variables (e.g. ALiBi slopes)
  tx: optax.GradientTransformation
  schedules: dict[str, Callable]
  state_shardings: Any
  abstract_state: Any
  has_spectral: bool

  def model(self, params) -> nnx.Module:
    return nnx.merge(self.graphdef, params, self.constants)

  def spectral_frequencies(self, params) -> jax.Array | None:
    """`[layers, heads, pairs]` of the model's spectral eyes; None without any."""
    return model_lib.spectral_frequencies(self.model(params))


def _empty_trajectory(spectral0, capacity: int) -> dict:
  if spectral0 is None:
    frequencies = jnp.zeros((capacity, 0, 0, 0), jnp.float32)
    spectral0 = jnp.zeros((0, 0, 0), jnp.float32)
  else:
    frequencies = jnp.zeros((capacity,) + spectral0.shape, jnp.float32).at[0].set(spectral0)
  return dict(frequencies=frequencies, steps=jnp.zeros((capacity,), jnp.int32), count=jnp.ones(
      (), jnp.int32), start=spectral0)


def fresh_state(params, opt_state, spectral0, capacity: int) -> dict:
  """The train state at step 0 (the layout of the module docstring)."""
  return dict(
      step=jnp.zeros((), jnp.int32),
      params=params,
      opt_state=opt_state,
      trajectory=_empty_trajectory(spectral0, capacity),
      nonfinite=dict(step=jnp.full((), -1, jnp.int32), what=jnp.zeros((), jnp.int32)),
  )


def init_state(config, task, mesh, tx, *, params_override=None):
  """`(graphdef, constants, state)`: the model and its initial train state, on the mesh."""
  abstract_model = nnx.eval_shape(lambda: build_model(config, task))
  graphdef, abstract_params, _ = nnx.split(abstract_model, nnx.Param, ...)
  param_shardings = sharding_lib.param_shardings(abstract_params, mesh)
  # Built under jit: eagerly, every initializer compiles on its own. The
  # initializers' random-number code is slow to optimise and runs once, so
  # XLA's backend optimisations are off here (docs/performance.md).
  init_jit = functools.partial(jax.jit, compiler_options={"xla_backend_optimization_level": 0})
  rep = sharding_lib.replicated(mesh)
  if params_override is None:  # one program for both: one trace, one compile
    params, constants = init_jit(lambda: nnx.split(build_model(config, task), nnx.Param, ...)[1:],
                                 out_shardings=(param_shardings, rep))()
  else:
    constants = init_jit(lambda: nnx.split(build_model(config, task), nnx.Param, ...)[2],
                         out_shardings=rep)()
    params = jax.device_put(params_override, param_shardings)

  spectral0 = model_lib.spectral_frequencies(nnx.merge(graphdef, params, constants))
  state = fresh_state(params, jax.jit(tx.init)(params), spectral0, trajectory_capacity(config))
  # Everything not already laid out on the mesh (scalars, trajectory) is replicated.
  state = jax.tree.map(lambda x: x if _is_sharded(x, mesh) else jax.device_put(x, rep), state)
  return graphdef, constants, state


def _is_sharded(x, mesh) -> bool:
  sharding = getattr(x, "sharding", None)
  return isinstance(sharding, jax.sharding.NamedSharding) and sharding.mesh == mesh


def setup(config: ml_collections.ConfigDict, mesh: jax.sharding.Mesh, *, task=None,
          params_override=None) -> tuple[Setup, Any]:
  """`(Setup, initial state)`. `params_override`: parameters to start from
  instead of the initializers' (`init_from.load_params`)."""
  task = tasks.get_task(config.task) if task is None else task
  tx, schedules = make_optimizer(config)
  graphdef, constants, state = init_state(config, task, mesh, tx, params_override=params_override)
  state_shardings = jax.tree.map(lambda x: x.sharding, state)
  abstract_state = jax.tree.map(
      lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), state)
  has_spectral = state["trajectory"]["frequencies"].shape[1] > 0
  return Setup(config, task, mesh, graphdef, constants, tx, schedules, state_shardings,
               abstract_state, has_spectral), state
