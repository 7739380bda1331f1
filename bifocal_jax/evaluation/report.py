"""One evaluation's results as text tables (per split, by depth, by length)
and the CHE protocol's curve as a plot. Across runs: `compare.py`."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence

import numpy as np

from bifocal_jax.evaluation import spectrum


def scheme_name(results: dict) -> str:
  """The scheme's one name in a results record (`position`; a record written
  before it was recorded has only `position_kind`)."""
  return results.get("position", results["position_kind"])


def pooled(split_results: Iterable[dict], field: str) -> dict[int, tuple[float, float]]:
  """{key: (correct tokens, tokens)} of `by_length` or `by_depth`, pooled over splits."""
  out: dict[int, tuple[float, float]] = {}
  for r in split_results:
    for key, n in r[f"{field}_tokens"].items():
      c, t = out.get(int(key), (0.0, 0.0))
      out[int(key)] = (c + r[field][key] * n, t + n)
  return out


def binned(counts: dict[int, tuple[float, float]],
           edges: Sequence[float]) -> list[tuple[float, float, float]]:
  """[(low, high, accuracy)] of the non-empty bins `[edges[i], edges[i+1])`."""
  keys = np.array(sorted(counts))
  out = []
  for lo, hi in zip(edges[:-1], edges[1:]):
    sel = keys[(keys >= lo) & (keys < hi)]
    tokens = sum(counts[k][1] for k in sel)
    if tokens:
      out.append((lo, hi, sum(counts[k][0] for k in sel) / tokens))
  return out


def _octaves(counts) -> list[int]:
  if not counts:
    return [1, 2]
  return [2**i for i in range(int(math.log2(max(counts))) + 2)]


def format_value(v) -> str:
  """An accuracy (or score) to 3 decimals; `-` for none."""
  return "-" if v is None else f"{v:.3f}"


def _fmt_ci(v, ci) -> str:
  """`0.861+-0.011` (half the interval's width), or the value alone."""
  if v is None or not ci or not all(np.isfinite(ci)):
    return format_value(v)
  return f"{v:.3f}+-{(ci[1] - ci[0]) / 2:.3f}"


# The table's columns: (results key, column name, what the legend says it is).
# Dyck's headline metric, Yao et al.'s closing-bracket accuracy, comes first
# wherever a split has it; the benchmark's CHE score last.
COLUMNS = (
    ("close_accuracy", "close", "closing-bracket accuracy (Yao et al. 2021): positions where "
     "p(right close) / p(any close) > 0.8"),
    ("close_sequence_accuracy", "close_seq", "strings with every such position right"),
    ("token_accuracy", "token", "token accuracy over scored tokens (argmax of the task's outputs)"),
    ("sequence_accuracy", "seq", "strings with every scored token right"),
    ("che_score", "che", "CHE score (Deletang et al. 2023): mean of per-length token accuracy"),
)


def columns(splits: dict[str, dict]) -> tuple[tuple[str, str, str], ...]:
  """The `COLUMNS` some split of `splits` has (a task without closing brackets has no `close`)."""
  return tuple(c for c in COLUMNS if any(r.get(c[0]) is not None for r in splits.values()))


def format_results(results: dict) -> str:
  """The results as text tables: per split (with a legend naming each
  column), by depth, and by length (octaves)."""
  lines = [
      f"{results['workdir']}  step {results['step']}  task {results['task']}  "
      f"position {scheme_name(results)}"
  ]
  splits = results["splits"]
  if not splits:
    return lines[0]
  width = max(12, *(len(n) for n in splits))
  shown = columns(splits)
  lines.append(f"{'split':<{width}} {'examples':>8} " +
               " ".join(f"{name:>11}" for _, name, _ in shown))
  for name, r in splits.items():
    cells = [_fmt_ci(r.get(m), r.get("ci95", {}).get(m)) for m, _, _ in shown]
    lines.append(f"{name:<{width}} {r['examples']:>8} " + " ".join(f"{c:>11}" for c in cells))
  lines.append("each: accuracy +- half the width of its 95% bootstrap interval (over examples)")
  lines += [f"  {name:<9} {legend}" for _, name, legend in shown]
  if results.get("che_score") is not None:
    lines.append(f"the run's CHE score (the benchmark's, from {_che_source(splits)}): "
                 f"{_fmt_ci(results['che_score'], results.get('che_ci95'))}")
  for field, title in (("by_depth", "token accuracy by depth"), ("by_length",
                                                                 "token accuracy by length")):
    lines.append(title + ":")
    for name, r in splits.items():
      counts = pooled([r], field)
      if field == "by_depth":
        cells = [f"{k}:{c / t:.2f}" for k, (c, t) in sorted(counts.items())]
      else:
        cells = [f"{lo}-{hi - 1}:{a:.2f}" for lo, hi, a in binned(counts, _octaves(counts))]
      lines.append(f"  {name:<{width}} " + " ".join(cells))
  return "\n".join(lines)


def _che_source(splits: dict[str, dict]) -> str:
  """Which split the run's CHE score is (`evaluate.che_score`'s choice)."""
  return "the CHE protocol" if "che" in splits else "test_length"


def plot_che_curve(che_results: dict, path: str) -> str:
  """Accuracy against length of the CHE protocol's entry, and its score."""
  plt = spectrum.pyplot()
  lengths = sorted(int(k) for k in che_results["by_length"])
  fig, ax = plt.subplots(figsize=(6, 3.5))
  ax.plot(lengths, [che_results["by_length"][str(n)] for n in lengths], marker=".", ms=3)
  ax.axhline(che_results["che_score"], color="gray", lw=0.8, ls="--",
             label=f"score {che_results['che_score']:.3f} (mean over lengths)")
  ax.set_xlabel(f"length ({che_results['split']}, every {che_results['stride']}, "
                f"{che_results['per_length']} examples each)")
  ax.set_ylabel("token accuracy")
  ax.set_ylim(-0.02, 1.02)
  ax.grid(alpha=0.3)
  ax.legend(fontsize=8)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  fig.savefig(path, dpi=100, bbox_inches="tight")
  plt.close(fig)
  return path
