"""What every host-library adapter shares: a log-ratio spectrum, and call-site rebinding.

Host libraries (tunix, the `gemma` library, MaxText) compute their rotary
angles with their own arithmetic (`positions / base ** fraction / scale`,
padded timescales, YaRN tables...), which differs from ours
(`positions * omega`) in the last float32 bits. An absolute `log omega`
parameter would therefore drift from the original at long positions. The
adapters instead keep the host's own angle arithmetic and multiply its angles
by `exp(log_frequency_ratio)`, a trainable log-ratio to the original
frequencies that starts at exactly 0: `angle * 1.0 == angle`, so a converted
model computes bit for bit what the original did at step 0, and training moves
`omega = omega_0 * exp(ratio)` with the same relative steps as `log omega`.

`RatioSpectrum` owns that parameter (a `SpectralFrequency`, named
`log_frequency_ratio` so that `optim.spectral_evolution` selects it by type
and by name) and the original frequencies (for reporting only).
`rebind_globals` and `active_layer` let an adapter redirect a module-level
rotary *function* that a host's method calls, without editing its source.
"""

from __future__ import annotations

import contextlib
import contextvars
import types

import jax
import jax.numpy as jnp
from flax import nnx

from bifocal_jax.nn.rope import SpectralFrequency

RATIO_NAME = "log_frequency_ratio"


class OriginalFrequency(nnx.Variable):
  """A host's original rotary frequencies (radians per token); never trained."""


class RatioSpectrum(nnx.Module):
  """`omega = omega_0 * exp(log_frequency_ratio)`, the ratio trainable and starting at 0.

  Args:
    original_frequencies: `[pairs]`, the host's frequencies, as it computes
      them (for `frequencies()`; rotations use the host's own angles).
    num_heads: None for one spectrum shared by all heads (`[pairs]`), else one
      per head (`[num_heads, pairs]`).
  """

  def __init__(self, original_frequencies: jax.Array, *, num_heads: int | None = None):
    original = jnp.asarray(original_frequencies, jnp.float32)
    if original.ndim != 1:
      raise ValueError(f"original_frequencies must be [pairs], got shape {original.shape}")
    if num_heads is not None and num_heads < 1:
      raise ValueError(f"num_heads must be >= 1, got {num_heads!r}")
    shape = original.shape if num_heads is None else (num_heads,) + original.shape
    self.num_heads = num_heads
    self.original_frequency = OriginalFrequency(original)
    self.log_frequency_ratio = SpectralFrequency(jnp.zeros(shape, jnp.float32))

  def ratio(self) -> jax.Array:
    """`exp(log_frequency_ratio)` as `[heads or 1, pairs]`, float32."""
    ratio = jnp.exp(self.log_frequency_ratio[...])
    return ratio if ratio.ndim == 2 else ratio[None]

  def frequencies(self) -> jax.Array:
    """Current angular frequencies, `[pairs]` or `[heads, pairs]`, float32."""
    original = jax.lax.stop_gradient(self.original_frequency[...])
    return original * jnp.exp(self.log_frequency_ratio[...])


# ----------------------------------------------------------------------------
# Redirecting a module-level rotary function that a host's method calls.
# ----------------------------------------------------------------------------

_ACTIVE = contextvars.ContextVar("bifocal_jax_active_layer", default=None)


@contextlib.contextmanager
def active_layer(layer):
  """Makes `layer` the one whose spectrum the redirected rotary calls use."""
  token = _ACTIVE.set(layer)
  try:
    yield
  finally:
    _ACTIVE.reset(token)


def current_layer():
  """The layer set by `active_layer`, or None outside one."""
  return _ACTIVE.get()


def rebind_globals(function: types.FunctionType, where: str, **replacements) -> types.FunctionType:
  """A copy of `function` whose global names in `replacements` resolve to new objects.

  The host's source is untouched: only this copy (used by a converted
  subclass) sees the replacements. Raises ValueError for a function with
  closure cells (a `super()` call or a nested definition), which cannot be
  copied faithfully.
  """
  if not isinstance(function, types.FunctionType) or function.__closure__:
    raise ValueError(
        f"cannot redirect the rotary call in {where}: its method is not a plain function")
  namespace = dict(function.__globals__)
  namespace.update(replacements)
  copy = types.FunctionType(function.__code__, namespace, function.__name__, function.__defaults__,
                            None)
  copy.__kwdefaults__ = function.__kwdefaults__
  copy.__qualname__ = function.__qualname__
  copy.__doc__ = function.__doc__
  return copy
