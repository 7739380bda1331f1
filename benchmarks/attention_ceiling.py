r"""How close to the matmul peak can CPU attention get at a given head size?

Long evaluation (`benchmarks/long_eval.py`) runs causal attention in blocks of
`kernels.BLOCK` queries and keys (`kernels._blocked_attention`). Each block
pair is three XLA:CPU kernels at least: the score product `q k^T`
(contraction `head_dim`), the softmax's exponentials (with the row max and
sum: one fused elementwise pass), and the value product `e v` (contraction
the block). The arithmetic that counts is the two products,
`4 H block^2 head_dim` FLOPs. This times each part alone, interleaved in one
process, and the real blocked kernel (non-causal, `--blocks`^2 block pairs,
per pair), at the default Dyck model's heads (4) and each of `--head_dims`,
batch 1, against the float32 matmul peak measured in the same run.

Reported per head size, as fractions of the peak:
  score_product, value_product   each product alone;
  ceiling_without_softmax        the two products at their own speeds;
  ceiling                        the three parts at their own speeds, nothing
                                 else: what any kernel built from them can reach;
  blocked                        `_blocked_attention`'s block pair as it runs.

  python -m benchmarks.attention_ceiling
  python -m benchmarks.attention_ceiling --out=results/benchmarks/attention_ceiling.json
  python -m benchmarks.attention_ceiling --block=32 --head_dims=8 --peak_scale=0.05  # tests
"""

from __future__ import annotations


import jax
import jax.numpy as jnp
from absl import app, flags

from bifocal_jax.nn import kernels

from benchmarks import bench_util

_HEAD_DIMS = flags.DEFINE_list("head_dims", ["16", "32", "64"],
                               "Head sizes (the default Dyck model's is 16).")
_HEADS = flags.DEFINE_integer("heads", 4, "Heads (the default Dyck model's).", lower_bound=1)
_BLOCK = flags.DEFINE_integer("block", kernels.BLOCK, "Queries and keys per block.",
                              lower_bound=8)
_BLOCKS = flags.DEFINE_integer("blocks", 4, "The blocked kernel's sequence, in blocks.",
                               lower_bound=2)
_REPEATS = flags.DEFINE_integer("repeats", 7, "Interleaved timing repeats.", lower_bound=1)
_CALLS = flags.DEFINE_integer("calls", 20, "Calls per timed repeat of each part.", lower_bound=1)
_PEAK_SCALE = flags.DEFINE_float("peak_scale", 1.0, "Scale of the peak matmuls' sizes.")
_OUT = flags.DEFINE_string("out", None, "Write the results as JSON here.")


def parts(heads: int, block: int, head_dim: int, blocks: int) -> dict:
  """`{name: fn}` to time, each warmed up: the block pair's three kernels, and
  the blocked kernel over `blocks`^2 pairs (its time divides by that)."""
  keys = jax.random.split(jax.random.key(0), 3)
  q, k, v = (jax.random.normal(key, (1, heads, block, head_dim), jnp.float32) for key in keys)
  scores = jnp.einsum("bhqk,bhsk->bhqs", q, k)

  score_product = jax.jit(lambda q, k: jnp.einsum("bhqk,bhsk->bhqs", q, k))

  @jax.jit
  def softmax_exponentials(s):  # as `_blocked_attention` computes them per block
    e = jnp.exp(s - jnp.max(s, axis=-1, keepdims=True))
    return e, jnp.sum(e, axis=-1, keepdims=True)

  value_product = jax.jit(lambda e, v: jnp.einsum("bhqs,bhsk->bhqk", e, v))
  length = blocks * block
  qs, ks, vs = (jax.random.normal(key, (1, heads, length, head_dim), jnp.float32)
                for key in jax.random.split(jax.random.key(1), 3))
  positions = jnp.arange(length)[None]
  blocked = jax.jit(lambda q, k, v: kernels._blocked_attention(  # pylint: disable=protected-access
      q, k, v, positions, None, causal=False, bias_fn=None, block=block))
  fns = {
      "score_product": lambda: score_product(q, k),
      "softmax_exponentials": lambda: softmax_exponentials(scores),
      "value_product": lambda: value_product(scores, v),
      "blocked": lambda: blocked(qs, ks, vs),
  }
  for fn in fns.values():
    jax.block_until_ready(fn())
  return fns


def measure(heads: int, block: int, head_dim: int, blocks: int, peak: float, repeats: int,
            calls: int) -> dict:
  fns = parts(heads, block, head_dim, blocks)
  times = bench_util.interleave(fns, repeats=repeats,
                                calls={n: (1 if n == "blocked" else calls) for n in fns})
  seconds = {n: bench_util.median(t["wall"]) for n, t in times.items()}
  seconds["blocked"] /= blocks**2  # per block pair
  flops = 4.0 * heads * block**2 * head_dim  # both products of one block pair
  half = flops / 2
  three = seconds["score_product"] + seconds["softmax_exponentials"] + seconds["value_product"]
  return dict(
      head_dim=head_dim, heads=heads, block=block, flops_per_pair=flops,
      seconds=seconds,
      score_product=half / seconds["score_product"] / peak,
      value_product=half / seconds["value_product"] / peak,
      ceiling_without_softmax=flops / (seconds["score_product"] + seconds["value_product"]) / peak,
      ceiling=flops / three / peak,
      blocked=flops / seconds["blocked"] / peak)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments {argv[1:]}")
  head_dims = [int(d) for d in _HEAD_DIMS.value]
  peak = bench_util.measure_peak(_REPEATS.value, _PEAK_SCALE.value)
  rows = [
      measure(_HEADS.value, _BLOCK.value, d, _BLOCKS.value, peak, _REPEATS.value, _CALLS.value)
      for d in head_dims
  ]
  results = dict(machine=bench_util.machine(), peak_flops_per_sec=peak, rows=rows)
  print(
      bench_util.markdown_table(
          ["head_dim", "score product", "value product", "softmax (us)", "ceiling w/o softmax",
           "ceiling", "blocked"],
          [[
              r["head_dim"], f"{r['score_product']:.0%}", f"{r['value_product']:.0%}",
              f"{r['seconds']['softmax_exponentials'] * 1e6:.0f}",
              f"{r['ceiling_without_softmax']:.0%}", f"{r['ceiling']:.0%}", f"{r['blocked']:.0%}"
          ] for r in rows]))
  print(f"peak {peak / 1e9:.1f} GFLOP/s")
  bench_util.write_json(_OUT.value, results)


if __name__ == "__main__":
  bench_util.run_main(main)
