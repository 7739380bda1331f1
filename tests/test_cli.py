"""bifocal_jax/cli.py: which log records reach stderr; the commands' --help and config listing."""

import logging as std_logging
import os

import pytest
from absl import logging

from bifocal_jax import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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


def _help(*command, status=0):
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  out = subprocess.run([sys.executable, *command], cwd=ROOT, capture_output=True, text=True,
                       timeout=300)
  assert out.returncode == status, out.stderr  # absl's --help exits with status 1
  return out.stdout


def test_the_train_commands_help_lists_their_flags_the_configs_and_the_kinds():
  from bifocal_jax.nn import positions  # pylint: disable=g-import-not-at-top
  for command in (["train.py"], ["-m", "bifocal_jax.train"]):
    text = _help(*command, "--help", status=1)
    for flag in ("--config", "--workdir", "--overwrite", "--coordinator_address"):
      assert f"  {flag}" in text or f"  --[no]{flag[2:]}" in text, (command, flag)
    assert "--config.KEY=VALUE" in text
    flat = " ".join(text.split())
    for name in cli.CONFIG_NAMES:
      assert name in flat
    for kind in positions.POSITION_KINDS:
      assert kind in flat


def test_the_eval_commands_help_lists_their_flags():
  for command in (["eval.py"], ["-m", "bifocal_jax.eval"]):
    text = _help(*command, "--help", status=1)
    for flag in ("--workdir", "--dyck_file", "--compare", "--spectrum", "--probe", "--member"):
      assert f"  {flag}" in text or f"  --[no]{flag[2:]}" in text, (command, flag)


def test_the_tasks_command_without_arguments_lists_each_config_with_what_it_trains():
  text = _help("-m", "bifocal_jax.tasks")
  names = [line.strip() for line in text.splitlines() if line.startswith("  ") and
           not line.startswith("      ")]
  assert names == list(cli.CONFIG_NAMES)
  assert "Dyck-(8, m) closing-bracket prediction" in " ".join(text.split())
