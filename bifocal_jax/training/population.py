"""Population training: many small runs of one config as one compiled program.

A model of the Chomsky-hierarchy protocol's size (5 layers, width 64) leaves
an accelerator nearly idle, so a population trains several of them at once:
one member per combination of `population.seeds` x `population.learning_rates`
x `population.spectral_learning_rates` (an empty tuple takes the config's own
`seed`, `learning_rate` or `spectral.learning_rate`). Member `i` computes what
the single run of `member_config(config, members[i])` computes: its own
initialisation, data order and random stream (from its seed) and its own
learning rates.

How:
* the members' train states are stacked on a leading axis `[P, ...]` and
  `steps.train_step` (the single run's step, unchanged) is `jax.vmap`ped over
  the states, the batches `[P, B, L]`, the keys and the learning rates: one
  compiled program per length bucket, whatever P is;
* learning rates enter per member by scaling the updates of a unit-rate
  optimizer (`scale_updates`): AdamW and Spectral Evolution are linear in
  their learning rate (weight decay included, as optax applies it before the
  rate), so `rate * unit update` is the member's update up to rounding;
* `steps.guard_nonfinite` already works per member under vmap: under
  `nan_policy="error"` a member whose loss or gradient goes non-finite is
  frozen at its last good state and its step recorded, while the others train
  on; the trainer reports it and stops only when every member is frozen
  (under "skip" the member drops that update, as a single run does);
* each member draws its batches from its own seed (`train_batches`; members
  sharing a seed share them), padded to one width per step.

On a CPU this gains nothing (the measurement: docs/performance.md, "Population
training"); it is for accelerators. One process only (validated).

Workdir layout (besides the single run's `config.json`, `checkpoints/` with
the stacked state, and a population-level `metrics.jsonl`): per member
`members/<i>/config.json` (its single-run config), `members/<i>/metrics.jsonl`
(the single run's records) and, from `eval.py --workdir DIR --member i`,
`members/<i>/eval/results.json`.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import itertools
import os
import sys
from typing import Callable

import grain
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from flax import nnx

from bifocal_jax.training import config as config_lib
from bifocal_jax.nn import model as model_lib
from bifocal_jax.nn import optim
from bifocal_jax.training import sharding as sharding_lib
from bifocal_jax.training import state as state_lib
from bifocal_jax.training import steps
from bifocal_jax import tasks
from bifocal_jax.tasks import pipeline

MEMBERS_DIR = "members"
is_population = config_lib.is_population


@dataclasses.dataclass(frozen=True)
class Member:
  index: int
  seed: int
  learning_rate: float
  spectral_learning_rate: float

  def __str__(self) -> str:
    return (f"member {self.index} (seed {self.seed}, learning_rate {self.learning_rate:g}, "
            f"spectral.learning_rate {self.spectral_learning_rate:g})")


def members(config: ml_collections.ConfigDict) -> tuple[Member, ...]:
  """Seeds x learning rates x spectral learning rates, seed-major."""
  p = config.population
  grid = itertools.product(
      tuple(p.seeds) or (config.seed,),
      tuple(p.learning_rates) or (config.learning_rate,),
      tuple(p.spectral_learning_rates) or (config.spectral.learning_rate,))
  return tuple(
      Member(i, int(seed), float(lr), float(slr)) for i, (seed, lr, slr) in enumerate(grid))


def member_config(config: ml_collections.ConfigDict, member: Member) -> ml_collections.ConfigDict:
  """The config of the single run that `member` equals (no population)."""
  c = copy.deepcopy(config)
  c.seed = member.seed
  c.learning_rate = member.learning_rate
  c.spectral.learning_rate = member.spectral_learning_rate
  c.population.seeds = ()
  c.population.learning_rates = ()
  c.population.spectral_learning_rates = ()
  return c


def member_dir(workdir: str, index: int) -> str:
  return os.path.join(os.path.abspath(workdir), MEMBERS_DIR, str(index))


# ----------------------------------------------------------------------------
# Setup: the shared static parts and the stacked state.
# ----------------------------------------------------------------------------


@dataclasses.dataclass
class Population:
  """Everything static about a population run.

  `setup`: what the members share (model graph, constants, mesh, task and a
  unit-rate optimizer) as a `state.Setup` whose config is member 0's at
  learning rates 1, and whose shardings and abstract state are the stacked
  ones. `schedules[i]`: member i's learning-rate schedules, for logging.
  """
  config: ml_collections.ConfigDict
  members: tuple[Member, ...]
  setup: state_lib.Setup

  @property
  def size(self) -> int:
    return len(self.members)

  @property
  def schedules(self) -> list[dict[str, Callable]]:
    return [{
        "learning_rate":
            _scaled(self.setup.schedules["learning_rate"], m.learning_rate),
        "spectral_learning_rate":
            _scaled(self.setup.schedules["spectral_learning_rate"], m.spectral_learning_rate)
    } for m in self.members]

  def member_setup(self, index: int) -> state_lib.Setup:
    """A `Setup` for evaluating member `index` (its own config; the shared model)."""
    return dataclasses.replace(self.setup, config=member_config(self.config, self.members[index]))

  @property
  def batch_sharding(self):
    return stacked(sharding_lib.batch_sharding(self.setup.mesh))


def _scaled(schedule: Callable, factor: float) -> Callable:
  return lambda step: factor * schedule(step)


def stacked(sharding: jax.sharding.NamedSharding) -> jax.sharding.NamedSharding:
  """`sharding` with a leading, unsharded member axis."""
  return jax.sharding.NamedSharding(sharding.mesh, jax.sharding.PartitionSpec(None, *sharding.spec))


def _unit_config(config):
  c = member_config(config, members(config)[0])
  c.learning_rate = 1.0
  c.spectral.learning_rate = 1.0
  return c


def _member_state(config, task, tx, seed):
  """One member's train state at step 0 from its seed (traced under vmap);
  the same arrays `state.init_state` makes for that seed."""
  model = state_lib.build_model(config, task, seed=jax.random.key(seed))
  _, params, _ = nnx.split(model, nnx.Param, ...)
  return state_lib.fresh_state(params, tx.init(params), model_lib.spectral_frequencies(model),
                               state_lib.trajectory_capacity(config))


def setup(config: ml_collections.ConfigDict, mesh: jax.sharding.Mesh, *, task=None) -> Population:
  """The population's static parts and its abstract (stacked) state;
  `initial_state` makes the state itself."""
  task = tasks.get_task(config.task) if task is None else task
  unit = _unit_config(config)
  tx, schedules = state_lib.make_optimizer(unit)
  the_members = members(config)
  abstract_model = nnx.eval_shape(lambda: state_lib.build_model(unit, task))
  graphdef, abstract_params, _ = nnx.split(abstract_model, nnx.Param, ...)
  rep = sharding_lib.replicated(mesh)
  shapes = jax.eval_shape(_init_fn(unit, task, tx), _seeds(the_members))
  # Parameters laid out as a single run's, behind the member axis; the rest replicated.
  prefix = jax.tree.map(lambda _: rep, shapes)
  prefix["params"] = jax.tree.map(stacked, sharding_lib.param_shardings(abstract_params, mesh),
                                  is_leaf=lambda x: isinstance(x, jax.sharding.NamedSharding))
  shardings = jax.tree.map(lambda s, sub: jax.tree.map(lambda _: s, sub), prefix, shapes)
  abstract_state = jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                                shapes, shardings)
  constants = _INIT_JIT(lambda: nnx.split(state_lib.build_model(unit, task), nnx.Param, ...)[2],
                        out_shardings=rep)()
  has_spectral = shapes["trajectory"]["frequencies"].shape[2] > 0
  s = state_lib.Setup(unit, task, mesh, graphdef, constants, tx, schedules, shardings,
                      abstract_state, has_spectral)
  return Population(config, the_members, s)


# As `state.init_state`: random initialisers compile fast at optimisation level 0.
_INIT_JIT = functools.partial(jax.jit, compiler_options={"xla_backend_optimization_level": 0})


def _seeds(the_members) -> jax.Array:
  return jnp.asarray([m.seed for m in the_members], jnp.int32)


def _init_fn(unit_config, task, tx):
  return jax.vmap(functools.partial(_member_state, unit_config, task, tx))


def initial_state(pop: Population):
  """The stacked train state at step 0: member i's is its single run's."""
  s = pop.setup
  return _INIT_JIT(_init_fn(s.config, s.task, s.tx),
                   out_shardings=s.state_shardings)(_seeds(pop.members))


# ----------------------------------------------------------------------------
# The step.
# ----------------------------------------------------------------------------


def scale_updates(tx: optax.GradientTransformation, learning_rate,
                  spectral_learning_rate) -> optax.GradientTransformation:
  """`tx` (built at learning rates 1) with its base updates scaled by
  `learning_rate` and its spectral ones by `spectral_learning_rate` (arrays,
  traced per member)."""

  def update_fn(updates, state, params=None):
    updates, state = tx.update(updates, state, params)
    leaves, treedef = jax.tree.flatten(updates)
    labels = jax.tree.leaves(optim.spectral_labels(updates))
    scaled = [
        leaf *
        (spectral_learning_rate if label == optim.SPECTRAL else learning_rate).astype(leaf.dtype)
        for leaf, label in zip(leaves, labels, strict=True)
    ]
    return jax.tree.unflatten(treedef, scaled), state

  return optax.GradientTransformation(tx.init, update_fn)


def make_train_step(pop: Population):
  """`state, metrics = step(state, batch)` on the stacked state and a stacked
  batch `[P, B, L]`; metrics come back per member (`[P]`). One jit-compiled
  program: each new batch width compiles once, for every member at once."""
  s = pop.setup
  seeds = _seeds(pop.members)
  rates = jnp.asarray([m.learning_rate for m in pop.members], jnp.float32)
  spectral_rates = jnp.asarray([m.spectral_learning_rate for m in pop.members], jnp.float32)

  def member_step(state, batch, seed, rate, spectral_rate):
    member = dataclasses.replace(s, tx=scale_updates(s.tx, rate, spectral_rate))
    return steps.train_step(member, state, batch, jax.random.key(seed))

  def population_step(state, batch):
    return jax.vmap(member_step)(state, batch, seeds, rates, spectral_rates)

  return jax.jit(population_step, in_shardings=(s.state_shardings, pop.batch_sharding),
                 out_shardings=(s.state_shardings, sharding_lib.replicated(s.mesh)),
                 donate_argnums=(0,), compiler_options=steps.compiler_options())


# ----------------------------------------------------------------------------
# Data.
# ----------------------------------------------------------------------------


def _pad_width(batch: dict[str, np.ndarray], width: int) -> dict[str, np.ndarray]:
  """The training fields of `batch`, padded with padding tokens to `width` columns."""
  return {k: np.pad(batch[k], ((0, 0), (0, width - batch[k].shape[1]))) for k in steps.TRAIN_FIELDS}


def _stacked_batch(batch_fns, member_source: tuple[int, ...], step: int) -> dict[str, np.ndarray]:
  batches = [fn(step) for fn in batch_fns]
  width = max(b["inputs"].shape[1] for b in batches)
  batches = [_pad_width(b, width) for b in batches]
  return {k: np.stack([batches[j][k] for j in member_source]) for k in steps.TRAIN_FIELDS}


def train_batches(pop: Population, task, *, buckets, start_step: int):
  """The stacked training batches `{field: [P, B, L]}` from `start_step` on:
  member i's rows are those its single run reads at that step (padded to the
  widest member's bucket). A pure function of the step, so resuming needs
  only the step. With `population.data_workers`, worker processes make them."""
  config = pop.config
  seeds = sorted({m.seed for m in pop.members})
  batch_fns = [
      pipeline.train_batch_fn(task, batch_size_per_process=config.batch_size, seed=seed,
                              buckets=buckets, examples=config.data.examples,
                              lengths=config.data.lengths) for seed in seeds
  ]
  member_source = tuple(seeds.index(m.seed) for m in pop.members)
  dataset = (grain.MapDataset.range(start_step, sys.maxsize).map(
      functools.partial(_stacked_batch, batch_fns,
                        member_source)).to_iter_dataset(pipeline.READ_OPTIONS))
  workers = config.population.data_workers
  if workers:
    dataset = dataset.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
  return iter(dataset)


def to_global_batch(batch: dict, mesh) -> dict:
  """A stacked host batch -> arrays on the mesh (members unsharded, rows as a single run's)."""
  sharding = stacked(sharding_lib.batch_sharding(mesh))
  return {
      k: jax.make_array_from_process_local_data(sharding, np.asarray(batch[k]))
      for k in steps.TRAIN_FIELDS
  }


# ----------------------------------------------------------------------------
# Reading members out of the stacked state.
# ----------------------------------------------------------------------------


def member_tree(tree, index: int):
  """Member `index`'s slice of a stacked pytree (params, metrics, ...)."""
  return jax.tree.map(lambda x: x[index], tree)


def nonfinite_members(state) -> dict[int, tuple[int, str]]:
  """{member index: (step, what)} of the members frozen by a non-finite update."""
  bad = jax.device_get(state["nonfinite"])
  return {
      i: (int(step), steps.NONFINITE_WHAT[int(what)])
      for i, (step, what) in enumerate(zip(bad["step"], bad["what"]))
      if step >= 0
  }


def recorded_trajectories(state) -> dict[str, np.ndarray]:
  """The trajectory buffers of every member with their counts (`count[P]`):
  `analysis.load_trajectory(workdir, member=i)` reads member i's first `count[i]`."""
  t = jax.device_get(state["trajectory"])
  return dict(steps=np.asarray(t["steps"]), frequencies=np.asarray(t["frequencies"]),
              count=np.asarray(t["count"]))
