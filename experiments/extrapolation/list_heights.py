"""Where ListOps answers fail: accuracy at each `]` by the closed list's height and level.

A `listops_depth` expression deeper than training is wrong at some `]`; two
causes predict different places. A list's *height* (1 for a list of digits,
1 + its highest argument list's otherwise) is how many nested evaluations its
value composes: a list higher than any trained asks the model for a longer
computation. Its *level* (0 for the outermost list, 1 inside it, ...) is how
deep it sits: a low list at a high level asks only for a known computation at
a position deeper than trained. Its *sibling* (the height of the highest list
closed before it inside the same enclosing list; 0 when none) says what the
model has just walked past: a list after a sibling higher than any trained
one asks for a known computation in a context that no training string had.
`test_depth` expressions have all three; the split's accuracy mixes them.

`close_labels` labels every `]` from the token ids; `score_run` scores a
trained run's predictions (the evaluation's argmax over the digits) on a
split, counted by `(height, level, sibling)`; `tables` reads many runs' counts
as per-kind accuracies, mean over seeds.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from bifocal_jax.evaluation import evaluate, probe
from bifocal_jax.evaluation import evaluator
from bifocal_jax import labelled_counts

LABELS = ("height", "level", "sibling")


def close_labels(inputs_BxL: np.ndarray, valid_BxL: np.ndarray,
                 vocab: probe.Brackets) -> dict[str, np.ndarray]:
  """Per position (`-1` but at a `]`): `height` of the list it closes (1: only
  digits inside), its `level` (lists around it: 0 for the outermost) and its
  `sibling` (the highest list closed before it in the same enclosing list: 0
  when none, -1 for the outermost), from the probes' stack over the token ids
  (`probe.nesting_labels`)."""
  labels = probe.nesting_labels(inputs_BxL, valid_BxL, vocab)
  closing = labels["height"] >= 0
  return dict(height=labels["height"], level=np.where(closing, labels["depth"], -1),
              sibling=labels["sibling"])


def count(correct_BxL: np.ndarray, labels: dict[str, np.ndarray]) -> dict[str, dict[str, int]]:
  """`{"h,l,s": {"correct": c, "total": n}}` over the labelled `]`, keyed by
  height, level and sibling (`labelled_counts.count`)."""
  return labelled_counts.count(correct_BxL, labels["height"] >= 0, labels, LABELS)


def score_run(run: evaluate.Run, split: str, *, num_examples: int | None = None) -> dict:
  """`count` of `run`'s correct answers at every `]` of the first
  `num_examples` of `split`, predicted as the evaluation predicts them."""
  setup = run.setup
  if setup.task.name != "listops_depth":
    raise ValueError(f"list_heights: task {setup.task.name!r} scores no list but the last "
                     "(needs listops_depth)")
  vocab = probe.brackets(setup.task)

  class_ids = jnp.asarray(evaluator.class_ids(setup.task))

  @jax.jit
  def predict(params, inputs, valid):
    logits = setup.model(params)(inputs, valid, rng=run.evaluator.rng, train=False)
    return class_ids[logits[..., class_ids].argmax(-1)]

  counts = {}
  with jax.set_mesh(setup.mesh):
    for batch in run.evaluator.split_batches(split, num_examples=num_examples):
      predicted = np.asarray(predict(run.params, batch["inputs"], batch["valid"]))
      correct = (predicted == batch["targets"]) & (batch["mask"] > 0)
      counts = labelled_counts.merge(
          counts, count(correct, close_labels(batch["inputs"], batch["valid"], vocab)))
  return counts


def tables(runs: dict[str, dict], d_train: int) -> dict:
  """Per kind, over `runs` (`{name: {"kind": k, "counts": count, ...}}`), each
  cell the mean of its runs' accuracies (`labelled_counts.over_seeds`): by
  height; at each trained height (<= `d_train`) by level; and, below the
  outermost list, by sibling."""
  grouped, (heights, levels, siblings) = labelled_counts.by_kind(runs, len(LABELS))
  siblings = [s for s in siblings if s != -1]
  trained = range(1, d_train + 1)

  def kind_tables(rs):
    over_seeds = labelled_counts.over_seeds
    by_level = lambda h, v: over_seeds(rs, lambda a, b, _: a == h and b == v)
    by_sibling = lambda h, s: over_seeds(rs, lambda a, _, c: a == h and c == s)
    return dict(
        by_height={h: over_seeds(rs, lambda a, *_, h=h: a == h) for h in heights},
        trained_heights_by_level={h: {
            v: by_level(h, v) for v in levels
        } for h in trained},
        trained_heights_by_sibling={h: {
            s: by_sibling(h, s) for s in siblings
        } for h in trained})

  return {kind: kind_tables(rs) for kind, rs in grouped.items()}
