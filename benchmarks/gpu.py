r"""Accelerator benchmark, one short call: the bf16 matmul peak, train-step MFU
at an accelerator-sized config, and the fused attention path.

  python benchmarks/gpu.py --out=benchmarks/results/gpu.json   # on a GPU (~2 min)
  python benchmarks/gpu.py --tiny                              # dry run, any backend

Sections (each reports its error instead of stopping the others):
  peak       a `size`^3 bfloat16 `jnp.dot` (float32 accumulation inside).
  train      `train.make_train_step` on Dyck at width 1024, 16 heads (head
             dim 64), 8 layers, batch 64, 1024 tokens, bfloat16 compute;
             MFU = model FLOPs per step / step time / the measured peak. Also
             checks that the compiled step calls cuDNN's fused attention.
  attention  forward and forward+backward of attention at [8, 4096, 16, 64]
             bf16, causal: `jax.nn.dot_product_attention` with
             implementation="cudnn" and "xla", and the project's `attend`.
`--tiny` shrinks every size so the script runs anywhere in seconds (CPU
included; there the cuDNN entries are skipped). No test or CI job depends on
a GPU: `tests/test_benchmarks.py` runs `--tiny` on CPU.
"""

from __future__ import annotations

import os
import sys
import time
import traceback

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags

from bifocal_jax import attention, model as model_lib
from bifocal_jax import sharding, tasks, train
from bifocal_jax.tasks import pipeline

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_util  # pylint: disable=g-import-not-at-top,wrong-import-position

_TINY = flags.DEFINE_bool("tiny", False, "Tiny sizes: a dry run on any backend.")
_ROUNDS = flags.DEFINE_integer("rounds", 5, "Timing rounds.", lower_bound=1)
_OUT = flags.DEFINE_string("out", None, "Write the results as JSON here.")

FULL = dict(peak_size=8192, d_model=1024, num_heads=16, num_layers=8, batch=64, length=1024,
            attention=(8, 4096, 16, 64))
TINY = dict(peak_size=256, d_model=32, num_heads=2, num_layers=1, batch=2, length=32,
            attention=(1, 64, 2, 16))


def section(results: dict, name: str, fn):
  try:
    results[name] = fn()
  except Exception as e:  # pylint: disable=broad-except
    results[name] = dict(error=f"{type(e).__name__}: {e}", traceback=traceback.format_exc())
    print(f"{name}: FAILED {results[name]['error']}", file=sys.stderr)


def bench_peak(sizes, rounds) -> dict:
  fn, flops = bench_util.matmul(sizes["peak_size"], dtype=jnp.bfloat16)
  times = bench_util.interleave({"peak": fn}, repeats=rounds, calls=3)
  seconds = bench_util.median(times["peak"]["wall"])
  return dict(size=sizes["peak_size"], seconds=seconds, flops_per_sec=flops / seconds)


def accelerator_config(sizes):
  c = bench_util.load_config("configs/dyck.py", "paper")
  c.model.d_model, c.model.num_heads = sizes["d_model"], sizes["num_heads"]
  c.model.num_layers, c.model.dtype = sizes["num_layers"], "bfloat16"
  c.batch_size = sizes["batch"]
  length = sizes["length"]
  c.task.train.min_length, c.task.train.max_length = length - length // 16, length
  c.task.valid.max_length = length
  c.task.test_length.min_length, c.task.test_length.max_length = length + 1, 2 * length
  c.task.test_depth.max_length = max(c.task.test_depth.max_length, length)
  c.buckets = (length,)
  return c


def bench_train(sizes, rounds, peak_flops) -> dict:
  c = accelerator_config(sizes)
  task = tasks.get_task(c.task)
  mesh = sharding.make_mesh(c.mesh)
  length = sizes["length"]
  with jax.set_mesh(mesh):
    s, state = train.setup(c, mesh, task=task)
    batch_iter = iter(pipeline.train_dataset(task, batch_size_per_process=c.batch_size // jax.process_count(),
                                             seed=0, buckets=(length,)))
    batch = train.to_global_batch(next(batch_iter), mesh)
    start = time.perf_counter()
    compiled = train.make_train_step(s).lower(state, batch).compile()
    compile_seconds = time.perf_counter() - start
    uses_cudnn = "cudnn" in compiled.as_text().lower()
    box = [state]

    def step():
      box[0], metrics = compiled(box[0], batch)
      return metrics
    jax.block_until_ready(step())
    times = bench_util.interleave({"step": step}, repeats=rounds, calls=3)
  seconds = bench_util.median(times["step"]["wall"])
  flops = model_lib.flops_per_token(c.model, vocab_size=task.vocab_size, seq_len=length)
  flops_per_step = flops * c.batch_size * length
  return dict(model=c.model.to_dict(), batch_size=c.batch_size, length=length,
              compile_seconds=compile_seconds, step_seconds=seconds,
              tokens_per_sec=c.batch_size * length / seconds, flops_per_step=flops_per_step,
              mfu=flops_per_step / seconds / peak_flops if peak_flops else None,
              fused_attention_in_step=uses_cudnn)


def bench_attention(sizes, rounds) -> dict:
  b, l, h, k = sizes["attention"]
  keys = jax.random.split(jax.random.key(0), 3)
  q, k_, v = (jax.random.normal(key, (b, l, h, k), jnp.bfloat16) for key in keys)
  positions = jnp.arange(l)[None]
  impls = {"ours": lambda q, k, v: attention.attend(q, k, v, positions, causal=True)}
  for impl in ("xla", "cudnn"):
    if impl == "cudnn" and jax.default_backend() != "gpu":
      continue
    impls[impl] = lambda q, k, v, impl=impl: jax.nn.dot_product_attention(
        q, k, v, is_causal=True, implementation=impl)
  candidates = {}
  for name, fn in impls.items():
    fwd = jax.jit(fn)
    bwd = jax.jit(jax.grad(lambda q, k, v, fn=fn: jnp.sum(fn(q, k, v).astype(jnp.float32)),
                           argnums=(0, 1, 2)))
    candidates[f"{name} forward"] = lambda fwd=fwd: fwd(q, k_, v)
    candidates[f"{name} forward+backward"] = lambda bwd=bwd: bwd(q, k_, v)
  for fn in candidates.values():
    jax.block_until_ready(fn())
  times = bench_util.interleave(candidates, repeats=rounds, calls=3)
  # Causal attention FLOPs: QK^T and PV, halved by the mask; backward = 2.5x forward.
  forward_flops = 2 * 2 * b * h * l * l * k / 2
  out = dict(shape=[b, l, h, k], dtype="bfloat16", causal=True,
             cudnn_applies=attention._cudnn_applies(q, None))  # pylint: disable=protected-access
  for name in candidates:
    seconds = bench_util.median(times[name]["wall"])
    flops = forward_flops * (3.5 if "backward" in name else 1.0)
    out[name] = dict(seconds=seconds, flops_per_sec=flops / seconds)
  return out


def main(argv):
  del argv
  sizes = TINY if _TINY.value else FULL
  results = dict(machine=bench_util.machine(), tiny=_TINY.value)
  section(results, "peak", lambda: bench_peak(sizes, _ROUNDS.value))
  peak = results["peak"].get("flops_per_sec")
  section(results, "train", lambda: bench_train(sizes, _ROUNDS.value, peak))
  section(results, "attention", lambda: bench_attention(sizes, _ROUNDS.value))
  m = results["machine"]
  print(f"{m['device']} x{m['devices']} ({m['backend']}), jax {m['jax']}, {m['date']}")
  if peak:
    print(f"bf16 matmul peak ({sizes['peak_size']}^3): {peak / 1e12:.1f} TFLOP/s")
  t = results["train"]
  if "error" not in t:
    print(f"train step {t['model']['num_layers']}x{t['model']['d_model']}, "
          f"{t['model']['num_heads']} heads, batch {t['batch_size']} x {t['length']}: "
          f"{t['step_seconds'] * 1e3:.1f} ms, {t['tokens_per_sec']:,.0f} tokens/s, "
          f"MFU {t['mfu'] or 0:.1%} of the measured peak, compile {t['compile_seconds']:.0f} s, "
          f"fused attention in the step: {t['fused_attention_in_step']}")
  a = results["attention"]
  if "error" not in a:
    rows = [[name, f"{a[name]['seconds'] * 1e3:.2f}", f"{a[name]['flops_per_sec'] / 1e12:.2f}"]
            for name in a if isinstance(a[name], dict)]
    print(f"attention {a['shape']} bf16 causal (cudnn applies: {a['cudnn_applies']})")
    print(bench_util.markdown_table(["implementation", "ms", "TFLOP/s"], rows))
  bench_util.write_json(_OUT.value, results)
  failed = [name for name in ("peak", "train", "attention") if "error" in results[name]]
  if failed:
    raise SystemExit(f"failed sections: {failed}")


if __name__ == "__main__":
  app.run(main)
