"""Shared fixtures: small position configs, compilation caches shared with
subprocesses, the published data; cheap compiles for tiny programs."""

import jax
import pytest

from bifocal_jax.nn import attention
from bifocal_jax.nn import positions


def pytest_configure(config):
  """XLA skips most optimisation in every test process, as in the subprocesses
  the tests start (`helpers.subprocess_env`).

  For the tests' tiny programs compiling is nearly all the cost (eager random
  initialisers alone compile 3-4x faster). Session-wide, so that every program
  in a process, and in the shared persistent compilation cache, is compiled
  the same way (the flag is not part of JAX's cache key).
  """
  del config
  jax.config.update("jax_disable_most_optimizations", True)


@pytest.fixture
def position_config():
  """`position_config(kind, **overrides)`: the attention layer's defaults with overrides."""
  def make(kind, **overrides):
    position = attention.default_position_config()
    position.kind = kind
    position.update(overrides)
    # CoPE's and FoPE's context-length keys, as build_model would resolve them
    return positions.with_context_length(position, 64)
  return make


@pytest.fixture(scope="session")
def compilation_cache_env(tmp_path_factory):
  """Environment variables giving subprocesses a persistent compilation cache
  shared by the whole session (a `train.py` subprocess then pays JAX's import,
  not the compilation, after the first run of its kind)."""
  return dict(JAX_COMPILATION_CACHE_DIR=str(tmp_path_factory.mktemp("jax_cache")),
              JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
              JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")


@pytest.fixture(scope="module")
def persistent_compiles(compilation_cache_env):
  """This module's compilations go to, and come from, the session's persistent
  cache (`compilation_cache_env`), shared with the subprocesses it starts.
  Opt in per module with `pytestmark = pytest.mark.usefixtures("persistent_compiles")`;
  afterwards the process compiles as before (no cache)."""
  from jax.experimental.compilation_cache import compilation_cache  # pylint: disable=g-import-not-at-top
  settings = dict(jax_compilation_cache_dir=compilation_cache_env["JAX_COMPILATION_CACHE_DIR"],
                  jax_persistent_cache_min_compile_time_secs=0,
                  jax_persistent_cache_min_entry_size_bytes=0)
  previous = {name: getattr(jax.config, name) for name in settings}
  for name, value in settings.items():
    jax.config.update(name, value)
  compilation_cache.reset_cache()
  yield
  for name, value in previous.items():
    jax.config.update(name, value)
  compilation_cache.reset_cache()


@pytest.fixture(scope="session")
def published_dir():
  """The folder of the published Dyck files (`BIFOCAL_DATA_DIR`: CI points it at
  the copy beside the clone); the test is skipped, saying how to get them, if any is absent."""
  from bifocal_jax.tasks.external import published  # pylint: disable=g-import-not-at-top
  if published.missing():
    pytest.skip(f"the published Dyck files are absent: {published.how_to_get()}")
  return published.folder()
