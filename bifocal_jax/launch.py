"""What `train.py` / `eval.py` do around the library: distributed start-up,
and turning expected failures into one clear line and an exit status.

Exit statuses: 0 done (or preempted and saved), 2 bad input (config, workdir),
1 a failure during the run (non-finite values, damaged checkpoints, a lost peer).
"""

from __future__ import annotations

import os
import sys

import jax
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
  if _COORDINATOR is not None and _COORDINATOR.value:
    if _NUM_PROCESSES.value is None or _PROCESS_ID.value is None:
      fail("--coordinator_address needs --num_processes and --process_id")
    jax.distributed.initialize(
        _COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value,
        heartbeat_timeout_seconds=_HEARTBEAT.value)
  elif os.environ.get("TPU_WORKER_HOSTNAMES") or os.environ.get("MEGASCALE_COORDINATOR_ADDRESS"):
    jax.distributed.initialize()


def fail(message: str, status: int = 2):
  """One line on stderr, no traceback."""
  print(f"error: {message}", file=sys.stderr, flush=True)
  sys.exit(status)


def run_training(config, workdir: str, *, overwrite: bool = False) -> int:
  from bifocal_jax import checkpoint as checkpoint_lib  # pylint: disable=g-import-not-at-top
  from bifocal_jax import config as config_lib  # pylint: disable=g-import-not-at-top
  from bifocal_jax import train  # pylint: disable=g-import-not-at-top
  initialize_distributed()
  # Validate before anything touches the workdir.
  try:
    config_lib.validate(config, num_devices=jax.device_count(), workdir=workdir,
                        num_processes=jax.process_count())
  except ValueError as e:
    fail(str(e))
  try:
    train.train_and_evaluate(config, workdir, overwrite=overwrite)
  except (config_lib.ConfigError, train.WorkdirConflictError) as e:
    fail(str(e))
  except (train.NonFiniteError, checkpoint_lib.CheckpointError) as e:
    fail(str(e), status=1)
  except jax.errors.JaxRuntimeError as e:
    logging.exception("runtime failure")
    fail(f"runtime failure (a lost peer or device?): {str(e).splitlines()[0]}", status=1)
  return 0

