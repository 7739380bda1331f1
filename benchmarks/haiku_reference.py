r"""The Chomsky-hierarchy trainer's loop, rebuilt in Haiku: a smoke stand-in.

NOT the reference. `reference_trainer.py --reference_checkout=DIR` runs
DeepMind's own trainer (Deletang et al. 2023,
github.com/google-deepmind/neural_networks_chomsky_hierarchy) from a checkout
(`original_trainer.py`), and that is the comparison of record. This
re-implementation, written from reading their model and training loop, stands
in for it where no checkout can be had (CI has no network): it keeps the
comparison's plumbing tested at smoke size. It is not a measure of their
speed (on 2026-11-30 it ran at 11.6k tokens/s at length 40, where the
original ran faster). What it does:

  * data: each step draws an input length n uniformly in 1..40 and samples
    a batch of 128 random binary strings of that length with a jitted
    sampler (one compilation per length); targets are the odd-index symbols
    followed by the even-index ones, one-hot;
  * model (their `make_transformer_encoder` with `make_model_with_empty_targets`):
    the one-hot input tape followed by n "empty" tokens (3 channels), a linear
    embedding (no bias) scaled by sqrt(64), their sin/cos position encodings,
    dropout 0.1, then 5 post-LayerNorm encoder blocks (8 heads of 8, no mask,
    q/k/v/output projections without bias, ReLU MLP of width 256, dropout
    after attention and MLP) and a linear read-out of the last n positions;
  * step: softmax cross-entropy summed over output positions and averaged over
    the batch, the accuracy, global-norm clipping at 1 and Adam(1e-3), in one
    `jax.jit` whose shapes change with n (one compilation per length); the
    host reads the loss every `log_every` steps.

  python -m benchmarks.haiku_reference --out=/tmp/haiku.json   # 2,000 steps
  python -m benchmarks.haiku_reference --steps=100 --fixed_steps=20

Needs `dm-haiku` (in requirements.txt, for this script only).
"""

from __future__ import annotations

import time

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl import app, flags

from benchmarks import bench_util

FLAGS = flags.FLAGS

VOCAB = 2  # binary strings, as in their paper


def sample_batch(rng, batch_size: int, length: int) -> dict[str, jax.Array]:
  symbols_BxN = jax.random.randint(rng, (batch_size, length), 0, VOCAB)
  one_hot = jax.nn.one_hot(symbols_BxN, VOCAB)
  return {"input": one_hot,
          "output": jnp.concatenate([one_hot[:, 1::2], one_hot[:, ::2]], axis=1)}


def sin_cos_encoding(length: int, width: int) -> np.ndarray:
  """Their encoder's table: positions counted down from `length` to 1."""
  inv_freq = 1e4 ** (-np.arange(0, width, 2) / width)
  angles = np.arange(length, 0, -1.0)[:, None] * inv_freq[None, :]
  return np.concatenate([np.sin(angles), np.cos(angles)], axis=-1)


def encoder_logits(x_BxNxV, *, width: int, layers: int, heads: int, dropout: float):
  """Logits `[B, n, VOCAB]` for the n empty positions after the input tape."""
  batch, n, _ = x_BxNxV.shape
  tape = jnp.concatenate([
      jnp.pad(x_BxNxV, ((0, 0), (0, 0), (0, 1))),              # input symbols, 3 channels
      jax.nn.one_hot(jnp.full((batch, n), VOCAB), VOCAB + 1)],  # n empty output cells
                         axis=1)
  drop = lambda h: hk.dropout(hk.next_rng_key(), dropout, h)  # training only, as timed
  embed_init = hk.initializers.TruncatedNormal(stddev=0.02)
  h = hk.Linear(width, with_bias=False, w_init=embed_init)(tape) * np.sqrt(width)
  h = drop(h + sin_cos_encoding(2 * n, width))
  head_dim = width // heads
  for _ in range(layers):
    split = lambda t: t.reshape(batch, 2 * n, heads, head_dim)
    q, k, v = (split(hk.Linear(width, with_bias=False)(h)) for _ in range(3))
    scores = jnp.einsum("bthd,bshd->bhts", q, k) / np.sqrt(head_dim)
    attended = jnp.einsum("bhts,bshd->bthd", jax.nn.softmax(scores), v)
    attended = hk.Linear(width, with_bias=False)(attended.reshape(batch, 2 * n, width))
    a = hk.LayerNorm(axis=-1, create_scale=True, create_offset=True)(h + drop(attended))
    mlp = hk.Linear(width)(jax.nn.relu(hk.Linear(4 * width)(a)))
    h = hk.LayerNorm(axis=-1, create_scale=True, create_offset=True)(a + drop(mlp))
  return hk.Linear(VOCAB)(h)[:, -n:]


def make_update(model: hk.Transformed, optimizer: optax.GradientTransformation):

  def loss_fn(params, rng, batch):
    logits = model.apply(params, rng, batch["input"])
    loss = jnp.mean(jnp.sum(optax.softmax_cross_entropy(logits, batch["output"]), axis=-1))
    accuracy = jnp.mean(jnp.argmax(logits, -1) == jnp.argmax(batch["output"], -1))
    return loss, accuracy

  @jax.jit
  def update(params, opt_state, rng, batch):
    (loss, accuracy), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, rng, batch)
    updates, opt_state = optimizer.update(grads, opt_state)
    return optax.apply_updates(params, updates), opt_state, (loss, accuracy)

  return update


def run(steps: int, *, fixed_steps: int = 10, smoke: bool = False, log_every: int = 100,
        seed: int = 0, lengths=None) -> dict:
  """`lengths`: the input length of each step (default: drawn uniformly in 1..40)."""
  width, layers, heads, batch_size, max_length = (16, 1, 2, 8, 4) if smoke else (64, 5, 8, 128, 40)
  start = time.perf_counter()
  model = hk.transform(lambda x: encoder_logits(x, width=width, layers=layers, heads=heads,
                                                dropout=0.1))
  optimizer = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(1e-3))
  sampler = jax.jit(sample_batch, static_argnums=(1, 2))
  update = make_update(model, optimizer)
  if lengths is None:
    lengths = np.random.default_rng(seed).integers(1, max_length + 1, steps)
  lengths = np.asarray(lengths)
  if len(lengths) != steps or lengths.min() < 1 or lengths.max() > max_length:
    raise ValueError(f"need {steps} input lengths in 1..{max_length}")
  keys = iter(jax.random.split(jax.random.key(seed), 2 * steps + fixed_steps + 8))
  params = model.init(next(keys), sampler(next(keys), batch_size, 10)["input"])
  opt_state = optimizer.init(params)
  jax.block_until_ready(opt_state)
  setup_done = time.perf_counter()
  first_call_seconds, losses = {}, []
  for step, n in enumerate(lengths):
    call = time.perf_counter()
    batch = sampler(next(keys), batch_size, int(n))
    params, opt_state, (loss, _) = update(params, opt_state, next(keys), batch)
    if int(n) not in first_call_seconds:  # compilation happens inside the call
      first_call_seconds[int(n)] = time.perf_counter() - call
    if step % log_every == 0 or step == steps - 1:
      losses.append(float(loss))
  end = time.perf_counter()
  fixed_batch = sampler(next(keys), batch_size, max_length)
  params, opt_state, (loss, _) = update(params, opt_state, next(keys), fixed_batch)
  jax.block_until_ready(loss)
  fixed_start = time.perf_counter()
  for _ in range(fixed_steps):
    params, opt_state, (loss, _) = update(params, opt_state, next(keys), fixed_batch)
  jax.block_until_ready(loss)
  fixed_seconds = (time.perf_counter() - fixed_start) / max(fixed_steps, 1)
  tokens = int(2 * lengths.sum()) * batch_size  # input + output tape, as ours counts
  return dict(
      machine=bench_util.machine(), steps=steps, batch_size=batch_size, max_input_length=max_length,
      model=dict(d_model=width, num_layers=layers, num_heads=heads, mlp_dim=4 * width),
      haiku=hk.__version__, compilations=len(first_call_seconds),
      setup_seconds=setup_done - start, loop_seconds=end - setup_done,
      end_to_end_seconds=end - start, tokens=tokens, tokens_per_sec=tokens / (end - setup_done),
      first_call_seconds_sum=sum(first_call_seconds.values()),
      fixed_length_tokens_per_sec=(batch_size * 2 * max_length / fixed_seconds
                                   if fixed_steps else None),
      first_loss=losses[0], last_loss=losses[-1])


def main(argv):
  del argv
  r = run(FLAGS.steps, fixed_steps=FLAGS.fixed_steps, smoke=FLAGS.smoke)
  m = r["machine"]
  print(f"{m['cpu']}, {m['cores']} cores, {m['date']}, load average {m['load_average']}")
  print(f"Haiku rebuild of their odds_first run: {r['steps']} steps, batch {r['batch_size']}, "
        f"lengths 1..{r['max_input_length']}, {r['compilations']} lengths met")
  print(f"end-to-end {r['end_to_end_seconds']:.0f} s = setup {r['setup_seconds']:.1f} s + loop "
        f"{r['loop_seconds']:.1f} s (first calls at new lengths, compilation included: "
        f"{r['first_call_seconds_sum']:.1f} s)")
  print(f"loop {r['tokens_per_sec']:,.0f} tokens/s; fixed length {r['max_input_length']}: "
        f"{r['fixed_length_tokens_per_sec'] or 0:,.0f} tokens/s; loss {r['first_loss']:.3f} -> "
        f"{r['last_loss']:.3f}")
  bench_util.write_json(FLAGS.out, r)


if __name__ == "__main__":
  # Defined here, not at import: reference_trainer.py imports this module and
  # has flags of the same names.
  flags.DEFINE_integer("steps", 2000, "Training steps.", lower_bound=1)
  flags.DEFINE_integer("fixed_steps", 10, "Steps timed afterwards at the fixed input length 40.",
                       lower_bound=0)
  flags.DEFINE_bool("smoke", False, "Tiny model and lengths (tests: seconds).")
  flags.DEFINE_string("out", None, "Write the results as JSON here.")
  app.run(main)
