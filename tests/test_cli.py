"""bifocal_jax/cli.py: which log records reach stderr."""

import logging as std_logging
import os

import pytest
from absl import logging

from bifocal_jax import cli


def record(path: str, level: int) -> std_logging.LogRecord:
  return std_logging.LogRecord("absl", level, path, 1, "message", None, None)


@pytest.mark.parametrize("path, level, shown", [
    ("/venv/site-packages/orbax/checkpoint/checkpoint_manager.py", std_logging.INFO, False),
    ("/venv/site-packages/jax/_src/xla_bridge.py", std_logging.INFO, False),
    ("/venv/site-packages/orbax/checkpoint/checkpoint_manager.py", std_logging.WARNING, True),
    ("/venv/site-packages/jax/_src/xla_bridge.py", std_logging.ERROR, True),
    ("/repo/bifocal_jax/train.py", std_logging.INFO, True),
    ("/venv/site-packages/bifocal_jax/evaluation/spectrum.py", std_logging.INFO, True),
])
def test_project_info_only(path, level, shown):
  assert cli._ProjectInfoOnly().filter(record(path.replace("/", os.sep), level)) is shown


@pytest.fixture
def absl_handler():
  handler = logging.get_absl_handler()
  filters, verbosity = list(handler.filters), logging.get_verbosity()
  # Start without the filter: an in-process training test may have installed it.
  handler.filters[:] = [f for f in filters if not isinstance(f, cli._ProjectInfoOnly)]
  yield handler
  handler.filters[:] = filters
  logging.set_verbosity(verbosity)


def test_quiet_library_logs_installs_one_filter(absl_handler):
  logging.set_verbosity(logging.INFO)
  cli.quiet_library_logs()
  cli.quiet_library_logs()
  assert sum(isinstance(f, cli._ProjectInfoOnly) for f in absl_handler.filters) == 1


def test_verbosity_one_shows_everything(absl_handler):
  logging.set_verbosity(logging.DEBUG)
  cli.quiet_library_logs()
  assert not any(isinstance(f, cli._ProjectInfoOnly) for f in absl_handler.filters)
