"""Parameters with bounds, kept inside them by projection.

A `BoundedParam` is an `nnx.Param` carrying `lower` and `upper` (None: no
bound on that side) as Variable metadata. Everything that selects
`nnx.Param` (the trainer's `nnx.split(model, nnx.Param, ...)`, the
optimizer, its weight-decay mask, the shardings, checkpoints) treats it as
any other parameter of its shape; the bounds travel in the tree structure,
not in its leaves, so checkpoints hold the same arrays under the same paths.

The stored value is inside the bounds at all times, as a PyTorch source's
in-place `param.data.clamp_(...)` keeps it:

* at construction the value is clipped into the bounds;
* `project(params)` clips every bounded leaf of a parameter tree, and the
  trainer applies it after every optimizer update (`steps.apply_gradients`).
  With an `nnx.Optimizer`, do the same after each `optimizer.update`:
  `nnx.update(model, project(nnx.state(model, nnx.Param)))`.

So a parameter that an update pushes past a bound restarts from the bound,
and the first update back moves it inside at once. The clip is outside the
gradient: the loss's gradient is taken at the stored (in-bounds) value.

A module may clip the value in its forward pass too, straight-through
(`clip_straight_through`: the clip's value, the identity's gradient). On the
trainer's parameters that is a no-op, bitwise; it guards a module trained by
another optimizer that does not `project`, whose stored value can drift past
a bound while the forward pass uses the bound.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx


def clip(x, lower: float | None, upper: float | None):
  """`x` clipped into `[lower, upper]` (None: unbounded on that side)."""
  if lower is None and upper is None:
    return x
  return jnp.clip(x, lower, upper)


def clip_straight_through(x, lower: float | None, upper: float | None):
  """`clip(x, lower, upper)` forward, the identity's gradient."""
  return x + jax.lax.stop_gradient(clip(x, lower, upper) - x)


class BoundedParam(nnx.Param):
  """A trainable parameter kept inside `[lower, upper]` (see the module
  docstring): clipped at construction and by `project` after each update."""

  def __init__(self, value, *, lower: float | None = None, upper: float | None = None, **metadata):
    if lower is None and upper is None:
      raise ValueError("a BoundedParam needs a lower or an upper bound")
    if lower is not None and upper is not None and not lower <= upper:
      raise ValueError(f"lower={lower!r} must not exceed upper={upper!r}")
    super().__init__(clip(value, lower, upper), lower=lower, upper=upper, **metadata)


def _is_variable(x) -> bool:
  return isinstance(x, nnx.Variable)


def project(params):
  """`params` (a tree with Variables as leaves: an `nnx.State`, the train
  state's `params`) with every `BoundedParam` clipped into its bounds; every
  other leaf is returned as it is (the same object)."""

  def one(leaf):
    if isinstance(leaf, BoundedParam):
      return leaf.replace(clip(leaf[...], leaf.lower, leaf.upper))
    return leaf

  return jax.tree.map(one, params, is_leaf=_is_variable)
