"""Spectral Evolution: the spectral frequencies as their own optimizer group.

`spectral_evolution(base, ...)` wraps any optax transform so that every
spectral frequency (a `log omega` leaf) is optimised apart from the rest:

* its own global-norm clipping, then Adam with no weight decay, scaled by its
  own schedule (`spectral_schedule`: frozen, then linear warm-up, then
  constant);
* during the first `freeze_steps` steps its update is exactly zero and its
  Adam moments do not move, so the frequencies stay bitwise geometric and
  Adam starts fresh when they are released;
* `base` sees only the other leaves (so its weight decay and clipping never
  touch the frequencies).

Spectral leaves are found by `spectral_labels`: by Variable type
(`rope.SpectralFrequency`) in NNX states, and by the name `log_frequency` in
pure trees (Linen params, and the plain arrays that `nnx.Optimizer` passes to
`tx.update`). Every module of this project names its spectral parameter
`log_frequency`, or `log_frequency_ratio` where Surgical Integration keeps a
host library's own angle arithmetic (`surgery.hosts`), so both rules select
the same leaves.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from bifocal_jax.nn.rope import SpectralFrequency

SPECTRAL = "spectral"
BASE = "base"
SPECTRAL_NAME = "log_frequency"
SPECTRAL_NAMES = (SPECTRAL_NAME, "log_frequency_ratio")

IsSpectral = Callable[[tuple[Any, ...], Any], bool]

# ----------------------------------------------------------------------------
# Schedules.
# ----------------------------------------------------------------------------


def _check_nonnegative_int(name: str, value) -> int:
  if isinstance(value, bool) or not isinstance(value, int) or value < 0:
    raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
  return value


def spectral_schedule(learning_rate: float, *, warmup_steps: int = 0,
                      freeze_steps: int = 0) -> optax.Schedule:
  """The spectral group's learning rate as a function of the global step.

  0 for `step < freeze_steps`; then step `freeze_steps + k` uses
  `learning_rate * min(1, (k + 1) / warmup_steps)` (so the first released
  step already moves, and the full rate is reached after `warmup_steps`
  steps); constant afterwards.
  """
  if not learning_rate >= 0:
    raise ValueError(f"spectral learning_rate must be >= 0, got {learning_rate!r}")
  _check_nonnegative_int("warmup_steps", warmup_steps)
  _check_nonnegative_int("freeze_steps", freeze_steps)

  def schedule(step):
    released = jnp.asarray(step, jnp.float32) - freeze_steps
    ramp = jnp.clip((released + 1) / max(warmup_steps, 1), 0.0, 1.0)
    return jnp.where(released < 0, 0.0, learning_rate * ramp).astype(jnp.float32)

  return schedule


def base_schedule(learning_rate: float, *, warmup_steps: int, total_steps: int,
                  end_fraction: float = 0.1) -> optax.Schedule:
  """Linear warm-up from 0 to `learning_rate`, then cosine decay to `end_fraction` of it."""
  if not learning_rate >= 0:
    raise ValueError(f"learning_rate must be >= 0, got {learning_rate!r}")
  _check_nonnegative_int("warmup_steps", warmup_steps)
  _check_nonnegative_int("total_steps", total_steps)
  if total_steps <= warmup_steps:
    raise ValueError(f"total_steps={total_steps} must exceed warmup_steps={warmup_steps}")
  if not 0.0 <= end_fraction <= 1.0:
    raise ValueError(f"end_fraction must be in [0, 1], got {end_fraction!r}")
  return optax.warmup_cosine_decay_schedule(init_value=0.0, peak_value=learning_rate,
                                            warmup_steps=warmup_steps, decay_steps=total_steps,
                                            end_value=learning_rate * end_fraction)


# ----------------------------------------------------------------------------
# Which leaves are spectral.
# ----------------------------------------------------------------------------


def _key_name(key) -> str | None:
  for attribute in ("key", "name"):  # DictKey / GetAttrKey
    if hasattr(key, attribute):
      return str(getattr(key, attribute))
  return None


def is_spectral_frequency(path: tuple[Any, ...], leaf: Any) -> bool:
  """Default rule: a `SpectralFrequency` Variable, or a leaf named as in `SPECTRAL_NAMES`."""
  if isinstance(leaf, SpectralFrequency):
    return True
  return bool(path) and _key_name(path[-1]) in SPECTRAL_NAMES


def spectral_labels(params, is_spectral: IsSpectral | None = None):
  """Labels every parameter `'spectral'` or `'base'` (a pytree like `params`).

  `params` may be an NNX state (Variables as leaves: `nnx.state(model,
  nnx.Param)`, the `params` of `nnx.split`), its pure form (the plain arrays
  `nnx.Optimizer` passes to `tx.update`), or a Linen params dict.
  `is_spectral(path, leaf)` overrides the rule; it sees a Variable or an
  array, so rules that must work in both should test the path.
  """
  is_spectral = is_spectral or is_spectral_frequency
  return jax.tree_util.tree_map_with_path(
      lambda path, leaf: SPECTRAL
      if is_spectral(path, leaf) else BASE, params, is_leaf=lambda x: isinstance(x, nnx.Variable))


# ----------------------------------------------------------------------------
# Transforms.
# ----------------------------------------------------------------------------


class FrozenUntilState(NamedTuple):
  count: jax.Array
  inner: optax.OptState


def frozen_until(inner: optax.GradientTransformation,
                 freeze_steps: int) -> optax.GradientTransformation:
  """`inner`, except that the first `freeze_steps` updates are exactly zero.

  While frozen, `inner`'s state is held too (Adam moments do not see the
  frozen gradients), and the zeros are selected, not multiplied, so even
  non-finite gradients cannot leak into the parameters.
  """
  _check_nonnegative_int("freeze_steps", freeze_steps)

  def init_fn(params):
    return FrozenUntilState(jnp.zeros([], jnp.int32), inner.init(params))

  def update_fn(updates, state, params=None):
    new_updates, new_inner = inner.update(updates, state.inner, params)
    frozen = state.count < freeze_steps
    new_updates = jax.tree.map(lambda u: jnp.where(frozen, jnp.zeros_like(u), u), new_updates)
    new_inner = jax.tree.map(lambda old, new: jnp.where(frozen, old, new), state.inner, new_inner)
    return new_updates, FrozenUntilState(optax.safe_increment(state.count), new_inner)

  return optax.GradientTransformation(init_fn, update_fn)


def spectral_evolution(
    base: optax.GradientTransformation,
    *,
    spectral_learning_rate: float | optax.Schedule,
    warmup_steps: int = 0,
    freeze_steps: int = 0,
    clip_norm: float | None = 1.0,
    b1: float = 0.9,
    b2: float = 0.99,
    is_spectral: IsSpectral | None = None,
) -> optax.GradientTransformation:
  """`base` for ordinary parameters; Spectral Evolution for the spectral frequencies.

  Spectral leaves (see `spectral_labels`) get: global-norm clipping to
  `clip_norm` (over the spectral leaves only; None = no clipping) -> Adam
  (`b1`, `b2`, no weight decay) -> `spectral_learning_rate`, which is either
  a float (scheduled by `spectral_schedule` with `warmup_steps` and
  `freeze_steps`) or a schedule of the global step. For the first
  `freeze_steps` steps their update is exactly zero either way.
  """
  if callable(spectral_learning_rate):
    if warmup_steps:
      raise ValueError(
          f"warmup_steps={warmup_steps} applies only to a float spectral_learning_rate; "
          "build the warm-up into the schedule instead")
    schedule = spectral_learning_rate
  else:
    schedule = spectral_schedule(spectral_learning_rate, warmup_steps=warmup_steps,
                                 freeze_steps=freeze_steps)
  if clip_norm is not None and not clip_norm > 0:
    raise ValueError(f"clip_norm must be > 0 or None, got {clip_norm!r}")
  adam = optax.chain(
      optax.clip_by_global_norm(clip_norm) if clip_norm is not None else optax.identity(),
      optax.scale_by_adam(b1=b1, b2=b2))
  spectral = optax.chain(frozen_until(adam, freeze_steps), optax.scale_by_learning_rate(schedule))
  return optax.partition({
      BASE: base,
      SPECTRAL: spectral
  }, lambda params: spectral_labels(params, is_spectral))


def _is_matrix(params):
  """Weight-decay mask: kernels and embeddings (>= 2-D), not biases or scales."""
  return jax.tree.map(lambda x: jnp.ndim(x) >= 2, params)


def default_optimizer(
    *,
    learning_rate: float,
    weight_decay: float,
    warmup_steps: int,
    total_steps: int,
    spectral_learning_rate: float,
    spectral_warmup_steps: int,
    spectral_freeze_steps: int,
    clip_norm: float | None = 1.0,
    spectral_clip_norm: float | None = 1.0,
    b1: float = 0.9,
    b2: float = 0.99,
) -> tuple[optax.GradientTransformation, dict[str, optax.Schedule]]:
  """AdamW (warm-up + cosine, decay on >= 2-D leaves) with Spectral Evolution.

  Returns `(tx, schedules)`, `schedules` holding the `learning_rate` and
  `spectral_learning_rate` schedules of the global step, for logging.
  """
  if not weight_decay >= 0:
    raise ValueError(f"weight_decay must be >= 0, got {weight_decay!r}")
  if clip_norm is not None and not clip_norm > 0:
    raise ValueError(f"clip_norm must be > 0 or None, got {clip_norm!r}")
  learning_rate_schedule = base_schedule(learning_rate, warmup_steps=warmup_steps,
                                         total_steps=total_steps)
  spectral_learning_rate_schedule = spectral_schedule(spectral_learning_rate,
                                                      warmup_steps=spectral_warmup_steps,
                                                      freeze_steps=spectral_freeze_steps)
  base = optax.chain(
      optax.clip_by_global_norm(clip_norm) if clip_norm is not None else optax.identity(),
      optax.adamw(learning_rate_schedule, b1=b1, b2=b2, weight_decay=weight_decay, mask=_is_matrix))
  tx = spectral_evolution(base, spectral_learning_rate=spectral_learning_rate_schedule,
                          freeze_steps=spectral_freeze_steps, clip_norm=spectral_clip_norm, b1=b1,
                          b2=b2)
  return tx, {
      "learning_rate": learning_rate_schedule,
      "spectral_learning_rate": spectral_learning_rate_schedule
  }
