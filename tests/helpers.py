"""Shared by the trainer's tests: the tiny test config, `train.py` run as
subprocesses (fake CPU devices, several processes), and reading a run's outputs
without building its model."""

import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import orbax.checkpoint as ocp

from bifocal_jax import configs

ROOT = pathlib.Path(__file__).resolve().parent.parent

# Every trainer test trains `configs/dyck.py:tiny` (30 steps, checkpoints every
# 10, trajectory every 5) with: one length bucket (one train-step compilation),
# metrics every step (so runs compare step by step), an evaluation every 10
# steps, and Spectral Evolution frozen for the first 10 steps.
TEST_OVERRIDES = {"buckets": (40,), "log_every": 1, "eval_every": 10, "spectral.freeze_steps": 10}
# Metrics that measure the machine, not the run.
TIMING_KEYS = ("time", "steps_per_sec", "tokens_per_sec")


def untrained_run(config_file: str):
  """An `evaluate.Run` of `configs/<config_file>`'s `tiny` variant at its
  initial weights, on this machine's devices (nothing trained or written)."""
  import jax  # pylint: disable=g-import-not-at-top
  import ml_collections  # pylint: disable=g-import-not-at-top
  from bifocal_jax.evaluation import evaluate  # pylint: disable=g-import-not-at-top
  from bifocal_jax.evaluation import evaluator
  from bifocal_jax.training import sharding, state
  config = configs.load_file(str(ROOT / "configs" / config_file), "tiny")
  config.mesh = ml_collections.ConfigDict(dict(data=-1, fsdp=1, model=1))
  mesh = sharding.make_mesh(config.mesh)
  with jax.set_mesh(mesh):
    setup, params_state = state.setup(config, mesh)
  return evaluate.Run("", config, evaluator.Evaluator(setup), params_state["params"], 0)


def tiny_config(overrides: dict | None = None, config_file: str = "dyck.py"):
  """The test config (of another task: its file's `tiny`), with `{"dotted.key": value}`
  overrides on top."""
  config = configs.load_file(ROOT / "configs" / config_file, "tiny")
  for key, value in {**TEST_OVERRIDES, **(overrides or {})}.items():
    *parents, name = key.split(".")
    node = config
    for parent in parents:
      node = node[parent]
    node[name] = value
  return config


def config_flags(overrides: dict | None = None) -> list[str]:
  """`train.py` flags selecting the same config as `tiny_config(overrides)`."""
  flags = ["--config", "configs/dyck.py:tiny"]
  for key, value in {**TEST_OVERRIDES, **(overrides or {})}.items():
    flags.append(f"--config.{key}={value}")
  return flags


class SignalAfter:
  """A `train.Hook`: the process sends itself `signal_name` after step `step`.

  At a checkpoint step the signal comes right after that step's save began
  (a KILL lands during the asynchronous save); at other steps, once earlier
  saves are complete, so that tests are deterministic.
  """

  def __init__(self, step: int, signal_name: str):
    self.step, self.signal = step, signal.Signals["SIG" + signal_name]

  @classmethod
  def parse(cls, spec: str) -> "SignalAfter":
    """From `STEP:NAME`, e.g. `20:KILL`."""
    step, name = spec.split(":")
    return cls(int(step), name)

  def __call__(self, step: int, saved: bool, checkpointer) -> None:
    if step != self.step:
      return
    if not saved:
      checkpointer.wait()
    os.kill(os.getpid(), self.signal)


def subprocess_env(devices: int = 1, **env) -> dict[str, str]:
  """This environment with `devices` fake CPU devices and `env` on top.

  Like the test processes (`conftest.pytest_configure`), subprocesses let XLA
  skip most optimisation: compiling is most of the cost of these tiny runs.
  They write no compilation cache into the user's cache home
  (`BIFOCAL_COMPILATION_CACHE=off`; the `compilation_cache_env` fixture gives
  them one of the session's instead).
  """
  out = dict(os.environ)
  out.update(JAX_PLATFORMS="cpu", XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
             JAX_DISABLE_MOST_OPTIMIZATIONS="1", BIFOCAL_COMPILATION_CACHE="off")
  out.update({k: str(v) for k, v in env.items()})
  return out


def train_command(workdir, overrides: dict | None = None, *args, signal_after: str | None = None
                  ) -> list[str]:
  """`python train.py` with the test config; `signal_after="STEP:NAME"` runs it
  through `tests/train_with_signal.py` instead, which signals itself then."""
  entry = ["train.py"] if signal_after is None else ["tests/train_with_signal.py", signal_after]
  return [sys.executable, *entry, *config_flags(overrides), f"--workdir={workdir}", *args]


def run_train(workdir, overrides: dict | None = None, *args, devices: int = 1, timeout: int = 300,
              signal_after: str | None = None, **env) -> subprocess.CompletedProcess:
  """`python train.py ...` to completion (or death); stdout and stderr captured."""
  return subprocess.run(train_command(workdir, overrides, *args, signal_after=signal_after),
                        cwd=ROOT, text=True, capture_output=True, timeout=timeout,
                        env=subprocess_env(devices, **env))


def run_experiment(module: str, *flags: str) -> subprocess.CompletedProcess:
  """`python -m experiments.extrapolation.<module> FLAGS...` from the repository
  root, to completion; output captured."""
  return subprocess.run([sys.executable, "-m", f"experiments.extrapolation.{module}", *flags],
                        cwd=ROOT, text=True, capture_output=True, timeout=300,
                        env=subprocess_env())


def finished_and_in_flight_runs(tmp_path, config_file: str):
  """`(config, run, in_flight)`: `configs/<config_file>:tiny` trained 10 steps
  (checkpoints at 5 and 10) into `tmp_path/run`, and a copy without its last
  checkpoint in `tmp_path/run_in_flight`, as a sweep still training it leaves it."""
  import ml_collections  # pylint: disable=g-import-not-at-top
  from bifocal_jax import train  # pylint: disable=g-import-not-at-top
  run, in_flight = str(tmp_path / "run"), str(tmp_path / "run_in_flight")
  config = configs.load_file(str(ROOT / "configs" / config_file), "tiny")
  config.steps = config.eval_every = 10
  config.checkpoint_every = 5
  config.mesh = ml_collections.ConfigDict(dict(data=-1, fsdp=1, model=1))
  train.train_and_evaluate(config, run)
  shutil.copytree(run, in_flight)
  shutil.rmtree(os.path.join(in_flight, "checkpoints", "10"))
  return config, run, in_flight


def run_python(code: str, *, devices: int = 1, timeout: int = 300, **env) -> str:
  """Runs `code` in a fresh interpreter (with this directory and the test
  modules of its subdirectories importable); returns its stdout, or fails
  with its output."""
  env = subprocess_env(devices, **env)
  tests = ROOT / "tests"
  folders = [tests] + sorted(p for p in tests.iterdir() if p.is_dir() and any(p.glob("test_*.py")))
  env["PYTHONPATH"] = os.pathsep.join([*map(str, folders), env.get("PYTHONPATH", "")])
  result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, text=True, capture_output=True,
                          timeout=timeout, env=env)
  assert result.returncode == 0, result.stdout + result.stderr
  return result.stdout


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


def start_processes(workdir, logs, overrides: dict | None = None, *, num_processes: int,
                    devices_per_process: int, signal_after: dict[int, str] | None = None,
                    heartbeat_timeout: int = 10, **env) -> list[subprocess.Popen]:
  """One multi-process run of `train.py` on this machine (CPU collectives over
  localhost). Process i writes its output to `{logs}.{i}` and signals itself
  as `signal_after[i]` says (`train_command`)."""
  port = free_port()
  processes = []
  for i in range(num_processes):
    args = (f"--coordinator_address=localhost:{port}", f"--num_processes={num_processes}",
            f"--process_id={i}", f"--heartbeat_timeout={heartbeat_timeout}")
    with open(f"{logs}.{i}", "w") as log:
      processes.append(subprocess.Popen(
          train_command(workdir, overrides, *args, signal_after=(signal_after or {}).get(i)),
          cwd=ROOT, text=True, stdout=log, stderr=subprocess.STDOUT,
          env=subprocess_env(devices_per_process, **env)))
  return processes


def wait_all(processes: list[subprocess.Popen], timeout: float) -> list[int]:
  """Their exit statuses; any still running after `timeout` seconds is killed
  (and reported as None)."""
  deadline = time.monotonic() + timeout
  statuses = []
  for process in processes:
    try:
      statuses.append(process.wait(max(deadline - time.monotonic(), 0)))
    except subprocess.TimeoutExpired:
      process.kill()
      process.wait()
      statuses.append(None)
  return statuses


def read_metrics(workdir) -> list[dict]:
  """`metrics.jsonl` without the timing fields."""
  with open(pathlib.Path(workdir) / "metrics.jsonl") as f:
    records = [json.loads(line) for line in f if line.strip()]
  return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in records]


def whole_and_resumed(config, tmp_path, stop_at: int) -> tuple[list[dict], list[dict]]:
  """`read_metrics` of `config` trained in one go, and of it stopped (SIGINT)
  after step `stop_at`, then rerun to the end: `(whole, resumed)`."""
  from bifocal_jax import train  # pylint: disable=g-import-not-at-top
  whole, parts = str(tmp_path / "whole"), str(tmp_path / "parts")
  train.train_and_evaluate(config, whole)
  summary = train.train_and_evaluate(config, parts, hooks=[SignalAfter(stop_at, "INT")])
  assert summary["preempted_at"] == stop_at
  train.train_and_evaluate(config, parts)
  return read_metrics(whole), read_metrics(parts)


def checkpoint_steps(workdir) -> list[int]:
  """Steps with a finished checkpoint (a save cut short leaves only a temporary directory)."""
  directory = pathlib.Path(workdir) / "checkpoints"
  return sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit())


def latest_checkpoint(workdir) -> tuple[int, dict[str, np.ndarray], dict[str, np.ndarray]]:
  """`(step, state, trajectory)` of the newest checkpoint, as flat numpy dicts."""
  options = ocp.CheckpointManagerOptions(read_only=True)
  with ocp.CheckpointManager(pathlib.Path(workdir) / "checkpoints", options=options) as manager:
    step = manager.latest_step()
    restored = manager.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(), trajectory=ocp.args.StandardRestore()))
  as_numpy = lambda tree: {k: np.asarray(v) for k, v in tree.items()}
  return step, as_numpy(restored["state"]), as_numpy(restored["trajectory"])
