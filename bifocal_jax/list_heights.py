"""Where ListOps answers fail: accuracy at each `]` by the closed list's height and level.

A `listops_depth` expression deeper than training is wrong at some `]`; two
causes predict different places. A list's *height* (1 for a list of digits,
1 + its highest argument list's otherwise) is how many nested evaluations its
value composes: a list higher than any trained asks the model for a longer
computation. Its *level* (0 for the outermost list, 1 inside it, ...) is how
deep it sits: a low list at a high level asks only for a known computation at
a position deeper than trained. `test_depth` expressions have both; the
split's accuracy mixes them.

`close_labels` labels every `]` from the token ids; `score_run` scores a
trained run's predictions (the evaluation's argmax over the digits) on a
split, counted by `(height, level)`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from bifocal_jax import evaluate, probe


def close_labels(inputs_BxL: np.ndarray, valid_BxL: np.ndarray,
                 vocab: probe.Brackets) -> dict[str, np.ndarray]:
  """Per position (`-1` but at a `]`): `height` of the list it closes (1: only
  digits inside) and its `level` (lists around it: 0 for the outermost), from
  the probes' stack over the token ids (`probe.nesting_labels`)."""
  labels = probe.nesting_labels(inputs_BxL, valid_BxL, vocab)
  closing = labels["height"] >= 0
  return dict(height=labels["height"], level=np.where(closing, labels["depth"], -1))


def count(correct_BxL: np.ndarray, labels: dict[str, np.ndarray]) -> dict[str, dict[str, int]]:
  """`{"h,l": {"correct": c, "total": n}}` over the labelled `]`."""
  scored = labels["height"] >= 0
  keys = np.stack([labels["height"][scored], labels["level"][scored]], axis=1)
  hits = np.asarray(correct_BxL)[scored]
  out = {}
  for key in np.unique(keys, axis=0):
    sel = (keys == key).all(1)
    out[f"{key[0]},{key[1]}"] = dict(correct=int(hits[sel].sum()), total=int(sel.sum()))
  return out


def merge(a: dict, b: dict) -> dict:
  """Two `count`s added."""
  out = {k: dict(v) for k, v in a.items()}
  for k, v in b.items():
    mine = out.setdefault(k, dict(correct=0, total=0))
    mine["correct"] += v["correct"]
    mine["total"] += v["total"]
  return out


def score_run(run: evaluate.Run, split: str, *, num_examples: int | None = None) -> dict:
  """`count` of `run`'s correct answers at every `]` of the first
  `num_examples` of `split`, predicted as the evaluation predicts them."""
  setup = run.setup
  if setup.task.name != "listops_depth":
    raise ValueError(f"list_heights: task {setup.task.name!r} scores no list but the last "
                     "(needs listops_depth)")
  vocab = probe.brackets(setup.task)

  class_ids = jnp.asarray(evaluate.class_ids(setup.task))

  @jax.jit
  def predict(params, inputs, valid):
    logits = setup.model(params)(inputs, valid, rng=run.evaluator.rng, train=False)
    return class_ids[logits[..., class_ids].argmax(-1)]

  counts = {}
  with jax.set_mesh(setup.mesh):
    for batch in run.evaluator.split_batches(split, num_examples=num_examples):
      predicted = np.asarray(predict(run.params, batch["inputs"], batch["valid"]))
      correct = (predicted == batch["targets"]) & (batch["mask"] > 0)
      counts = merge(counts, count(correct, close_labels(batch["inputs"], batch["valid"], vocab)))
  return counts
