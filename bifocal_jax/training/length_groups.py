"""Length groups: a batch's rows trained in groups of similar length, each
padded to its own bucket, with the loss and gradient of the one padded batch.

A batch of mixed lengths is padded to its longest row. `listops_depth`'s
training strings average 32 tokens, but nearly every batch holds one near
the longest (100): two thirds of what the plain step computes is padding
(Dyck's: half). With `config.data.length_groups = k` the pipeline
(`tasks/pipeline.py`) sorts the global batch's rows by length and cuts them
into k equal groups, each padded to the smallest bucket that holds its
longest row; `TrainStep` trains on them:

  acc = 0; for each group g:  acc += the group's gradient of its summed
      masked cross-entropy, that sum, its mask weight, accuracy counts
                                                            (`accumulate`)
  gradient = acc / max(batch mask weight, 1), loss likewise; then the plain
  step's optimizer update, non-finite guard and Spectral Evolution record
  (`steps.apply_gradients`, `steps.finish_step`)             (`apply`)

The batch's token mean is the plain step's loss, so the update is the plain
step's up to float rounding for every position kind that draws nothing
(tested for each); the kinds that draw positions (the randomized ones) draw
each group's from the step's key folded with the group index: each row's
positions keep their distribution (a uniform subset for its own length,
whatever the padding), and a draw shared by a batch (randomized ALiBi's) is
shared by a group. `accumulate` compiles once per group width (at most once
per length bucket, as the plain step), `apply` once. Populations pad their
members to one width and take no groups (config validation says so).

Besides the padding, smaller groups run faster per row where a whole
batch's activations outgrow the caches (the 5-layer model, batch 128); the
2-layer Dyck step gains nothing, its groups' extra dispatches costing what
the padding saved, and stays one padded batch (the step times: docs/performance.md,
Performance, "Length groups").
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from bifocal_jax.training import metrics as metrics_lib
from bifocal_jax.training import sharding as sharding_lib
from bifocal_jax.training import steps
from bifocal_jax.training.state import Setup

_SUM_DTYPES = dict(loss_sum=jnp.float32, loss_weight=jnp.float32, token_correct=jnp.int32,
                   token_total=jnp.int32)


def group_terms(s: Setup, params, batch, rng):
  """`(summed masked cross-entropy, (its weight, correct, total tokens))` of one group."""
  logits = s.model(params)(batch["inputs"], batch["valid"], rng=rng, train=True)
  total, weight = metrics_lib.masked_cross_entropy_sum(logits, batch["targets"], batch["loss_mask"])
  counts = metrics_lib.accuracy_counts(logits, batch["targets"], batch["mask"])
  return total, (weight, counts["token_correct"].sum(), counts["token_total"].sum())


def accumulate(s: Setup, base_key, acc, params, step, batch, group):
  """`acc` plus group `group`'s gradient and sums (its key: the step's, folded with `group`)."""
  rng = jax.random.fold_in(jax.random.fold_in(base_key, step), group)
  fn = lambda p: group_terms(s, p, batch, rng)
  (total, (weight, correct, count)), grads = jax.value_and_grad(fn, has_aux=True)(params)
  sums = dict(loss_sum=total, loss_weight=weight, token_correct=correct, token_total=count)
  return dict(grads=jax.tree.map(jnp.add, acc["grads"], grads),
              sums={k: acc["sums"][k] + sums[k].astype(_SUM_DTYPES[k]) for k in _SUM_DTYPES})


def apply(s: Setup, state, acc):
  """The step from the accumulated groups: `(new state, step metrics)`, as `steps.train_step`."""
  sums = acc["sums"]
  denominator = jnp.maximum(sums["loss_weight"], 1.0)
  grads = jax.tree.map(lambda g: g / denominator, acc["grads"])
  metrics = dict(loss=sums["loss_sum"] / denominator, loss_weight=sums["loss_weight"],
                 token_correct=sums["token_correct"], token_total=sums["token_total"])
  params, opt_state, metrics = steps.apply_gradients(s, state, grads, metrics)
  return steps.finish_step(s, state, params, opt_state, metrics)


def zeros(params) -> dict:
  """The empty accumulator: zero gradients shaped as `params`, zero sums."""
  return dict(grads=jax.tree.map(jnp.zeros_like, params), sums={
      k: jnp.zeros((), d) for k, d in _SUM_DTYPES.items()
  })


class TrainStep:
  """`state, metrics = step(state, groups)` on a tuple of global group
  batches (`steps.to_global_batch` of the pipeline's tuple): what
  `steps.make_train_step`'s step is to one padded batch."""

  def __init__(self, s: Setup):
    self.setup = s
    base_key = jax.random.key(s.config.seed)
    replicated = sharding_lib.replicated(s.mesh)
    params = s.state_shardings["params"]
    acc = dict(grads=params, sums={k: replicated for k in _SUM_DTYPES})
    options = steps.compiler_options()
    self.zeros = jax.jit(zeros, out_shardings=acc)
    self.accumulate = jax.jit(
        lambda *args: accumulate(s, base_key, *args),
        in_shardings=(acc, params, replicated, sharding_lib.batch_sharding(s.mesh), replicated),
        out_shardings=acc, donate_argnums=(0,), compiler_options=options)
    self.apply = jax.jit(lambda state, acc: apply(s, state, acc),
                         in_shardings=(s.state_shardings, acc),
                         out_shardings=(s.state_shardings, replicated), donate_argnums=(0,),
                         compiler_options=options)
    if jax.process_count() > 1:  # every process compiles a new shape before any runs it
      self.accumulate = sharding_lib.compile_ahead(self.accumulate, "accumulate")
      self.apply = sharding_lib.compile_ahead(self.apply, "apply")

  def __call__(self, state, groups: tuple[dict, ...]):
    acc = self.zeros(state["params"])
    for index, batch in enumerate(groups):
      acc = self.accumulate(acc, state["params"], state["step"], batch, np.int32(index))
    return self.apply(state, acc)

  def compile_jobs(self, widths) -> dict:
    """`steps.compile_in_parallel` jobs: `accumulate` at each group width, and `apply`."""
    s = self.setup
    params = s.abstract_state["params"]
    acc = jax.eval_shape(zeros, params)
    step = jax.ShapeDtypeStruct((), jnp.int32)
    rows = s.config.batch_size // s.config.data.length_groups
    jobs = {
        ("accumulate", w): (self.accumulate, (acc, params, step,
                                              steps.abstract_train_batch(rows, w, s.mesh),
                                              jax.ShapeDtypeStruct((), jnp.int32))) for w in widths
    }
    jobs[("apply",)] = (self.apply, (s.abstract_state, acc))
    return jobs

  def use_compiled(self, compiled: dict) -> None:
    """Runs the executables of `compile_in_parallel(self.compile_jobs(...))`
    (other widths compile when first seen)."""
    self.accumulate = steps.Precompiled(
        self.accumulate, {
            key[1]: c[0] for key, c in compiled.items() if key[0] == "accumulate"
        }, key_fn=lambda acc, params, step, batch, group: batch["inputs"].shape[1])
    if ("apply",) in compiled:
      self.apply = steps.Precompiled(self.apply, {(): compiled[("apply",)][0]},
                                     key_fn=lambda state, acc: ())
