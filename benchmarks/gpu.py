r"""Accelerator benchmark, one short call: the bf16 matmul peak, train-step MFU
at an accelerator-sized config, and the fused attention path.

  python -m benchmarks.gpu --out=results/benchmarks/gpu.json   # on a GPU (~2 min)
  python -m benchmarks.gpu --tiny                              # dry run, any backend

Sections (each reports its error instead of stopping the others):
  peak       a `size`^3 bfloat16 `jnp.dot` (float32 accumulation inside).
  train      `steps.make_train_step` on Dyck at width 1024, 16 heads (head
             dim 64), 8 layers, batch 64, 1024 tokens, bfloat16 compute, for
             position.kind bifocal and rope (timed interleaved: the bifocal
             overhead on an accelerator); MFU = model FLOPs per step / step
             time / the measured peak. Also checks that the compiled step
             calls cuDNN's fused attention.
  attention  forward and forward+backward of attention at [8, 4096, 16, 64]
             bf16, causal: `jax.nn.dot_product_attention` with
             implementation="cudnn" and "xla", and the project's `attend`.
  agreement  `kernels.attend` on this backend (cuDNN's kernel on a GPU) in
             bf16 with causal + padding masks, against float32 attention
             written out in jnp: relative errors of the output and of the
             q, k, v gradients (bf16 operands land between 1e-3 and 1e-2).
  long_eval  the evaluation step (`steps.make_eval_step`) of the default Dyck
             model in bfloat16 on one sequence of 1,024 to 16,384 tokens: time
             and the compiled program's device memory (arguments + outputs +
             temporaries, from XLA's memory analysis).
`--tiny` shrinks every size so the script runs anywhere in seconds (CPU
included; there the cuDNN entries are skipped). No test or CI job depends on
a GPU: `tests/benchmarks/test_benchmarks.py` runs `--tiny` on CPU.
"""

from __future__ import annotations

import sys
import time
import traceback

import jax
import jax.numpy as jnp
import numpy as np
from absl import flags

from bifocal_jax.nn import model as model_lib
from bifocal_jax.nn import kernels
from bifocal_jax.training import sharding
from bifocal_jax import tasks
from bifocal_jax.training import steps as steps_lib
from bifocal_jax.training import state as state_lib
from bifocal_jax.tasks import pipeline

from benchmarks import bench_util

_TINY = flags.DEFINE_bool("tiny", False, "Tiny sizes: a dry run on any backend.")
_ROUNDS = flags.DEFINE_integer("rounds", 5, "Timing rounds.", lower_bound=1)
_OUT = flags.DEFINE_string("out", None, "Write the results as JSON here.")
SECTIONS = ("peak", "train", "attention", "agreement", "long_eval")
_SECTIONS = flags.DEFINE_multi_enum("sections", list(SECTIONS), SECTIONS,
                                    "Sections to run (default: all).")

FULL = dict(peak_size=8192, d_model=1024, num_heads=16, num_layers=8, batch=64, length=1024,
            attention=(8, 4096, 16, 64), eval_lengths=(1024, 4096, 16384))
TINY = dict(peak_size=256, d_model=32, num_heads=2, num_layers=1, batch=2, length=32,
            attention=(1, 64, 2, 16), eval_lengths=(64, 256))
KINDS = ("bifocal", "rope")


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
  """Both position kinds compiled, then timed interleaved (same state shapes)."""
  length = sizes["length"]
  steps, out = {}, {}
  for kind in KINDS:
    c = accelerator_config(sizes)
    c.position.kind = kind
    task = tasks.get_task(c.task)
    mesh = sharding.make_mesh(c.mesh)
    with jax.set_mesh(mesh):
      s, state = state_lib.setup(c, mesh, task=task)
      batch_iter = iter(pipeline.train_dataset(
          task, batch_size_per_process=c.batch_size // jax.process_count(), seed=0,
          buckets=(length,)))
      batch = steps_lib.to_global_batch(next(batch_iter), mesh)
      start = time.perf_counter()
      compiled = steps_lib.make_train_step(s).lower(state, batch).compile()
      compile_seconds = time.perf_counter() - start
    box = [state]

    def step(compiled=compiled, box=box, batch=batch):
      box[0], metrics = compiled(box[0], batch)
      return metrics
    jax.block_until_ready(step())
    steps[kind] = step
    flops_per_step = model_lib.flops_per_token(
        c.model, vocab_size=task.vocab_size, seq_len=length) * c.batch_size * length
    out[kind] = dict(compile_seconds=compile_seconds, flops_per_step=flops_per_step,
                     fused_attention_in_step="cudnn" in compiled.as_text().lower())
  times = bench_util.interleave(steps, repeats=rounds, calls=5)
  for kind in KINDS:
    seconds = bench_util.median(times[kind]["wall"])
    out[kind].update(step_seconds=seconds, tokens_per_sec=c.batch_size * length / seconds,
                     mfu=out[kind]["flops_per_step"] / seconds / peak_flops if peak_flops else None)
  return dict(model=c.model.to_dict(), batch_size=c.batch_size, length=length,
              kinds=out, bifocal_over_rope=bench_util.median_ratio(
                  times["bifocal"]["wall"], times["rope"]["wall"]))


def bench_attention(sizes, rounds) -> dict:
  b, l, h, k = sizes["attention"]
  keys = jax.random.split(jax.random.key(0), 3)
  q, k_, v = (jax.random.normal(key, (b, l, h, k), jnp.bfloat16) for key in keys)
  positions = jnp.arange(l)[None]
  impls = {"ours": lambda q, k, v: kernels.attend(q, k, v, positions, causal=True)}
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
             cudnn_applies=kernels._cudnn_applies(q, None))  # pylint: disable=protected-access
  for name in candidates:
    seconds = bench_util.median(times[name]["wall"])
    flops = forward_flops * (3.5 if "backward" in name else 1.0)
    out[name] = dict(seconds=seconds, flops_per_sec=flops / seconds)
  return out


def check_agreement(sizes) -> dict:
  """`attend` in bf16 (masked, causal) against float32 maths: relative errors."""
  b, l, h, k = sizes["attention"]
  l = min(l, 1024)
  keys = jax.random.split(jax.random.key(1), 4)
  q, k_, v, d_out = (jax.random.normal(key, (b, l, h, k), jnp.float32) for key in keys)
  positions = jnp.arange(l)[None]
  lengths = jnp.maximum(l - 17 * jnp.arange(b), 1)  # right padding, one length per row
  valid = jnp.arange(l)[None, :] < lengths[:, None]
  # Padding queries carry no loss (their output gradient is zero in training);
  # cuDNN drops them, the float32 maths would let them reach dK and dV.
  weight = valid[:, :, None, None].astype(jnp.float32)
  d_out = d_out * weight

  def reference(q, k, v):
    with jax.default_matmul_precision("highest"):
      scores = jnp.einsum("bqhk,bshk->bhqs", q, k) / np.sqrt(k.shape[-1])
      mask = jnp.tril(jnp.ones((l, l), bool))[None, None] & valid[:, None, None, :]
      probs = jax.nn.softmax(jnp.where(mask, scores, -jnp.inf), axis=-1)
      return jnp.einsum("bhqs,bshk->bqhk", probs, v)

  def attend_bf16(q, k, v, valid_BxL):
    cast = lambda x: x.astype(jnp.bfloat16)
    return kernels.attend(cast(q), cast(k), cast(v), positions, valid_BxL,
                            causal=True).astype(jnp.float32)

  ours = lambda q, k, v: attend_bf16(q, k, v, valid)

  def with_grads(fn):
    out, vjp = jax.vjp(fn, q, k_, v)
    return (out, *vjp(d_out))

  # Rows past each sequence's end are padding: compare the valid queries (and keys) only.
  errors = {}
  for name, got, want in zip(("out", "dq", "dk", "dv"), jax.jit(lambda: with_grads(ours))(),
                             jax.jit(lambda: with_grads(reference))()):
    errors[name] = float(jnp.linalg.norm((got - want) * weight) / jnp.linalg.norm(want * weight))
  cudnn = kernels._cudnn_applies(q.astype(jnp.bfloat16), None)  # pylint: disable=protected-access
  # cuDNN takes padding as lengths: a mask with a hole must poison its row, not pass.
  out = jax.jit(attend_bf16)(q, k_, v, valid.at[0, 0].set(False))
  # A padding row (every token invalid, as `pad_rows` makes) must stay finite.
  out_empty = jax.jit(attend_bf16)(q, k_, v, valid.at[-1].set(False))
  return dict(shape=[b, l, h, k], cudnn_applies=cudnn, relative_errors=errors,
              within_bf16_tolerance=all(e < 2e-2 for e in errors.values()),
              holed_mask_row_nan=bool(jnp.isnan(out[0]).all()),
              other_rows_finite=bool(jnp.isfinite(out[1:] * weight[1:]).all()),
              padding_row_finite=bool(jnp.isfinite(out_empty).all()))


def bench_long_eval(sizes, rounds) -> dict:
  """One sequence per length through the eval step of the default Dyck model."""
  rows = []
  for length in sizes["eval_lengths"]:
    c = bench_util.load_config("configs/dyck.py")
    c.model.dtype = "bfloat16"
    mesh = sharding.make_mesh(c.mesh)
    with jax.set_mesh(mesh):
      eval_step, args = bench_util.long_eval_inputs(c, length, mesh)
      start = time.perf_counter()
      compiled = eval_step.lower(*args).compile()
      compile_seconds = time.perf_counter() - start
      memory = compiled.memory_analysis()
      run = lambda compiled=compiled, args=args: compiled(*args)
      jax.block_until_ready(run())
      seconds = bench_util.median(bench_util.interleave({"eval": run}, repeats=rounds)["eval"]["wall"])
    device_bytes = None
    if memory is not None:
      device_bytes = (memory.argument_size_in_bytes + memory.output_size_in_bytes
                      + memory.temp_size_in_bytes)
    rows.append(dict(length=length, seconds=seconds, tokens_per_sec=length / seconds,
                     compile_seconds=compile_seconds, device_mb=device_bytes and device_bytes / 2**20,
                     fused_attention="cudnn" in compiled.as_text().lower()))
  return dict(config="configs/dyck.py", dtype="bfloat16", rows=rows)


def main(argv):
  del argv
  sizes = TINY if _TINY.value else FULL
  results = dict(machine=bench_util.machine(), tiny=_TINY.value)
  wanted = set(_SECTIONS.value)
  run = lambda name, fn: section(results, name, fn) if name in wanted else None
  run("peak", lambda: bench_peak(sizes, _ROUNDS.value))
  peak = results.get("peak", {}).get("flops_per_sec")
  run("train", lambda: bench_train(sizes, _ROUNDS.value, peak))
  run("attention", lambda: bench_attention(sizes, _ROUNDS.value))
  run("agreement", lambda: check_agreement(sizes))
  run("long_eval", lambda: bench_long_eval(sizes, _ROUNDS.value))
  m = results["machine"]
  print(f"{m['device']} x{m['devices']} ({m['backend']}), jax {m['jax']}, {m['date']}")
  if peak:
    print(f"bf16 matmul peak ({sizes['peak_size']}^3): {peak / 1e12:.1f} TFLOP/s")
  ok = lambda name: name in results and "error" not in results[name]
  t = results.get("train")
  if ok("train"):
    for kind, k in t["kinds"].items():
      print(f"train step ({kind}) {t['model']['num_layers']}x{t['model']['d_model']}, "
            f"{t['model']['num_heads']} heads, batch {t['batch_size']} x {t['length']}: "
            f"{k['step_seconds'] * 1e3:.1f} ms, {k['tokens_per_sec']:,.0f} tokens/s, "
            f"MFU {k['mfu'] or 0:.1%} of the measured peak, compile {k['compile_seconds']:.0f} s, "
            f"fused attention in the step: {k['fused_attention_in_step']}")
    print(f"bifocal / rope step time: {t['bifocal_over_rope']:.3f} (median of interleaved rounds)")
  a = results.get("attention")
  if ok("attention"):
    rows = [[name, f"{a[name]['seconds'] * 1e3:.2f}", f"{a[name]['flops_per_sec'] / 1e12:.2f}"]
            for name in a if isinstance(a[name], dict)]
    print(f"attention {a['shape']} bf16 causal (cudnn applies: {a['cudnn_applies']})")
    print(bench_util.markdown_table(["implementation", "ms", "TFLOP/s"], rows))
  g = results.get("agreement")
  if ok("agreement"):
    print(f"attend vs float32 maths at {g['shape']} (cudnn: {g['cudnn_applies']}): relative errors "
          + ", ".join(f"{n} {x:.1e}" for n, x in g["relative_errors"].items())
          + f"; within bf16 tolerance: {g['within_bf16_tolerance']}; a mask with a hole gives a NaN "
          f"row: {g['holed_mask_row_nan']} (other rows finite: {g['other_rows_finite']}); a "
          f"padding row stays finite: {g['padding_row_finite']}")
  e = results.get("long_eval")
  if ok("long_eval"):
    print("long evaluation, default Dyck model in bf16, batch 1")
    print(bench_util.markdown_table(
        ["length", "ms", "tokens/s", "device MB", "fused attention", "compile s"],
        [[r["length"], f"{r['seconds'] * 1e3:.2f}", f"{r['tokens_per_sec']:,.0f}",
          f"{r['device_mb']:.0f}" if r["device_mb"] is not None else "n/a",
          r["fused_attention"], f"{r['compile_seconds']:.1f}"] for r in e["rows"]]))
  bench_util.write_json(_OUT.value, results)
  failed = [name for name in SECTIONS if name in results and not ok(name)]
  if ok("agreement"):
    if not g["within_bf16_tolerance"]:
      failed.append("agreement (tolerance)")
    if g["cudnn_applies"] and not g["holed_mask_row_nan"]:
      failed.append("agreement (a mask with a hole passed cuDNN's lengths)")
    if not g["padding_row_finite"]:
      failed.append("agreement (a padding row is not finite)")
  if failed:
    raise SystemExit(f"failed sections: {failed}")


if __name__ == "__main__":
  bench_util.run_main(main)
