"""The plot per task of the report: accuracy against nesting depth and against
length, per position kind of the scratch arm, mean over seeds (every evaluated
split pooled; lengths in log-spaced bins).
"""

from __future__ import annotations

import collections
import math

import numpy as np

from experiments.extrapolation import plot_style


def _curve(runs: dict, field: str, edges=None):
  """Mean over seeds of accuracy by depth (or by length bin): (x, mean)."""
  per_seed = []
  for s in runs.values():
    pooled: dict[int, list[float]] = collections.defaultdict(list)
    for r in s["splits"].values():
      for k, v in r[field].items():
        pooled[int(k)].append(v)
    points = {k: float(np.mean(v)) for k, v in pooled.items()}
    if edges is not None:
      keys = np.array(sorted(points))
      binned = {}
      for lo, hi in zip(edges[:-1], edges[1:]):
        sel = keys[(keys >= lo) & (keys < hi)]
        if sel.size:
          binned[math.sqrt(lo * hi)] = float(np.mean([points[k] for k in sel]))
      points = binned
    per_seed.append(points)
  xs = sorted(set().union(*per_seed))
  return np.array(xs), np.array([np.mean([p[x] for p in per_seed if x in p]) for x in xs])


def plot_task(task: str, groups: dict, path: str) -> str | None:
  """Accuracy against depth and against length per position kind (scratch), mean over seeds."""
  groups = {g: runs for (arm, g), runs in groups.items() if arm == "scratch" and runs}
  if not groups:
    return None
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  lengths = [int(k) for runs in groups.values() for s in runs.values()
             for r in s["splits"].values() for k in r["by_length"]]
  edges = np.unique(np.round(np.geomspace(1, 2 * max(lengths), 30))).tolist()
  has_depth = any(len(r["by_depth"]) > 1 for runs in groups.values() for s in runs.values()
                  for r in s["splits"].values())
  fig, axes = plt.subplots(1, 2 if has_depth else 1, figsize=(11 if has_depth else 6, 4),
                           squeeze=False)
  styles = plot_style.kind_styles(groups)
  for group, runs in groups.items():
    label = f"{group} ({len(runs)} seed{'s' * (len(runs) > 1)})"
    if has_depth:
      axes[0, 0].plot(*_curve(runs, "by_depth"), ms=3, label=label, **styles[group])
    axes[0, -1].plot(*_curve(runs, "by_length", edges), ms=3, label=label, **styles[group])
  if has_depth:
    axes[0, 0].set_xlabel("nesting depth")
  axes[0, -1].set_xlabel("length")
  axes[0, -1].set_xscale("log")
  for ax in axes[0]:
    ax.set_ylabel("token accuracy")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
  return plot_style.save(fig, axes, path, f"{task}: accuracy against depth and length (every "
                         "evaluated split pooled; mean over seeds)")

