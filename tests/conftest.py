"""Shared fixtures: small position configs, and cheap compiles for tiny programs."""

import jax
import pytest

from bifocal_jax import attention


@pytest.fixture
def position_config():
  """`position_config(kind, **overrides)`: the attention layer's defaults with overrides."""
  def make(kind, **overrides):
    position = attention.default_position_config()
    position.kind = kind
    position.update(overrides)
    return position
  return make


@pytest.fixture(scope="module")
def fast_compiles():
  """Lets XLA skip most optimisation while a test module runs.

  For tests of tiny programs compiling is nearly all the cost (eager random
  initialisers alone compile 3-4x faster). Opt in per module with
  `pytestmark = pytest.mark.usefixtures("fast_compiles")`. The flag is not part
  of JAX's compile cache key, so the caches are cleared afterwards: nothing
  compiled this way outlives the module.
  """
  flag = "jax_disable_most_optimizations"
  previous = jax.config.read(flag)
  jax.config.update(flag, True)
  yield
  jax.config.update(flag, previous)
  jax.clear_caches()
