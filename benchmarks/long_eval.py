r"""Evaluation time and peak memory of long sequences, one length per process.

  python -m benchmarks.long_eval                                # 256 .. 16384
  python -m benchmarks.long_eval --lengths=256,1024 --out=/tmp/long.json
  python -m benchmarks.long_eval --config=configs/dyck.py --kind=rope

Each length runs in a fresh subprocess (so its peak resident memory is its
own): it builds the config's model (default: `configs/dyck.py`), compiles the
project's evaluation step (`steps.make_eval_step`: forward pass, loss and
accuracy counts) for one sequence of that length (random tokens; all valid),
runs it once to warm up, then times `--runs` runs. Reported per length: the
median evaluation time, tokens/s, peak RSS, and the RSS growth over the same
process just before compiling (the model, JAX and Python). On CPU, sequences
longer than `query_chunk` (1024) run in 256 x 256 blocks of queries and keys
(`kernels._blocked_attention`), so score memory is one tile per head:
linear in the length. On GPU the fused (cuDNN) attention is used where it
applies.

`peak_fraction`: the FLOPs a causal attention needs (half the `L x L`
products: `2 L^2 d_model` per layer for scores and values, times the layers)
over the evaluation's seconds, over the float32 matmul peak measured in the
same run (`bench_util.PEAK_SHAPES`, before and after the lengths; the faster).
It counts attention only, so it is a lower bound on the step's arithmetic
rate. (Against the kernel before issue #33: docs/performance.md, with the commit that
measured it.)
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time

import jax
import numpy as np
from absl import flags

from benchmarks import bench_util
from bifocal_jax.training import sharding

DEFAULT_LENGTHS = [256 * 2**i for i in range(7)]  # 256 .. 16384
_LENGTHS = flags.DEFINE_list("lengths", [str(n) for n in DEFAULT_LENGTHS], "Sequence lengths.")
_CONFIG = flags.DEFINE_string("config", "configs/dyck.py", "Training config file (its model).")
_KIND = flags.DEFINE_string("kind", "bifocal", "position.kind of the model.")
_RUNS = flags.DEFINE_integer("runs", 3, "Timed evaluations per length.", lower_bound=1)
_LIMIT_GB = flags.DEFINE_float("limit_gb", 8.0, "Peak RSS budget at the longest length.")
_WORKER = flags.DEFINE_integer("worker", 0, "Internal: evaluate this one length and print JSON.")
_OUT = flags.DEFINE_string("out", None, "Write the results as JSON here.")
_PEAK_REPEATS = flags.DEFINE_integer("peak_repeats", 5, "Interleaved repeats of the peak matmuls.")


def rss_mb() -> float:
  """Peak resident set size of this process so far (Linux: ru_maxrss in KiB)."""
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def evaluate_length(length: int, config_path: str, kind: str, runs: int) -> dict:
  config = bench_util.load_config(config_path)
  config.position.kind = kind
  mesh = sharding.make_mesh(config.mesh)
  with jax.set_mesh(mesh):
    eval_step, args = bench_util.long_eval_inputs(config, length, mesh)
    before = rss_mb()
    start = time.perf_counter()
    compiled = eval_step.lower(*args).compile()
    compile_seconds = time.perf_counter() - start
    jax.block_until_ready(compiled(*args))
    seconds = []
    for _ in range(runs):
      start = time.perf_counter()
      jax.block_until_ready(compiled(*args))
      seconds.append(time.perf_counter() - start)
  peak = rss_mb()
  return dict(length=length, seconds=bench_util.median(seconds),
              tokens_per_sec=length / bench_util.median(seconds), compile_seconds=compile_seconds,
              peak_rss_mb=peak, rss_before_compile_mb=before, rss_growth_mb=peak - before,
              backend=jax.default_backend(),
              attention_flops=causal_attention_flops(config, length))


def causal_attention_flops(config, length: int) -> float:
  """FLOPs of a causal attention over one sequence: half of the `L x L` score
  and value products (`2 * 2 * L^2 * d` each in full), every layer."""
  heads, head_dim = config.model.num_heads, config.model.d_model // config.model.num_heads
  return 2.0 * length * length * heads * head_dim * config.model.num_layers


def run_length(length: int, config_path: str, kind: str, runs: int) -> dict:
  cmd = [sys.executable, "-m", "benchmarks.long_eval", f"--worker={length}",
         f"--config={config_path}", f"--kind={kind}", f"--runs={runs}"]
  out = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=bench_util.REPO)
  row = json.loads(out.stdout.strip().splitlines()[-1])
  print(f"length {length}: {row['seconds']:.3f} s, peak RSS {row['peak_rss_mb']:.0f} MB",
        flush=True)
  return row


def growth_per_token(rows: list[dict]) -> float:
  """Least-squares slope of RSS growth (MB) against length, over the rows."""
  lengths = np.array([r["length"] for r in rows], float)
  growth = np.array([r["rss_growth_mb"] for r in rows], float)
  return float(np.polyfit(lengths, growth, 1)[0]) if len(rows) > 1 else float("nan")


def main(argv):
  del argv
  if _WORKER.value:
    print(json.dumps(evaluate_length(_WORKER.value, _CONFIG.value, _KIND.value, _RUNS.value)))
    return
  machine = bench_util.machine()
  peaks = [bench_util.measure_peak(_PEAK_REPEATS.value)]
  rows = [run_length(int(n), _CONFIG.value, _KIND.value, _RUNS.value) for n in _LENGTHS.value]
  peaks.append(bench_util.measure_peak(_PEAK_REPEATS.value))
  peak = max(peaks)
  for row in rows:
    row["peak_fraction"] = row["attention_flops"] / row["seconds"] / peak
  config = bench_util.load_config(_CONFIG.value)
  print(f"{machine['cpu']}, {machine['cores']} cores, {machine['backend']}, {machine['date']}, "
        f"load average {machine['load_average']} -> {bench_util.load_average()}")
  print(f"{_CONFIG.value} ({config.model.num_layers} layers, width {config.model.d_model}, "
        f"{config.model.num_heads} heads), {_KIND.value}, batch 1, evaluation step; float32 "
        f"matmul peak {peak / 1e9:.1f} GFLOP/s (before / after the lengths: "
        f"{' / '.join(f'{p / 1e9:.1f}' for p in peaks)})")
  header = ["length", "eval s", "tokens/s", "peak fraction", "peak RSS MB", "RSS growth MB",
            "compile s"]
  table = [[r["length"], f"{r['seconds']:.3f}", f"{r['tokens_per_sec']:,.0f}",
            f"{r['peak_fraction']:.1%}", f"{r['peak_rss_mb']:.0f}", f"{r['rss_growth_mb']:.0f}",
            f"{r['compile_seconds']:.1f}"] for r in rows]
  print(bench_util.markdown_table(header, table))
  slope = growth_per_token(rows)
  longest = rows[-1]
  within = longest["peak_rss_mb"] <= _LIMIT_GB.value * 1024
  print(f"RSS growth ~{slope * 1024:.1f} KB per token (linear fit); longest "
        f"({longest['length']}): {longest['peak_rss_mb'] / 1024:.2f} GB peak, "
        f"{'within' if within else 'OVER'} {_LIMIT_GB.value:g} GB")
  bench_util.write_json(_OUT.value, dict(machine=machine, config=_CONFIG.value, kind=_KIND.value,
                                         rows=rows,
                                         peak_flops_per_sec=peak, peak_flops_per_sec_runs=peaks,
                                         load_average_end=bench_util.load_average(),
                                         rss_growth_mb_per_token=slope))


if __name__ == "__main__":
  bench_util.run_main(main)
