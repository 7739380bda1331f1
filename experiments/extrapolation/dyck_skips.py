"""Where Dyck answers fail: closing-bracket accuracy by depth and by the pairs
just walked past.

After each token of a Dyck string the model names the bracket that closes the
innermost open one (Yao et al.'s score, `metrics.close_correct`). Past the
training depth `m` two things at a position can be new to the model: its
*depth* (brackets open after the token), and its *skipped* height: the
height of the highest pair closed so far directly inside the innermost open
bracket, i.e. what lies between that bracket and the token the model reads.
Training strings are at most `m` deep, so a pair inside an open bracket is at
most `m - 1` high there; a `test_depth` string (depths `m+1..2m`) has both
deeper positions and higher skipped pairs, and its accuracy mixes them.
`by_skipped_at_trained_depths` holds depth within training, so a fall there is
the skipped pairs' alone.

`position_labels` labels every position from the token ids (the probes'
stack, `probe.nesting_labels`); `score_run` counts a trained run's correct
positions on a split by `(depth, skipped)` (`labelled_counts`); `tables` reads
many runs' counts as per-kind accuracies, mean over seeds. `walk_back` says how
far back the innermost open bracket is at each skipped height: a long string
can skip a pair of trained height yet need a longer look back, or not.
"""

from __future__ import annotations

from collections.abc import Iterable

import jax
import jax.numpy as jnp
import numpy as np

from bifocal_jax.evaluation import evaluate, probe
from bifocal_jax import labelled_counts
from bifocal_jax.training import metrics

LABELS = ("depth", "skipped")


def position_labels(inputs_BxL: np.ndarray, valid_BxL: np.ndarray,
                    vocab: probe.Brackets) -> dict[str, np.ndarray]:
  """Per position, after its token: `depth` (brackets open; 0 on padding) and
  `skipped` (the highest pair closed so far inside the innermost open bracket:
  0 when none yet, -1 when none is open)."""
  labels = probe.nesting_labels(inputs_BxL, valid_BxL, vocab)
  return {k: labels[k] for k in LABELS}


def score_run(run: evaluate.Run, split: str, *, num_examples: int | None = None) -> dict:
  """`labelled_counts.count` of `run`'s Yao-correct positions on the first
  `num_examples` of `split` (a task split, or a Dyck file: `Evaluator.batches`),
  keyed `"depth,skipped"`."""
  setup = run.setup
  if setup.task.name != "dyck":
    raise ValueError(f"dyck_skips: task {setup.task.name!r} has no closing-bracket score "
                     "(needs dyck)")
  vocab = probe.brackets(setup.task)

  @jax.jit
  def correct(params, inputs, valid, targets, mask):
    logits = setup.model(params)(inputs, valid, rng=run.evaluator.rng, train=False)
    return metrics.close_correct(logits, targets, mask, jnp.asarray(vocab.close_ids))

  counts = {}
  with jax.set_mesh(setup.mesh):
    for batch in run.evaluator.batches(split, num_examples=num_examples):
      ok = np.asarray(
          correct(run.params, *(batch[k] for k in ("inputs", "valid", "targets", "mask"))))
      labels = position_labels(batch["inputs"], batch["valid"], vocab)
      counts = labelled_counts.merge(counts,
                                     labelled_counts.count(ok, batch["mask"] > 0, labels, LABELS))
  return counts


def walk_back(batches: Iterable[dict[str, np.ndarray]], vocab: probe.Brackets) -> dict[int, dict]:
  """Per skipped height, over the scored positions (a bracket open) of
  `batches`: how many (`positions`), and the median and 90th percentile of the
  tokens back to the innermost open bracket (`median`, `p90`): how far the
  model must look past the skipped pairs to find it. A property of the data."""
  back: dict[int, list[np.ndarray]] = {}
  for batch in batches:
    labels = probe.nesting_labels(batch["inputs"], batch["valid"], vocab)
    scored = labels["depth"] > 0
    distance = np.arange(scored.shape[1])[None, :] - labels["top"]
    for s in np.unique(labels["skipped"][scored]):
      back.setdefault(int(s), []).append(distance[scored & (labels["skipped"] == s)])
  out = {}
  for s, parts in sorted(back.items()):
    d = np.concatenate(parts)
    median, p90 = np.percentile(d, [50, 90])
    out[s] = dict(positions=int(d.size), median=float(median), p90=float(p90))
  return out


def tables(runs: dict[str, dict], m: int) -> dict:
  """Per kind, over `runs` (`{name: {"kind": k, "counts": count, ...}}`), each
  cell the mean of its runs' accuracies (`labelled_counts.over_seeds`): by
  depth; by skipped height; and by skipped height at the trained depths
  (<= `m`)."""
  grouped, (depths, skips) = labelled_counts.by_kind(runs, len(LABELS))
  over_seeds = labelled_counts.over_seeds

  def kind_tables(rs):
    return dict(
        by_depth={d: over_seeds(rs, lambda a, _, d=d: a == d) for d in depths},
        by_skipped={s: over_seeds(rs, lambda _, b, s=s: b == s) for s in skips},
        by_skipped_at_trained_depths={
            s: over_seeds(rs, lambda a, b, s=s: a <= m and b == s) for s in skips
        })

  return {kind: kind_tables(rs) for kind, rs in grouped.items()}
