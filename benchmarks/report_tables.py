"""Markdown primitives the benchmark reports share: intervals and tables.

`extrapolation_report` (accuracy, paired comparisons, leaderboards) and
`probe_report` (the mechanism probes) format their cells here, so that an
interval reads the same in every table of RESULTS.md.
"""

from __future__ import annotations


def fmt_interval(out: dict | None, signed: bool = False) -> str:
  """`mean [lo, hi]` of a `bifocal_jax.stats` interval (bold when `decided`:
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
