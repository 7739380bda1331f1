"""Correct answers counted by integer labels of the positions, and read back
as accuracies, one run at a time or as a mean over seeds.

A count is `{"a,b,...": {"correct": c, "total": n}}`, keyed by the labels'
values at the scored positions (`count`); counts of batches add (`merge`);
`accuracy` pools the keys a predicate accepts, and `over_seeds` averages a
kind's runs with a 95% t-interval (`by_kind` groups runs and lists each
label's values). `list_heights` (ListOps, at each `]`) and
`dyck_skips` (Dyck, at each position) count this way.
"""

from __future__ import annotations

import numpy as np

from bifocal_jax.evaluation import stats


def count(correct_BxL: np.ndarray, scored_BxL: np.ndarray, labels: dict[str, np.ndarray],
          names: tuple[str, ...]) -> dict[str, dict[str, int]]:
  """The correct and total scored positions for each combination of the
  `names` labels' values, keyed `"v1,v2,..."` in `names`' order."""
  scored = np.asarray(scored_BxL, bool)
  keys = np.stack([np.asarray(labels[k])[scored] for k in names], axis=1)
  hits = np.asarray(correct_BxL)[scored]
  out = {}
  for key in np.unique(keys, axis=0):
    sel = (keys == key).all(1)
    out[",".join(map(str, key))] = dict(correct=int(hits[sel].sum()), total=int(sel.sum()))
  return out


def merge(a: dict, b: dict) -> dict:
  """Two `count`s added."""
  out = {k: dict(v) for k, v in a.items()}
  for k, v in b.items():
    mine = out.setdefault(k, dict(correct=0, total=0))
    mine["correct"] += v["correct"]
    mine["total"] += v["total"]
  return out


def accuracy(counts: dict, keep) -> float | None:
  """Accuracy over the `count` keys whose label values `keep(*values)` accepts."""
  hits = total = 0
  for key, v in counts.items():
    if keep(*map(int, key.split(","))):
      hits, total = hits + v["correct"], total + v["total"]
  return hits / total if total else None


def by_kind(runs: dict[str, dict], labels: int) -> tuple[dict[str, list[dict]], list[list[int]]]:
  """`runs` (`{name: {"kind": k, "counts": count, ...}}`) grouped by kind,
  and the values each of the `labels` labels takes over all their counts,
  sorted (one list per label)."""
  keys = [tuple(map(int, k.split(","))) for r in runs.values() for k in r["counts"]]
  grouped: dict[str, list[dict]] = {}
  for r in runs.values():
    grouped.setdefault(r["kind"], []).append(r)
  return grouped, [sorted({k[i] for k in keys}) for i in range(labels)]


def over_seeds(runs: list[dict], keep) -> dict | None:
  """Mean over the runs (each `{"counts": count, ...}`) holding such positions
  of each one's `accuracy`, with its 95% t-interval."""
  values = [a for a in (accuracy(r["counts"], keep) for r in runs) if a is not None]
  return stats.seed_interval(values) if values else None
