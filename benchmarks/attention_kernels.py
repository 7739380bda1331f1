r"""Why the CPU attention backward sums over queries by broadcast-and-reduce.

The softmax-attention backward (`kernels.softmax_attention`) needs two
products that contract the query dimension, `dV = P^T dO` and
`dK = dS^T Q` (`P`, `dS`: `[B, H, Q, S]`). This times, interleaved in one run,
that contraction written as XLA dot kernels (`einsum`, with the transposes
that put the small operand first) against `kernels._sum_over_queries`
(a broadcast multiply and a sum over Q, one fused pass over `P`), and the
whole attention forward + backward with each, at the reference trainer's
shape and the larger benchmark configs.

  python -m benchmarks.attention_kernels
  python -m benchmarks.attention_kernels --out=results/benchmarks/attention_kernels.json
"""

from __future__ import annotations

from bifocal_jax import machine

machine.use_tuned_allocator()  # before JAX starts: see bifocal_jax/machine.py
# pylint: disable=g-import-not-at-top,wrong-import-position,wrong-import-order

import jax
import jax.numpy as jnp
import numpy as np
from absl import flags

from bifocal_jax.nn import kernels

from benchmarks import bench_util

# (batch, heads, length, head_dim): the reference trainer's layer (batch 128,
# 5x64 with 8 heads, 40 + 40 positions), the default dyck config's, the large
# step-benchmark config's (width 256, 8 heads, length 256), and wider heads.
SHAPES = ((128, 8, 80, 8), (32, 4, 128, 32), (16, 8, 256, 32), (16, 4, 256, 64))

_REPEATS = flags.DEFINE_integer("repeats", 15, "Interleaved repeats per shape.", lower_bound=1)
_SHAPES = flags.DEFINE_string("shapes", None, "B,H,L,K;... instead of the default shapes.")
_OUT = flags.DEFINE_string("out", None, "Write the results as JSON here.")


def _dots_over_queries(a, x):
  """`a^T x` as dot kernels: (x^T a)^T, the transposed operand the small one."""
  to_minor = lambda t: jnp.swapaxes(t, -1, -2)
  return to_minor(jnp.einsum("bhkq,bhqs->bhks", to_minor(x), a))


def _attention_with(sum_over_queries):
  """`softmax_attention` fwd+bwd with its query sums done by `sum_over_queries`."""
  @jax.custom_vjp
  def attend(q, k, v, bias):
    return kernels._softmax_attention_fwd(q, k, v, bias)[0]  # pylint: disable=protected-access

  def bwd(residuals, d_out):
    original = kernels._sum_over_queries  # pylint: disable=protected-access
    kernels._sum_over_queries = sum_over_queries  # pylint: disable=protected-access
    try:
      return kernels._softmax_attention_bwd(residuals, d_out)  # pylint: disable=protected-access
    finally:
      kernels._sum_over_queries = original  # pylint: disable=protected-access
  attend.defvjp(kernels._softmax_attention_fwd, bwd)  # pylint: disable=protected-access
  return attend


def measure(shape, repeats: int) -> dict:
  b, h, length, head_dim = shape
  keys = jax.random.split(jax.random.key(0), 4)
  p = jax.random.uniform(keys[0], (b, h, length, length))
  q, k, v = (jax.random.normal(key, (b, h, length, head_dim)) for key in keys[1:])
  bias = kernels._mask_bias(0, length, length, None, causal=True)  # pylint: disable=protected-access
  impls = {"dot": jax.jit(_dots_over_queries),
           "reduce": jax.jit(kernels._sum_over_queries)}  # pylint: disable=protected-access
  np.testing.assert_allclose(impls["dot"](p, q), impls["reduce"](p, q), rtol=1e-4, atol=1e-4)

  def grads(sum_over_queries):
    fn = _attention_with(sum_over_queries)
    return jax.jit(jax.grad(lambda q, k, v: jnp.sum(fn(q, k, v, bias) ** 2), argnums=(0, 1, 2)))
  layers = {"dot": grads(_dots_over_queries),
            "reduce": grads(kernels._sum_over_queries)}  # pylint: disable=protected-access
  candidates = {f"kernel {n}": (lambda f=f: f(p, q)) for n, f in impls.items()}
  candidates |= {f"attention {n}": (lambda f=f: f(q, k, v)) for n, f in layers.items()}
  for fn in candidates.values():  # compile outside the timing
    jax.block_until_ready(fn())
  t = bench_util.interleave(candidates, repeats=repeats, calls=3)
  wall = {name: t[name]["wall"] for name in candidates}
  return dict(
      shape=dict(batch=b, heads=h, length=length, head_dim=head_dim),
      seconds={name: bench_util.median(w) for name, w in wall.items()},
      kernel_dot_over_reduce=bench_util.median_ratio(wall["kernel dot"], wall["kernel reduce"]),
      attention_dot_over_reduce=bench_util.median_ratio(wall["attention dot"],
                                                        wall["attention reduce"]))


def main(argv):
  del argv
  shapes = SHAPES
  if _SHAPES.value:
    shapes = [tuple(int(d) for d in s.split(",")) for s in _SHAPES.value.split(";")]
  rows = [measure(shape, _REPEATS.value) for shape in shapes]
  m = bench_util.machine()
  print(f"{m['cpu']}, {m['cores']} cores, {m['date']}, load average {m['load_average']}")
  print(bench_util.markdown_table(
      ["B, H, L, K", "P^T X: dots ms", "reduce ms", "dots / reduce",
       "attention fwd+bwd: dots ms", "reduce ms", "dots / reduce"],
      [[", ".join(str(d) for d in r["shape"].values()),
        f"{1e3 * r['seconds']['kernel dot']:.2f}", f"{1e3 * r['seconds']['kernel reduce']:.2f}",
        f"{r['kernel_dot_over_reduce']:.2f}",
        f"{1e3 * r['seconds']['attention dot']:.1f}",
        f"{1e3 * r['seconds']['attention reduce']:.1f}",
        f"{r['attention_dot_over_reduce']:.2f}"] for r in rows]))
  bench_util.write_json(_OUT.value, dict(machine=m, rows=rows))


if __name__ == "__main__":
  bench_util.run_main(main)
