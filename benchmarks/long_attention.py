r"""One long causal `attend` (CPU): the blocked kernel at several block sizes.

  python -m benchmarks.long_attention --length=4096 --blocks=128,256,512
  python -m benchmarks.long_attention --length=16384 --blocks=256,512 --rounds=3

Operands `[batch, length, heads, head_dim]` (default: the `configs/dyck.py`
model's 4 heads of 16), random, causal, in-order positions. Candidates:
`kernels.attend` with `kernels.BLOCK` set to each block size (`query_chunk`
1,024, so the blocked path runs). Compiled once each, then interleaved
`--rounds` times; reported: median CPU and wall time, the CPU-time speedup
over the first block size (median of per-round ratios: CPU time is less
disturbed by a loaded machine), compile time, and the largest difference from
the first block size's output. (Against the kernel before issue #33: the
docs/performance.md, with the commit that measured it.)
"""

from __future__ import annotations

import os
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags

from bifocal_jax.nn import kernels

_LENGTH = flags.DEFINE_integer("length", 4096, "Sequence length.")
_BATCH = flags.DEFINE_integer("batch", 1, "Batch size.")
_HEADS = flags.DEFINE_integer("heads", 4, "Heads.")
_HEAD_DIM = flags.DEFINE_integer("head_dim", 16, "Head dimension.")
_BLOCKS = flags.DEFINE_list("blocks", ["128", "256", "512"], "kernels.BLOCK values.")
_ROUNDS = flags.DEFINE_integer("rounds", 5, "Interleaved rounds.", lower_bound=1)


def candidate(block: int):
  def fn(q, k, v):
    positions = jnp.arange(q.shape[1])[None]
    kernels.BLOCK = block  # read at trace time
    return kernels.attend(q, k, v, positions, causal=True)
  return fn


def main(argv):
  del argv
  shape = (_BATCH.value, _LENGTH.value, _HEADS.value, _HEAD_DIM.value)
  rng = np.random.default_rng(0)
  q, k, v = (jnp.asarray(rng.standard_normal(shape), jnp.float32) for _ in range(3))
  names = {f"block {b}": int(b) for b in _BLOCKS.value}
  first = next(iter(names))
  compiled, reference = {}, None
  for name, block in names.items():
    start = time.perf_counter()
    exe = jax.jit(candidate(block)).lower(q, k, v).compile()
    out = np.asarray(exe(q, k, v))
    reference = out if reference is None else reference
    compiled[name] = (exe, time.perf_counter() - start, float(np.abs(out - reference).max()))
  cpu, wall = {n: [] for n in names}, {n: [] for n in names}
  for _ in range(_ROUNDS.value):
    for name, (exe, _, _) in compiled.items():
      c, w = time.process_time(), time.perf_counter()
      jax.block_until_ready(exe(q, k, v))
      cpu[name].append(time.process_time() - c)
      wall[name].append(time.perf_counter() - w)
  flops = 2.0 * shape[0] * shape[2] * shape[1]**2 * shape[3]  # causal: half of 4 B H L^2 K
  print(f"{shape}, causal, load average {os.getloadavg()}")
  for name, (_, compile_seconds, err) in compiled.items():
    speedup = np.median([a / b for a, b in zip(cpu[first], cpu[name])])
    print(f"{name:10s} cpu {np.median(cpu[name]) * 1e3:8.1f} ms  wall {np.median(wall[name]) * 1e3:8.1f} "
          f"ms  {flops / np.median(wall[name]) / 1e9:6.1f} GFLOP/s (wall)  speedup (cpu) "
          f"{speedup:5.2f}x  compile {compile_seconds:.1f} s  max |diff| {err:.1e}")


if __name__ == "__main__":
  app.run(main)
