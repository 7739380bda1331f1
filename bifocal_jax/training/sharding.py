"""Device mesh and parameter/batch shardings.

The mesh has three axes, sized by `config.mesh.{data,fsdp,model}` (-1: all
remaining devices): the batch is split over `data` and `fsdp`; parameters are
split by their `logical_axes` metadata (set where each Param is created) with
`LOGICAL_RULES`: FSDP over `fsdp` for the embedding dimension, attention heads
and MLP hidden units over `model`.
"""

from __future__ import annotations

import itertools
import math

import jax
import ml_collections
import orbax.checkpoint as ocp
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec as P

MESH_AXES = ("data", "fsdp", "model")
BATCH_AXES = ("data", "fsdp")
LOGICAL_RULES = {
    "embed": "fsdp",
    "heads": "model",
    "mlp": "model",
    "vocab": None,
    "head_dim": None,
}


def mesh_shape(mesh_config: ml_collections.ConfigDict, num_devices: int) -> tuple[int, int, int]:
  """Resolves -1 entries; raises ValueError naming the key when sizes do not fit."""
  sizes = {axis: int(mesh_config[axis]) for axis in MESH_AXES}
  for axis, size in sizes.items():
    if size == 0 or size < -1:
      raise ValueError(f"mesh.{axis}={size}: must be a positive device count or -1")
  free = [axis for axis, size in sizes.items() if size == -1]
  if len(free) > 1:
    raise ValueError(f"mesh={sizes}: at most one axis may be -1")
  fixed = math.prod(size for size in sizes.values() if size != -1)
  if free:
    if num_devices % fixed:
      raise ValueError(f"mesh.{free[0]}=-1: the {num_devices} devices are not divisible by the "
                       f"other axes ({fixed})")
    sizes[free[0]] = num_devices // fixed
  if math.prod(sizes.values()) != num_devices:
    raise ValueError(f"mesh={sizes}: data*fsdp*model = {math.prod(sizes.values())} is not the "
                     f"number of devices ({num_devices})")
  return sizes["data"], sizes["fsdp"], sizes["model"]


def make_mesh(mesh_config: ml_collections.ConfigDict, devices=None) -> jax.sharding.Mesh:
  devices = jax.devices() if devices is None else devices
  shape = mesh_shape(mesh_config, len(devices))
  return jax.make_mesh(shape, MESH_AXES, axis_types=(jax.sharding.AxisType.Auto,) * 3,
                       devices=devices)


def logical_to_spec(logical_axes, shape, mesh: jax.sharding.Mesh) -> P:
  """PartitionSpec for a parameter; an axis that does not divide stays replicated."""
  if not logical_axes:
    return P()
  spec = []
  for name, dim in zip(logical_axes, shape):
    axis = LOGICAL_RULES.get(name) if name else None
    if axis is not None and dim % mesh.shape[axis]:
      axis = None
    spec.append(axis)
  return P(*spec)


def param_shardings(params: nnx.State, mesh: jax.sharding.Mesh):
  """A tree like `params` (Variables or arrays) of NamedShardings."""

  def one(variable):
    axes = variable.get_metadata().get("logical_axes")
    return NamedSharding(mesh, logical_to_spec(axes, variable.shape, mesh))

  return jax.tree.map(one, params, is_leaf=lambda x: isinstance(x, nnx.Variable))


def batch_sharding(mesh: jax.sharding.Mesh) -> NamedSharding:
  return NamedSharding(mesh, P(BATCH_AXES))


def replicated(mesh: jax.sharding.Mesh) -> NamedSharding:
  return NamedSharding(mesh, P())


def data_parallel_size(mesh: jax.sharding.Mesh) -> int:
  return mesh.shape["data"] * mesh.shape["fsdp"]


# ----------------------------------------------------------------------------
# Several processes.
# ----------------------------------------------------------------------------

_BARRIER_IDS = itertools.count()


def barrier(name: str, *, timeout_s: int = 3600) -> None:
  """Waits until every process gets here (a no-op for one process).

  A barrier of JAX's coordination service, not a collective: it waits up to
  `timeout_s` for a process that is still busy (compiling, say), where the
  first CPU collective of a group gives up after 30 s. Every process must pass
  the same barriers in the same order.
  """
  if jax.process_count() > 1:
    key = f"bifocal_jax/{next(_BARRIER_IDS)}/{name}"
    ocp.multihost.get_barrier_sync_fn()(key=key, timeout_ms=timeout_s * 1000)


def compile_ahead(jitted, name: str):
  """`jitted`, except that with several processes each new argument shape is
  compiled ahead of time, then all processes meet at a `barrier` before running
  it: one that compiles slower (or misses the compilation cache, which only
  process 0 fills) never keeps the others waiting inside a collective."""
  if jax.process_count() == 1:
    return jitted
  compiled = {}

  def call(*args):
    shapes = tuple((x.shape, str(x.dtype)) for x in jax.tree.leaves(args))
    if shapes not in compiled:
      compiled[shapes] = jitted.lower(*args).compile()
      barrier(f"{name} compiled")
    return compiled[shapes](*args)

  return call
