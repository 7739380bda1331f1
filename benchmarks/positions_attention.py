r"""The data-dependent attention functions (`bifocal_jax/nn/positions/`) against `kernels.attend`.

Times, interleaved in one run, forward + backward at the Dyck training size
(batch 32, length 100, 4 heads, head_dim 16; gradients for q, k, v and each
scheme's per-token inputs), and the evaluation forward of one 5,133-token
string (the published `k8_m20.test`'s longest) in query chunks of 1024, with
the compiled program's temporary memory (XLA's `memory_analysis`) next to
what one `L x L` float32 score matrix per head would take.

  python -m benchmarks.positions_attention
  python -m benchmarks.positions_attention --out=results/benchmarks/positions_attention.json
"""

from __future__ import annotations

from bifocal_jax import machine

machine.use_tuned_allocator()  # before JAX starts: see bifocal_jax/machine.py
# pylint: disable=g-import-not-at-top,wrong-import-position,wrong-import-order

import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import flags
from flax import nnx

from bifocal_jax.nn import kernels
from bifocal_jax.nn.positions import cope, fope, fox, path, stickbreaking

from benchmarks import bench_util

_REPEATS = flags.DEFINE_integer("repeats", 7, "Interleaved repeats (training size).", lower_bound=1)
_EVAL_REPEATS = flags.DEFINE_integer("eval_repeats", 2, "Repeats of the long evaluation.",
                                     lower_bound=1)
_EVAL_LENGTH = flags.DEFINE_integer("eval_length", 5133, "The evaluation length.")
_OUT = flags.DEFINE_string("out", None, "Write the results as JSON here.")

TRAIN_SHAPE = (32, 100, 4, 16)  # batch, length, heads, head_dim
QUERY_CHUNK = 1024


def _inputs(batch, length, heads, head_dim, seed=0):
  keys = jax.random.split(jax.random.key(seed), 6)
  q, k, v = (jax.random.normal(key, (batch, length, heads, head_dim)) for key in keys[:3])
  return dict(q=q, k=k, v=v, fgate=jax.random.normal(keys[3], (batch, length, heads)),
              w=jax.random.normal(keys[4], (batch, length, heads, head_dim)),
              beta=jax.random.normal(keys[5], (batch, length, heads)))


def schemes(head_dim: int, heads: int, npos: int):
  """name -> fn(tokens, query_chunk): each scheme's attention on per-token inputs."""
  pos_emb = 0.1 * jax.random.normal(jax.random.key(1), (head_dim, npos))
  fope_layer = fope.FoPE(num_heads=heads, head_dim=head_dim, max_sequence_length=npos - 1,
                         rngs=nnx.Rngs(0))
  fope_args = dict(frequencies_P=fope_layer.frequencies[...],
                   sin_coef_HxPxO=fope_layer.sin_coef_HxPxO[...],
                   cos_coef_HxPxO=fope_layer.cos_coef_HxPxO[...])

  def positions(t):
    return jnp.arange(t["q"].shape[1])[None]

  return {
      "attend":
          lambda t, c: kernels.attend(t["q"], t["k"], t["v"], positions(t), causal=True,
                                        query_chunk=c),
      "cope":
          lambda t, c: cope.cope_attention(t["q"], t["k"], t["v"], None, pos_emb_KxP=pos_emb, causal
                                           =True, query_chunk=c),
      "fox":
          lambda t, c: fox.fox_attention(t["q"], t["k"], t["v"], None, log_fgate_BxLxH=jax.nn.
                                         log_sigmoid(t["fgate"]), query_chunk=c),
      "stickbreaking":
          lambda t, c: stickbreaking.stickbreaking_attention(t["q"], t["k"], t["v"], None,
                                                             query_chunk=c),
      "path":
          lambda t, c: path.path_attention(
              t["q"], t["k"], t["v"], None, w_BxLxHxK=t["w"] * jax.lax.rsqrt(
                  jnp.sum(t["w"]**2, -1, keepdims=True)), beta_BxLxH=2 * jax.nn.sigmoid(t["beta"]),
              query_chunk=c),
      "fope":
          lambda t, c: fope.fope_attention(t["q"], t["k"], t["v"], positions(t), causal=True,
                                           query_chunk=c, **fope_args),
  }


def train_step_times(repeats: int) -> dict:
  b, length, h, d = TRAIN_SHAPE
  tokens = _inputs(b, length, h, d)
  fns = schemes(d, h, npos=length + 1)
  steps = {
      name: jax.jit(jax.grad(lambda t, fn=fn: jnp.sum(jnp.sin(fn(t, QUERY_CHUNK)))))
      for name, fn in fns.items()
  }
  candidates = {name: (lambda s=s: s(tokens)) for name, s in steps.items()}
  for fn in candidates.values():  # compile outside the timing
    jax.block_until_ready(fn())
  t = bench_util.interleave(candidates, repeats=repeats, calls=3)
  wall = {name: t[name]["wall"] for name in candidates}
  return {
      name:
          dict(ms=1e3 * bench_util.median(w), vs_attend=bench_util.median_ratio(w, wall["attend"]))
      for name, w in wall.items()
  }


def eval_costs(length: int, repeats: int) -> dict:
  _, train_length, h, d = TRAIN_SHAPE
  tokens = _inputs(1, length, h, d)
  rows = {}
  for name, fn in schemes(d, h, npos=train_length + 1).items():
    compiled = jax.jit(lambda t, fn=fn: fn(t, QUERY_CHUNK)).lower(tokens).compile()
    memory = compiled.memory_analysis()
    jax.block_until_ready(compiled(tokens))
    seconds = []
    for _ in range(repeats):
      start = time.perf_counter()
      jax.block_until_ready(compiled(tokens))
      seconds.append(time.perf_counter() - start)
    rows[name] = dict(seconds=float(np.median(seconds)),
                      temp_mib=memory.temp_size_in_bytes / 2**20 if memory else None)
  return rows


def main(argv):
  del argv
  train = train_step_times(_REPEATS.value)
  evaluation = eval_costs(_EVAL_LENGTH.value, _EVAL_REPEATS.value)
  m = bench_util.machine()
  length, heads = _EVAL_LENGTH.value, TRAIN_SHAPE[2]
  full_scores_mib = heads * length * length * 4 / 2**20
  print(f"{m['cpu']}, {m['cores']} cores, {m['date']}, load average {m['load_average']}")
  print(f"fwd+bwd at B, L, H, K = {TRAIN_SHAPE}; evaluation at L = {length} (batch 1, query chunk "
        f"{QUERY_CHUNK}; one L x L float32 score matrix for {heads} heads = "
        f"{full_scores_mib:.0f} MiB)")
  print(
      bench_util.markdown_table(
          ["kind", "fwd+bwd ms", "/ attend", f"eval L={length} s", "eval temp MiB"], [[
              name, f"{r['ms']:.1f}", f"{r['vs_attend']:.2f}", f"{evaluation[name]['seconds']:.2f}",
              "?" if evaluation[name]["temp_mib"] is None else f"{evaluation[name]['temp_mib']:.0f}"
          ] for name, r in train.items()]))
  bench_util.write_json(
      _OUT.value,
      dict(machine=m, train_shape=TRAIN_SHAPE, train=train, eval_length=length,
           evaluation=evaluation, full_scores_mib=full_scores_mib))


if __name__ == "__main__":
  bench_util.run_main(main)
