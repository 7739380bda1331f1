"""What `train.py` / `eval.py` do around the library: distributed start-up,
and turning expected failures into one clear line and an exit status.

Exit statuses: 0 done (or preempted and saved), 2 bad input (config, workdir),
1 a failure during the run (non-finite values, damaged checkpoints, a failed
collective), 130 interrupted. When a process of a multi-process run dies, JAX's
coordination service notices within `--heartbeat_timeout` seconds and aborts
the others ("... detected fatal errors. This most likely indicates that another
task died"; status 134): nothing hangs, and re-running resumes.
"""

from __future__ import annotations

import logging as std_logging
import os
import re
import sys
import traceback

from absl import flags
from absl import logging

_COORDINATOR = None
_NUM_PROCESSES = None
_PROCESS_ID = None
_HEARTBEAT = None


def define_distributed_flags():
  global _COORDINATOR, _NUM_PROCESSES, _PROCESS_ID, _HEARTBEAT
  _COORDINATOR = flags.DEFINE_string(
      "coordinator_address", None, "host:port of process 0, for multi-process runs off TPU pods.")
  _NUM_PROCESSES = flags.DEFINE_integer("num_processes", None, "Number of processes.")
  _PROCESS_ID = flags.DEFINE_integer("process_id", None, "This process's index.")
  _HEARTBEAT = flags.DEFINE_integer(
      "heartbeat_timeout", 30, "Seconds without a peer's heartbeat before a process gives up.")


def initialize_distributed() -> None:
  """`jax.distributed.initialize` with explicit flags, or auto-detected on TPU pods."""
  import jax  # pylint: disable=g-import-not-at-top
  if _COORDINATOR is not None and _COORDINATOR.value:
    if _NUM_PROCESSES.value is None or _PROCESS_ID.value is None:
      fail("--coordinator_address needs --num_processes and --process_id")
    jax.distributed.initialize(_COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value,
                               heartbeat_timeout_seconds=_HEARTBEAT.value)
  elif os.environ.get("TPU_WORKER_HOSTNAMES") or os.environ.get("MEGASCALE_COORDINATOR_ADDRESS"):
    jax.distributed.initialize()


class _ProjectInfoOnly(std_logging.Filter):
  """INFO records of this project only; WARNING and above from everyone.

  Orbax logs each checkpoint's stages at INFO (about 200 lines in a 1,500-step
  run), which buried the progress bar and our own messages.
  """

  def filter(self, record: std_logging.LogRecord) -> bool:
    if record.levelno >= std_logging.WARNING:
      return True
    path = os.path.abspath(record.pathname)
    return (f"{os.sep}bifocal_jax{os.sep}" in path or
            path == os.path.abspath(sys.argv[0]))  # the entry point itself


def quiet_library_logs() -> None:
  """Hides other libraries' INFO logs (Orbax, JAX) unless `--verbosity` >= 1."""
  if logging.get_verbosity() > logging.INFO:
    return
  handler = logging.get_absl_handler()
  if not any(isinstance(f, _ProjectInfoOnly) for f in handler.filters):
    handler.addFilter(_ProjectInfoOnly())


def fail(message: str, status: int = 2):
  """One line on stderr, no traceback, and exit with `status`.

  In a multi-process run the process exits at once: JAX's orderly shutdown
  waits at a barrier for every peer, and after a failure some may never come.
  """
  print(f"error: {message}", file=sys.stderr, flush=True)
  if _distributed():
    logging.flush()
    sys.stdout.flush()
    os._exit(status)
  sys.exit(status)


def _distributed() -> bool:
  """Whether JAX runs several processes (JAX is imported lazily: the commands'
  flags are defined, and a bad flag reported, before it starts)."""
  jax = sys.modules.get("jax")
  return jax is not None and jax.distributed.is_initialized()


def _gist(error: BaseException) -> str:
  """The first line of a runtime error, without XLA's repeated prefixes."""
  line = str(error).splitlines()[0] if str(error) else type(error).__name__
  return re.sub(r"(Error dispatching computation: )+", "", line)


def describe_flag_error(error: BaseException, argv) -> str:
  """One line for a flag that failed to parse or a config file that failed to load."""
  context = error.__context__
  if isinstance(error, AttributeError) and isinstance(context, KeyError):
    # An override of a key the config lacks: ml_collections names the last
    # component only, and may suggest a close key on the next line.
    key, *hint = str(context.args[0]).splitlines()
    key = key.strip("'")
    flag = next((a.split("=")[0]
                 for a in argv
                 if a.startswith("--config.") and a.split("=")[0].endswith("." + key)),
                f"--config.*.{key}")
    return f"{flag}: no such config key" + (f" ({hint[0]})" if hint else "")
  # Messages of config files that fail to load span lines (a traceback even):
  # the last line says what went wrong.
  lines = [line.strip() for line in str(error).splitlines() if line.strip()]
  return lines[-1] if lines else type(error).__name__


def flags_parser(*config_flags):
  """An `app.run` flags parser: a bad flag, config file or `--config.KEY`
  override is one line on stderr and exit status 2 (not usage text or a
  traceback). Config files load here, so their errors are reported here too.
  A config flag's value may name a config of the package (`--config dyck:tiny`,
  `bifocal_jax.configs`) instead of a file."""
  from bifocal_jax import configs  # pylint: disable=g-import-not-at-top

  def parse(argv):
    try:
      for config_flag in config_flags:
        argv = configs.resolve_argv(argv, config_flag.name)
      args = flags.FLAGS(argv)
      for config_flag in config_flags:
        config_flag.value.keys()  # a config that failed to load raises only when used
    except Exception as e:  # pylint: disable=broad-except
      fail(describe_flag_error(e, argv))
    return args

  return parse


def run_training(config, workdir: str, *, overwrite: bool = False, hooks=()) -> int:
  """`train.train_and_evaluate` with expected failures as one line and an exit
  status (see the module docstring). `hooks`: see `train.Hook`."""
  import jax  # pylint: disable=g-import-not-at-top
  from bifocal_jax import checkpoint as checkpoint_lib  # pylint: disable=g-import-not-at-top
  from bifocal_jax import config as config_lib  # pylint: disable=g-import-not-at-top
  from bifocal_jax import steps  # pylint: disable=g-import-not-at-top
  from bifocal_jax import train  # pylint: disable=g-import-not-at-top
  from bifocal_jax import workdir as workdir_lib  # pylint: disable=g-import-not-at-top
  quiet_library_logs()
  initialize_distributed()
  try:
    train.train_and_evaluate(config, workdir, overwrite=overwrite, hooks=hooks)
  except (config_lib.ConfigError, workdir_lib.WorkdirConflictError) as e:
    fail(str(e))
  except (steps.NonFiniteError, checkpoint_lib.CheckpointError) as e:
    fail(str(e), status=1)
  except jax.errors.JaxRuntimeError as e:
    logging.exception("runtime failure")
    fail(f"runtime failure (a lost peer or device?): {_gist(e)}", status=1)
  except KeyboardInterrupt:
    fail("interrupted; re-run the same command to resume from the last checkpoint", status=130)
  except Exception:  # pylint: disable=broad-except
    if not _distributed():
      raise
    traceback.print_exc()
    fail("the run failed (traceback above)", status=1)
  return 0
