"""Training time as an axis (issue 30): each scratch run's held-out accuracy
at the checkpoints its summary records under `at_steps`, as a table per
kind and step, the kinds' ranks at each step with the rank correlation of
the first step's ranking with the last's, and a plot per task of every split
against training steps.
"""

from __future__ import annotations

import os

from bifocal_jax.evaluation import stats
from experiments.extrapolation import plot_style
from experiments.extrapolation.report_tables import METRIC_NAMES, fmt_interval, markdown_table


def _at_steps(runs: dict) -> list[int]:
  """The steps every run of a cell was evaluated at (`at_steps`), ascending."""
  steps = [set(map(int, s.get("at_steps", {}))) for s in runs.values()]
  return sorted(set.intersection(*steps)) if steps else []


def _step_interval(runs: dict, step: int, split: str, metric: str):
  values = [v for s in runs.values()
            if (v := s["at_steps"][str(step)].get(split, {}).get(metric)) is not None]
  return stats.seed_interval(values) if values else None


def training_time_section(task: str, groups: dict, plots_dir: str, link_base: str) -> str:
  """Held-out accuracy against training steps (`at_steps`) per scratch kind:
  a table per metric (mean over seeds [95% t-interval] at each evaluated
  step) and a plot of each out-of-distribution split against steps."""
  scratch = {g: runs for (arm, g), runs in groups.items()
             if arm == "scratch" and runs and _at_steps(runs)}
  if not scratch:
    return ""
  any_run = next(iter(next(iter(scratch.values())).values()))
  splits = list(any_run["at_steps"][str(_at_steps(next(iter(scratch.values())))[-1])])
  close = any("close_accuracy" in r for r in any_run["splits"].values())
  metric = "close_accuracy" if close else "accuracy"
  name = METRIC_NAMES[metric]
  parts = [f"Training time as an axis ({name}, mean over seeds [95% t-interval]) at each "
           "evaluated checkpoint of the same runs; the earlier checkpoints on the subsets the "
           "summaries name (`examples`), the last on the full evaluation sets:"]
  header = ["position", "step", *splits]
  rows = [header, ["---"] * len(header)]
  for group, runs in scratch.items():
    for step in _at_steps(runs):
      rows.append([group, str(step)] + [fmt_interval(_step_interval(runs, step, split, metric))
                                        for split in splits])
  parts += ["", markdown_table(rows)]
  ranks = ranks_over_training_time(scratch, splits, metric)
  if ranks:
    parts += ["", "The kinds' ranks at each of those steps (1 = best, among the kinds with "
              "every step; first to last step), and Spearman's rank correlation of the first "
              "step's ranking with the last's:", "", ranks]
  png = plot_training_time(task, scratch, splits, metric,
                           os.path.join(plots_dir, f"training_time_{task}.png"))
  parts += ["", f"![{task}: accuracy against training steps]({os.path.relpath(png, link_base)})"]
  return "\n".join(parts)


def ranks_over_training_time(scratch: dict, splits: list[str], metric: str) -> str:
  """Per split, each kind's rank (by mean over seeds) at every step all the
  `scratch` cells were evaluated at, and the rank correlation of the first
  step's ranking with the last's; "" with fewer than two kinds or steps."""
  if len(scratch) < 2:
    return ""
  steps = sorted(set.intersection(*(set(_at_steps(runs)) for runs in scratch.values())))
  if len(steps) < 2:
    return ""
  means = {(step, split): {g: i["mean"] for g, runs in scratch.items()
                           if (i := _step_interval(runs, step, split, metric)) is not None}
           for step in steps for split in splits}
  ranks = {key: stats.descending_ranks(m) for key, m in means.items()}
  header = ["position", *(f"{split} ({', '.join(map(str, steps))})" for split in splits)]
  rows = [header, ["---"] * len(header)]
  for group in scratch:
    rows.append([group, *(" / ".join(str(ranks[step, split].get(group, "-")) for step in steps)
                          for split in splits)])
  rho = [stats.spearman(means[steps[0], split], means[steps[-1], split]) for split in splits]
  rows.append([f"rank correlation, step {steps[0]} with {steps[-1]}",
               *("-" if r is None else f"{r:+.2f}" for r in rho)])
  return markdown_table(rows)


def plot_training_time(task: str, groups: dict, splits: list[str], metric: str,
                       path: str) -> str:
  """One panel per split (in distribution first), three to a row: `metric`
  against steps, one line per kind (`plot_style`) with its 95% seed-interval
  band where it has `plot_style.MIN_BAND_SEEDS` seeds."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  cols = min(3, len(splits))
  rows = -(-len(splits) // cols)
  fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 3.0 * rows), squeeze=False,
                           sharey=True)
  fig.subplots_adjust(hspace=0.35)
  styles = plot_style.kind_styles(groups)
  for group, runs in groups.items():
    steps = _at_steps(runs)
    for ax, split in zip(axes.flat, splits):
      points = [(step, out) for step in steps
                if (out := _step_interval(runs, step, split, metric)) is not None]
      if not points:
        continue
      xs = [p[0] for p in points]
      ax.plot(xs, [p[1]["mean"] for p in points], ms=3, label=f"{group} ({len(runs)})",
              **styles[group])
      shaded = [plot_style.band(p[1]["ci95"], len(runs)) for p in points]
      if all(b is not None for b in shaded):
        ax.fill_between(xs, [b[0] for b in shaded], [b[1] for b in shaded],
                        color=styles[group]["color"], alpha=0.12, lw=0)
  for ax, split in zip(axes.flat, splits):
    ax.set_title(split, fontsize=8)
    ax.set_xscale("log", base=2)
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
  for ax in axes.flat[len(splits):]:
    ax.set_visible(False)
  for ax in axes[-1]:
    ax.set_xlabel("training steps")
  for ax in axes[:, 0]:
    ax.set_ylabel(metric.replace("_", " "))
  return plot_style.save(fig, axes, path, f"{task}: held-out accuracy against training steps "
                         f"(mean over seeds; band: 95% interval, kinds with >= "
                         f"{plot_style.MIN_BAND_SEEDS} seeds)", y=1.0 + 0.05 / rows)
