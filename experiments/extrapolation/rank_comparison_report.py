"""How the ranking of position kinds moves between two sets of runs: one task
at two model sizes (the 2-layer model and the Chomsky-hierarchy protocol's
5-layer one, `model_size_section`), or two tasks with the same model (Dyck
and `listops_depth`, `cross_task_section`: does what extrapolates in depth
on one extrapolate on the other?). Both are `rank_comparison`.
"""

from __future__ import annotations

import collections
import os
from collections.abc import Callable

import numpy as np

from bifocal_jax.evaluation import stats
from experiments.extrapolation import plot_style
from experiments.extrapolation.report_tables import (
    METRIC_NAMES, markdown_table, metric_value, seed_values)


def _shared(groups_pair: tuple[dict, dict]):
  """What two sets of cells share: (each side's scratch cells, the kinds both
  ran, the held-out splits both have, each side's metric, each side's
  {split: {kind: {seed: value}}}); None under 2 kinds or without a split."""
  scratch = [{key[1]: runs for key, runs in groups.items() if key[0] == "scratch" and runs}
             for groups in groups_pair]
  kinds = [k for k in scratch[1] if k in scratch[0]]
  if len(kinds) < 2:
    return None
  first = [next(iter(sc[kinds[0]].values())) for sc in scratch]
  splits = [s for s in first[0]["splits"] if s in first[1]["splits"] and s != "valid"]
  if not splits:
    return None
  metrics = ["close_accuracy" if metric_value(f, splits[0], "close_accuracy") is not None
             else "accuracy" for f in first]
  values = [{split: {k: v for k in kinds if (v := seed_values(sc[k], split, metric))}
             for split in splits} for sc, metric in zip(scratch, metrics)]
  return scratch, kinds, splits, metrics, values


def rank_comparison(groups_pair: tuple[dict, dict], intro: Callable[[list[str]], str],
                    sides: str) -> str:
  """Two sets of runs' cells (`groups_pair`): per held-out split both have,
  each scratch kind both have, its mean over seeds and rank among those kinds
  (1 = best) on each side, with Spearman's rank correlation of the sides and
  its two-sided permutation p-value (`stats.spearman_permutation_p`);
  then each kind's paired difference from `rope` on each side (**bold**: its
  95% interval excludes zero). Each side in its own metric: closing-bracket
  accuracy where its summaries have it, else token accuracy. The sides' seeds
  are not paired with each other (other models or tasks, batches and data
  order): the comparison is of rankings, each side's differences paired
  within it. `intro(metrics)`: the sentence before the table, given each
  side's metric name; `sides`: how a cell names its two values ("small /
  large")."""
  shared = _shared(groups_pair)
  if shared is None:
    return ""
  scratch, kinds, splits, metrics, values = shared
  means = [{split: {k: float(np.mean(list(v.values()))) for k, v in by_split[split].items()}
            for split in splits} for by_split in values]
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
  p = [stats.spearman_permutation_p(means[0][s], means[1][s]) for s in splits]
  rows.append(["its permutation p (two-sided)", "", *("-" if v is None else f"{v:.2g}"
                                                     for v in p)])
  diff_rows = [["position", *splits], ["---"] * (1 + len(splits))]
  for kind in (k for k in order if k != "rope" and "rope" in kinds):
    cells = []
    for split in splits:
      per_side = []
      for by_split in values:
        mine, base = by_split[split].get(kind, {}), by_split[split].get("rope", {})
        common = sorted(set(mine) & set(base))
        if not common:
          per_side.append("-")
          continue
        d = stats.paired_difference([mine[s] for s in common], [base[s] for s in common])
        per_side.append(f"**{d['mean']:+.3f}**" if d["decided"] else f"{d['mean']:+.3f}")
      cells.append(" / ".join(per_side))
    diff_rows.append([kind, *cells])
  parts = [intro([METRIC_NAMES[m] for m in metrics]), "", markdown_table(rows)]
  if len(diff_rows) > 2:
    parts += ["", f"Minus `rope` on each side (paired over the seeds both have; {sides}; "
              "**bold**: the 95% interval excludes zero, given in each task's own tables):", "",
              markdown_table(diff_rows)]
  return "\n".join(parts)


def size_comparison(small: str, large: str, small_groups: dict, large_groups: dict) -> str:
  """`rank_comparison` of one task at two model sizes (`small`, `large`: task names)."""
  names = []
  for task, groups in ((small, small_groups), (large, large_groups)):
    f = next((s for (arm, _), runs in groups.items() if arm == "scratch" for s in runs.values()),
             None)
    if f is None:
      return ""
    layers = f.get("overrides", {}).get("model.num_layers")
    names.append(f"`{task}` ({f'{layers} layers, ' if layers else ''}{f['steps']:,} steps)")
  return rank_comparison(
      (small_groups, large_groups),
      lambda metrics: (f"Model size: {names[0]} against {names[1]}, the same task and kinds, "
                       f"each size at its own budget ({metrics[0]}, scratch runs, mean over "
                       "seeds, small / large, each followed by its rank among these kinds, 1 = "
                       "best; rows by the larger model's mean over the splits):"),
      "small / large")


def cross_task(first: str, second: str, first_groups: dict, second_groups: dict) -> str:
  """`rank_comparison` of two tasks run with the same model and kinds."""
  return rank_comparison(
      (first_groups, second_groups),
      lambda metrics: (f"Across tasks: `{first}` ({metrics[0]}) against `{second}` "
                       f"({metrics[1]}), the same model and kinds, each task at its own budget "
                       f"(scratch runs, mean over seeds, `{first}` / `{second}`, each followed "
                       "by its rank among these kinds, 1 = best; rows by the second task's "
                       "mean over the splits):"),
      f"`{first}` / `{second}`")


def cross_task_plot(first: str, second: str, first_groups: dict, second_groups: dict,
                    path: str) -> str | None:
  """One panel per held-out split both tasks have: each kind's mean on the
  first task (x) against the second (y), with its seed intervals; None
  unless some kind has both."""
  shared = _shared((first_groups, second_groups))
  if shared is None:
    return None
  _, kinds, splits, metrics, values = shared
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, axes = plt.subplots(1, len(splits), figsize=(5.5 * len(splits), 5), squeeze=False)
  for ax, split in zip(axes.flat, splits):
    plot_style.kinds_scatter(ax, {
        k: (stats.seed_interval(list(values[0][split][k].values())),
            stats.seed_interval(list(values[1][split][k].values())))
        for k in kinds if k in values[0][split] and k in values[1][split]})
    ax.set_xlabel(f"{first}: {METRIC_NAMES[metrics[0]]}")
    ax.set_ylabel(f"{second}: {METRIC_NAMES[metrics[1]]}")
    ax.set_title(split, fontsize=9)
    ax.grid(alpha=0.3)
  return plot_style.save(fig, axes, path, f"Each kind on `{first}` against `{second}` "
                         "(scratch runs; mean over seeds, 95% intervals)")


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


def cross_task_section(preset, table: dict, plots_dir: str, link_base: str) -> str:
  """`cross_task` and its plot (`plots_dir/across_<first>_<second>.png`,
  linked relative to `link_base`) for each pair of tasks in
  `preset.cross_task` that both ran."""
  parts = []
  for a, b in preset.cross_task:
    if a in table and b in table and (text := cross_task(a, b, table[a], table[b])):
      png = cross_task_plot(a, b, table[a], table[b],
                            os.path.join(plots_dir, f"across_{a}_{b}.png"))
      parts.append(text + (f"\n\n![{a} against {b}]({os.path.relpath(png, link_base)})"
                           if png else ""))
  return "\n\n".join(parts)
