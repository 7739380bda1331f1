"""One task at two model sizes (the 2-layer model and the Chomsky-hierarchy
protocol's 5-layer one): how each kind's rank and its difference from RoPE
move with model size (`size_comparison`), for every task a preset runs at
both sizes (`model_size_section`).
"""

from __future__ import annotations

import collections
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # its sibling modules
from bifocal_jax import stats  # pylint: disable=g-import-not-at-top,wrong-import-position
from report_tables import markdown_table, metric_value, seed_values  # pylint: disable=g-import-not-at-top,wrong-import-position


def size_comparison(small: str, large: str, small_groups: dict, large_groups: dict) -> str:
  """One task at two model sizes (`small`, `large`: task names): per held-out
  split, each scratch kind both have at each size, its mean over seeds and
  rank among those kinds (1 = best), with Spearman's rank correlation of the
  two sizes; then each kind's paired difference from `rope` at each size
  (**bold**: its 95% interval excludes zero). The sizes' seeds are not
  paired with each other (other models, batches and data order): the
  comparison is of rankings, each size's differences paired within it."""
  scratch = [{key[1]: runs for key, runs in groups.items() if key[0] == "scratch" and runs}
             for groups in (small_groups, large_groups)]
  kinds = [k for k in scratch[1] if k in scratch[0]]
  if len(kinds) < 2:
    return ""
  first = [next(iter(sc[kinds[0]].values())) for sc in scratch]
  splits = [s for s in first[0]["splits"] if s in first[1]["splits"] and s != "valid"]
  if not splits:
    return ""
  close = all(metric_value(f, splits[0], "close_accuracy") is not None for f in first)
  metric = "close_accuracy" if close else "accuracy"
  values = [{split: {k: v for k in kinds if (v := seed_values(sc[k], split, metric))}
             for split in splits} for sc in scratch]
  means = [{split: {k: float(np.mean(list(v.values()))) for k, v in by_split[split].items()}
            for split in splits} for by_split in values]
  names = []
  for task, f in zip((small, large), first):
    layers = f.get("overrides", {}).get("model.num_layers")
    names.append(f"`{task}` ({f'{layers} layers, ' if layers else ''}{f['steps']:,} steps)")
  order = sorted(kinds, key=lambda k: -np.mean([means[1][s].get(k, -1.0) for s in splits]))
  ranks_by_split = [[stats.descending_ranks(m[split]) for m in means] for split in splits]
  header = ["position", "seeds", *splits]
  rows = [header, ["---"] * len(header)]
  for kind in order:
    seeds = f"{len(scratch[0][kind])} / {len(scratch[1][kind])}"
    cells = []
    for split, ranks in zip(splits, ranks_by_split):
      cells.append(" / ".join(f"{m[split][kind]:.3f} ({r[kind]})" if kind in m[split] else "-"
                              for m, r in zip(means, ranks)))
    rows.append([kind, seeds, *cells])
  rho = [stats.spearman(means[0][s], means[1][s]) for s in splits]
  rows.append(["rank correlation (Spearman)", "", *("-" if r is None else f"{r:+.2f}"
                                                   for r in rho)])
  diff_rows = [["position", *splits], ["---"] * (1 + len(splits))]
  for kind in (k for k in order if k != "rope" and "rope" in kinds):
    cells = []
    for split in splits:
      sizes = []
      for by_split in values:
        mine, base = by_split[split].get(kind, {}), by_split[split].get("rope", {})
        common = sorted(set(mine) & set(base))
        if not common:
          sizes.append("-")
          continue
        d = stats.paired_difference([mine[s] for s in common], [base[s] for s in common])
        sizes.append(f"**{d['mean']:+.3f}**" if d["decided"] else f"{d['mean']:+.3f}")
      cells.append(" / ".join(sizes))
    diff_rows.append([kind, *cells])
  name = "closing-bracket accuracy" if close else "token accuracy"
  parts = [f"Model size: {names[0]} against {names[1]}, the same task and kinds, each size "
           f"at its own budget ({name}, scratch runs, mean over seeds, small / large, each "
           "followed by its rank among these kinds, 1 = best; rows by the larger model's mean "
           "over the splits):", "",
           markdown_table(rows)]
  if len(diff_rows) > 2:
    parts += ["", "Minus `rope` at each size (paired over the seeds both have; small / large; "
              "**bold**: the 95% interval excludes zero, given in each task's own tables):", "",
              markdown_table(diff_rows)]
  return "\n".join(parts)


def model_size_section(preset, table: dict) -> str:
  """`size_comparison` for each task of the preset run at a second model size
  (tasks sharing a config file: the first listed is the smaller)."""
  by_config = collections.defaultdict(list)
  for task in preset.tasks:
    if task.name in table:
      by_config[task.config].append(task.name)
  parts = [size_comparison(names[0], other, table[names[0]], table[other])
           for names in by_config.values() for other in names[1:]]
  return "\n\n".join(p for p in parts if p)
