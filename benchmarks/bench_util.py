"""Shared pieces of the benchmark scripts: the machine, timing, reporting.

CPU figures on a shared machine are noisy, so every comparison here is made
inside one run: the candidates are interleaved (A, B, A, B, ...), each
repeat times a few calls, and a ratio is the median of the per-repeat ratios.
Each timing records wall time and this process's CPU time; the load average
is recorded with the results.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import platform
import statistics
import time
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from bifocal_jax.cli import markdown_table, run_main, write_json  # noqa: F401  (the commands' main, their output)
from bifocal_jax import configs  # pylint: disable=g-import-not-at-top,wrong-import-position
from bifocal_jax.training import state
from bifocal_jax import tasks
from bifocal_jax.training import steps as steps_lib


def machine() -> dict:
  """What the figures were measured on, and when."""
  cpu = platform.processor() or platform.machine()
  try:
    with open("/proc/cpuinfo") as f:
      names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
    cpu = names[0] if names else cpu
  except OSError:
    pass
  device = jax.devices()[0]
  return dict(
      date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
      cpu=cpu, cores=os.cpu_count(), backend=jax.default_backend(),
      device=getattr(device, "device_kind", str(device)), devices=jax.device_count(),
      jax=jax.__version__, load_average=load_average())


def load_average() -> tuple[float, float, float] | None:
  try:
    return tuple(round(x, 2) for x in os.getloadavg())
  except OSError:
    return None


def matmul(m: int, k: int | None = None, n: int | None = None,
           dtype=jnp.float32) -> tuple[Callable[[], jax.Array], float]:
  """(a jitted `[m, k] @ [k, n]` matmul to time, its FLOPs); k, n default to m."""
  k, n = k or m, n or m
  a = jax.random.normal(jax.random.key(0), (m, k), dtype)
  b = jax.random.normal(jax.random.key(1), (k, n), dtype)
  dot = jax.jit(lambda a, b: jnp.dot(a, b, preferred_element_type=dtype))
  jax.block_until_ready(dot(a, b))
  return (lambda: dot(a, b)), 2.0 * m * k * n


# The matmul peak is the fastest of these large matmuls (XLA:CPU runs the
# square one ~25% slower than the tall one, whose blocks fit the caches).
PEAK_SHAPES = {"square": (2048, 2048, 2048), "tall": (8192, 256, 1024)}


def peak_candidates(scale: float = 1.0, dtype=jnp.float32) -> dict[str, tuple[Callable, float]]:
  """`{name: (fn, flops)}` of `PEAK_SHAPES`, each dimension times `scale`."""
  return {f"peak {name}": matmul(*(max(8, int(d * scale)) for d in shape), dtype=dtype)
          for name, shape in PEAK_SHAPES.items()}


def measure_peak(repeats: int, scale: float = 1.0) -> float:
  """FLOP/s of the faster of the peak matmuls (`peak_candidates`; median over
  interleaved repeats)."""
  candidates = peak_candidates(scale)
  times = interleave({n: fn for n, (fn, _) in candidates.items()}, repeats=repeats, calls=3)
  return max(flops / median(times[n]["wall"]) for n, (_, flops) in candidates.items())


def interleave(candidates: dict[str, Callable[[], object]], *, repeats: int,
               calls: dict[str, int] | int = 1) -> dict[str, dict[str, list[float]]]:
  """Seconds per call of each candidate, `repeats` times, interleaved.

  `calls` (per candidate or for all) is how many calls one repeat times; a
  candidate returns what to block on (its last result). Returns
  `{name: {"wall": [...], "cpu": [...]}}`.
  """
  out = {name: {"wall": [], "cpu": []} for name in candidates}
  for _ in range(repeats):
    for name, fn in candidates.items():
      n = calls[name] if isinstance(calls, dict) else calls
      wall, cpu = time.perf_counter(), time.process_time()
      for _ in range(n):
        result = fn()
      jax.block_until_ready(result)
      out[name]["wall"].append((time.perf_counter() - wall) / n)
      out[name]["cpu"].append((time.process_time() - cpu) / n)
  return out


@contextlib.contextmanager
def replaced(owner, name: str, value, enabled: bool = True):
  """`owner.name` is `value` inside (when `enabled`), restored afterwards: a
  before/after variant of a project function for the models traced inside."""
  if not enabled:
    yield
    return
  current = getattr(owner, name)
  setattr(owner, name, value)
  try:
    yield
  finally:
    setattr(owner, name, current)


def median(xs) -> float:
  return float(statistics.median(xs))


def median_ratio(a: list[float], b: list[float]) -> float:
  """Median over repeats of a[i] / b[i] (both timed in the same repeat)."""
  return median([x / y for x, y in zip(a, b, strict=True)])


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def long_eval_inputs(config, length: int, mesh):
  """The evaluation step of `config`'s model and its arguments for one
  sequence of `length` random tokens, all valid: `(eval_step, (params, batch,
  rng))`. Call inside `jax.set_mesh(mesh)`."""
  task = tasks.get_task(config.task)
  s, train_state = state.setup(config, mesh, task=task)
  tokens = np.random.default_rng(length).integers(1, task.vocab_size, (1, length)).astype(np.int32)
  batch = steps_lib.to_global_batch(dict(
      inputs=tokens, targets=np.roll(tokens, -1, axis=1),
      mask=np.ones((1, length), np.float32), loss_mask=np.ones((1, length), np.float32),
      valid=np.ones((1, length), bool),
      length=np.array([length], np.int32), depth=np.zeros((1,), np.int32)), mesh,
      steps_lib.EVAL_FIELDS)
  return steps_lib.make_eval_step(s), (train_state["params"], batch, jax.random.key(0))


def load_config(path: str, arg: str | None = None):
  """`get_config(arg)` of a config file (path relative to the repository)."""
  return configs.load_file(os.path.join(REPO, path), arg)
