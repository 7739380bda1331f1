"""What the experiment's reports share: a metric read from the run summaries,
and the markdown of intervals and tables.

`report` (accuracy, paired comparisons), `leaderboard_report`,
`training_time_report`, `rank_comparison_report` and `probe_report` (the
mechanism probes) read and format their cells here, so that an interval
reads the same in every table of RESULTS.md.
"""

from __future__ import annotations


# How the tables name a summary's accuracy metrics.
METRIC_NAMES = {"close_accuracy": "closing-bracket accuracy", "accuracy": "token accuracy"}


def metric_value(summary: dict, split: str, metric: str):
  """A run summary's `metric` on `split` (None where it has neither)."""
  r = summary["splits"].get(split)
  return None if r is None else r.get(metric)


def seed_values(runs: dict[int, dict], split: str, metric: str) -> dict[int, float]:
  """`{seed: metric}` of a cell's runs that have it."""
  return {seed: v for seed, s in runs.items()
          if (v := metric_value(s, split, metric)) is not None}


def fmt_interval(out: dict | None, signed: bool = False) -> str:
  """`mean [lo, hi]` of a `bifocal_jax.evaluation.stats` interval (bold when `decided`:
  a paired difference whose interval excludes zero), `mean (n=1)` for one
  seed, `-` for none."""
  if out is None:
    return "-"
  sign = "+" if signed else ""
  if out["ci95"] is None:
    return f"{out['mean']:{sign}.3f} (n=1)"
  lo, hi = out["ci95"]
  text = f"{out['mean']:{sign}.3f} [{lo:{sign}.3f}, {hi:{sign}.3f}]"
  return f"**{text}**" if out.get("decided") else text


def markdown_table(rows: list[list[str]]) -> str:
  return "\n".join("| " + " | ".join(row) + " |" for row in rows)


def scratch_first(groups: dict) -> list:
  """The cells `{(arm, group): runs}`, the scratch arm's first (as the
  accuracy tables order them)."""
  return sorted(groups.items(), key=lambda item: item[0][0] != "scratch")
