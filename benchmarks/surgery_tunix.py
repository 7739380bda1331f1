"""What Surgical Integration costs on tunix models: train and decode steps, converted / original.

For each tiny tunix model (Gemma 3, Llama 3), an original and a converted copy
(`surgery.spectralize`, per-KV-head spectra) with the same weights are timed in
one process, interleaved (original, converted, original, ...): a train step
(forward, backward, AdamW, with `optim.spectral_evolution` for both: the
original simply has no spectral group) and a one-token decode step on tunix's
KV cache. The ratios are medians of the per-round ratios.

    python -m benchmarks.surgery_tunix --rounds=15 --out=results/benchmarks/surgery_tunix.json
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl import flags
from flax import nnx

from benchmarks import bench_util
from bifocal_jax.nn import optim
from bifocal_jax import surgery
from bifocal_jax.surgery import tunix_models

flags.DEFINE_integer("rounds", 15, "Interleaved rounds.")
flags.DEFINE_integer("calls", 3, "Train steps timed per round and candidate.")
flags.DEFINE_integer("decode_calls", 30, "Decode steps timed per round and candidate.")
flags.DEFINE_boolean("tiny", False, "Smallest sizes (a dry run for the tests).")
flags.DEFINE_list("families", ["gemma3", "llama3"], "tunix model families to measure.")
flags.DEFINE_string("out", None, "JSON output path.")
FLAGS = flags.FLAGS


def build(family: str, tiny: bool):
  """A tiny tunix model with random weights (numpy-initialised: no init program to compile)."""
  module = tunix_models.import_model(family)
  width, layers, vocab = (32, 2, 64) if tiny else (256, 4, 1024)
  common = dict(embed_dim=width, hidden_dim=4 * width, num_heads=4, head_dim=width // 4,
                num_kv_heads=2, num_layers=layers)
  if family == "gemma3":
    config = module.ModelConfig(num_embed=vocab, sliding_window_size=64,
                                param_dtype=jnp.float32, **common)
    make = lambda: module.Gemma3(config, rngs=nnx.Rngs(0))
  else:
    config = module.ModelConfig(vocab_size=vocab, rope_theta=500_000, norm_eps=1e-6, **common)
    make = lambda: module.Llama3(config, rngs=nnx.Rngs(0))
  model = nnx.eval_shape(make)
  rng = np.random.default_rng(0)
  nnx.update(model, jax.tree.map(
      lambda a: jnp.asarray(rng.normal(scale=0.05, size=a.shape), a.dtype), nnx.state(model)))
  return model, config, vocab


def train_step(model, batch):
  """`run()` does one AdamW step on `batch` (state donated and carried)."""
  tx = optim.spectral_evolution(optax.adamw(1e-3), spectral_learning_rate=1e-2)
  graphdef, state = nnx.split((model, nnx.Optimizer(model, tx, wrt=nnx.Param)))
  tokens, positions, mask = batch

  def step(state):
    model, optimizer = nnx.merge(graphdef, state)

    def loss_fn(model):
      logits = model(tokens, positions, None, mask)[0]
      return optax.softmax_cross_entropy_with_integer_labels(logits[:, :-1], tokens[:, 1:]).mean()

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return nnx.state((model, optimizer)), loss

  step = jax.jit(step, donate_argnums=0)
  holder = [jax.tree.map(jnp.copy, state)]  # its own buffers: they are donated

  def run():
    holder[0], loss = step(holder[0])
    return loss

  return run, step


def decode_step(model, config, batch_size: int, cache_size: int):
  """`run()` decodes one token at position `cache_size // 2` with a KV cache of `cache_size`."""
  graphdef, state = nnx.split(model)
  layers = config.num_layers
  cache = {f"layer_{i}": dict(
      k=jnp.ones((batch_size, cache_size, config.num_kv_heads, config.head_dim)),
      v=jnp.ones((batch_size, cache_size, config.num_kv_heads, config.head_dim)),
      end_index=jnp.full((batch_size,), cache_size // 2, jnp.int32)) for i in range(layers)}
  token = jnp.ones((batch_size, 1), jnp.int32)
  position = jnp.full((batch_size, 1), cache_size // 2, jnp.int32)
  mask = (jnp.arange(cache_size) <= cache_size // 2)[None, None].repeat(batch_size, 0)

  @jax.jit
  def step(state, cache):
    logits, cache = nnx.merge(graphdef, state)(token, position, cache, mask)
    return logits, cache

  return lambda: step(state, cache)[0], step


def measure(family: str, *, tiny: bool, rounds: int, calls: int, decode_calls: int) -> dict:
  original, config, vocab = build(family, tiny)
  converted = nnx.merge(*nnx.split(original))  # same weights, another object
  assert surgery.spectralize(converted) == config.num_layers
  batch_size, length = (2, 16) if tiny else (4, 128)
  rng = np.random.default_rng(1)
  tokens = jnp.asarray(rng.integers(0, vocab, (batch_size, length)), jnp.int32)
  positions = jnp.broadcast_to(jnp.arange(length)[None], (batch_size, length))
  mask = jnp.broadcast_to(jnp.tril(jnp.ones((length, length), bool))[None],
                          (batch_size, length, length))
  candidates = {}
  for name, model in (("original", original), ("converted", converted)):
    candidates[f"{name} train"], _ = train_step(model, (tokens, positions, mask))
    candidates[f"{name} decode"], _ = decode_step(model, config, batch_size, 2 * length)
  for fn in candidates.values():  # compile and warm up
    jax.block_until_ready(fn())
  times = bench_util.interleave(candidates, repeats=rounds, calls={
      name: decode_calls if "decode" in name else calls for name in candidates})
  result = dict(config=dict(family=family, layers=config.num_layers, width=config.embed_dim,
                            heads=4, kv_heads=2, head_dim=config.head_dim, vocab=vocab,
                            batch=batch_size, length=length, decode_cache=2 * length),
                seconds={name: bench_util.median(t["wall"]) for name, t in times.items()})
  for kind in ("train", "decode"):
    result[f"{kind}_ratio"] = bench_util.median_ratio(
        times[f"converted {kind}"]["wall"], times[f"original {kind}"]["wall"])
    result[f"{kind}_ratio_cpu"] = bench_util.median_ratio(
        times[f"converted {kind}"]["cpu"], times[f"original {kind}"]["cpu"])
  return result


def main(argv):
  del argv
  results = dict(machine=bench_util.machine(), rounds=FLAGS.rounds, calls=FLAGS.calls,
                 decode_calls=FLAGS.decode_calls,
                 results=[measure(family, tiny=FLAGS.tiny, rounds=FLAGS.rounds, calls=FLAGS.calls,
                                  decode_calls=FLAGS.decode_calls)
                          for family in FLAGS.families])
  results["machine_after"] = bench_util.load_average()
  rows = [[r["config"]["family"], f"{r['seconds']['original train'] * 1e3:.2f}",
           f"{r['train_ratio']:.3f}", f"{r['seconds']['original decode'] * 1e3:.3f}",
           f"{r['decode_ratio']:.3f}"] for r in results["results"]]
  print(bench_util.markdown_table(
      ["model", "train ms", "converted / original", "decode ms", "converted / original"], rows))
  bench_util.write_json(FLAGS.out, results)


if __name__ == "__main__":
  bench_util.run_main(main)
