"""Device mesh and parameter/batch shardings.

The mesh has three axes, sized by `config.mesh.{data,fsdp,model}` (-1: all
remaining devices): the batch is split over `data` and `fsdp`; parameters are
split by their `logical_axes` metadata (set where each Param is created) with
`LOGICAL_RULES`: FSDP over `fsdp` for the embedding dimension, attention heads
and MLP hidden units over `model`.
"""

from __future__ import annotations

import math

import jax
import ml_collections
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
      raise ValueError(f"mesh.{axis} must be a positive device count or -1, got {size}")
  free = [axis for axis, size in sizes.items() if size == -1]
  if len(free) > 1:
    raise ValueError(f"at most one of mesh.data/fsdp/model may be -1, got {sizes}")
  fixed = math.prod(size for size in sizes.values() if size != -1)
  if free:
    if num_devices % fixed:
      raise ValueError(
          f"mesh.{free[0]}=-1: {num_devices} devices are not divisible by the other axes ({fixed})")
    sizes[free[0]] = num_devices // fixed
  if math.prod(sizes.values()) != num_devices:
    raise ValueError(
        f"mesh data*fsdp*model = {sizes['data']}*{sizes['fsdp']}*{sizes['model']} = "
        f"{math.prod(sizes.values())} does not match the {num_devices} devices")
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
