"""Several runs side by side: `eval.py --compare DIR1 DIR2 ...`.

`compare(workdirs)` reads each run's results JSON (evaluating a run that has
none, `evaluate.evaluate`) and writes one markdown table of token and
closing-bracket accuracy per split and one PNG of accuracy against nesting
depth and against length, every evaluated split pooled.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Sequence

import numpy as np

from bifocal_jax.evaluation import spectrum
from bifocal_jax.evaluation import report as eval_report
from bifocal_jax.evaluation import evaluate as evaluate_lib


def load_results(workdir: str, *, log: Callable[[str], None] = print) -> dict:
  """The run's results JSON, evaluating the run first if it has none."""
  path = evaluate_lib.results_path(workdir)
  if not os.path.exists(path):
    log(f"{workdir}: no {path}, evaluating")
    return evaluate_lib.evaluate(workdir, log=log)
  with open(path) as f:
    return json.load(f)


def compare(workdirs: Sequence[str], *, out: str | None = None,
            log: Callable[[str], None] = print) -> tuple[str, str]:
  """One markdown table and one PNG (accuracy against depth and against length)
  across runs. Writes `out` (default `<common parent>/compare.md`) and the PNG
  beside it; returns `(markdown, png path)`."""
  if len(workdirs) < 1:
    raise ValueError("compare: needs at least one workdir")
  workdirs = [os.path.abspath(w) for w in workdirs]
  if out is None:
    parent = os.path.dirname(workdirs[0]) if len(workdirs) == 1 else os.path.commonpath(workdirs)
    out = os.path.join(parent, "compare.md")
  runs = [load_results(w, log=log) for w in workdirs]
  names = [os.path.basename(w) for w in workdirs]
  split_names = list(dict.fromkeys(n for r in runs for n in r["splits"]))
  header = ["run", "position", "step", "CHE"] + split_names
  rows = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
  for name, r in zip(names, runs):
    cells = [
        name,
        eval_report.scheme_name(r),
        str(r["step"]),
        eval_report.format_value(r["che_score"])
    ]
    for split in split_names:
      s = r["splits"].get(split)
      if s is None:
        cells.append("-")
      elif "close_accuracy" in s:
        cells.append(f"{s['token_accuracy']:.3f} ({s['close_accuracy']:.3f})")
      else:
        cells.append(f"{s['token_accuracy']:.3f}")
    rows.append("| " + " | ".join(cells) + " |")
  note = ("Token accuracy per split (in parentheses: Yao et al.'s 0.8-ratio "
          "closing-bracket accuracy); CHE: mean token accuracy over test lengths.")
  markdown = "\n".join(rows) + "\n\n" + note + "\n"
  os.makedirs(os.path.dirname(out), exist_ok=True)
  with open(out, "w") as f:
    f.write(markdown)
  png = os.path.splitext(out)[0] + ".png"
  _plot_compare(names, runs, png)
  log(markdown)
  log(f"wrote {out} and {png}")
  return markdown, png


def _plot_compare(names: Sequence[str], runs: Sequence[dict], path: str) -> str:
  plt = spectrum.pyplot()
  fig, (ax_depth, ax_length) = plt.subplots(1, 2, figsize=(11, 4))
  for name, r in zip(names, runs):
    by_depth = eval_report.pooled(r["splits"].values(), "by_depth")
    depths = sorted(by_depth)
    ax_depth.plot(depths, [by_depth[d][0] / by_depth[d][1] for d in depths], marker="o", ms=3,
                  label=f"{name} ({eval_report.scheme_name(r)})")
    by_length = eval_report.pooled(r["splits"].values(), "by_length")
    if by_length:
      edges = np.unique(np.round(np.geomspace(1, 2 * max(by_length), 40))).tolist()
      bins = eval_report.binned(by_length, edges)
      ax_length.plot([math.sqrt(lo * hi) for lo, hi, _ in bins], [a for _, _, a in bins],
                     marker="o", ms=3, label=name)
  ax_depth.set_xlabel("nesting depth")
  ax_length.set_xlabel("sequence length (tokens)")
  ax_length.set_xscale("log")
  for ax in (ax_depth, ax_length):
    ax.set_ylabel("token accuracy")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
  ax_depth.legend(fontsize=7)
  fig.suptitle("accuracy against depth and length (all evaluated splits pooled)")
  fig.savefig(path, dpi=110, bbox_inches="tight")
  plt.close(fig)
  return path
