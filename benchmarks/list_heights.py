r"""Where trained `listops_depth` runs fail past the training depth: accuracy
at each `]` by the closed list's height, level and sibling
(`bifocal_jax/list_heights.py`).

  python benchmarks/list_heights.py --workdirs='OUT/listops_depth/scratch/*/seed*' \
      --examples=1000 --out=benchmarks/results/list_heights.json \
      --plot=benchmarks/results/list_heights.png

Each workdir is a trained run (its last checkpoint); its kind and seed are read
from its config; a run whose last checkpoint is short of its `steps` (one a
sweep is still training) is skipped, and said so. `--from_json` reads the
counts of earlier `--out`s instead (a clone has the committed JSON, not the
checkpoints; several files, comma-separated, are merged). Prints, per kind
(mean over its runs [95% t-interval]), the accuracy at lists of each height; at each trained height (<= `d_train`) by
level: a list as high as trained ones but sitting deeper than any did; and at
each trained height by its sibling (the highest list closed before it in the
same enclosing list): a list as high as trained ones right after one higher
than any list under the outermost in training (>= `d_train`). `--plot` draws
the three as panels, one line per kind.
"""

from __future__ import annotations

import os
import sys

from absl import flags

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_util  # pylint: disable=g-import-not-at-top,wrong-import-position
import plot_style  # pylint: disable=g-import-not-at-top,wrong-import-position
from bifocal_jax import list_heights  # pylint: disable=g-import-not-at-top,wrong-import-position,wrong-import-order
from report_tables import fmt_interval  # pylint: disable=g-import-not-at-top,wrong-import-position

_WORKDIRS = flags.DEFINE_string("workdirs", None,
                                "Globs (comma-separated) of trained listops_depth run directories.")
_FROM_JSON = flags.DEFINE_string("from_json", None,
                                 "Read the runs' counts from these earlier --outs "
                                 "(comma-separated) instead of scoring --workdirs.")
_SPLIT = flags.DEFINE_string("split", "test_depth", "The split to score.")
_EXAMPLES = flags.DEFINE_integer("examples", 1000, "Its first examples.")
_OUT = flags.DEFINE_string("out", None, "Write the counts and the tables as JSON here.")
_PLOT = flags.DEFINE_string("plot", None, "Draw the three tables as a figure here (.png).")


def plot(by_kind: dict, d_train: int, path: str) -> str:
  """Three panels, one line per kind (`plot_style`): accuracy by height; lists
  of height 2 by level; lists of height 1 below the outermost by sibling."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  panels = (("by_height", None, "height of the closed list", "every list"),
            ("trained_heights_by_level", min(2, d_train), "its level (lists around it)",
             f"lists of height {min(2, d_train)}"),
            ("trained_heights_by_sibling", 1, "its sibling (highest list closed before it)",
             "lists of height 1 under the outermost"))
  fig, axes = plt.subplots(1, 3, figsize=(11.0, 3.2), squeeze=False, sharey=True)
  styles = plot_style.kind_styles(by_kind)
  for ax, (table, height, xlabel, title) in zip(axes.flat, panels):
    for kind, tables in by_kind.items():
      cells = tables[table] if height is None else tables[table][height]
      points = sorted((int(x), c["mean"]) for x, c in cells.items() if c is not None)
      ax.plot([p[0] for p in points], [p[1] for p in points], ms=3,
              label=f"{kind} ({max(c['n'] for c in cells.values() if c)})", **styles[kind])
    ax.set_title(title, fontsize=8)
    ax.set_xlabel(xlabel, fontsize=8)
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
  axes[0, 0].set_ylabel("accuracy at `]`")
  return plot_style.save(fig, axes, path, "listops_depth test_depth: where the answers fail "
                         f"(mean over seeds; trained: height + level <= {d_train})", y=1.04)


def main(argv):
  del argv
  if _FROM_JSON.value:
    source = bench_util.read_scored_runs(_FROM_JSON.value, "list_heights.py",
                                         fields=("d_train", "split", "examples", "machine"),
                                         labels=3)
    runs, d_train, split, examples, machine = (
        source[k] for k in ("runs", "d_train", "split", "examples", "machine"))
  else:
    split, examples, machine = _SPLIT.value, _EXAMPLES.value, bench_util.machine()
    runs, task = bench_util.score_trained_runs(
        _WORKDIRS.value, lambda run: list_heights.score_run(run, split, num_examples=examples))
    d_train = task.d_train
  out = list_heights.tables(runs, d_train)
  heights = sorted({h for t in out.values() for h in t["by_height"]})
  top = lambda k: (out[k]["by_height"][heights[-1]] or {}).get("mean", 0.0)
  order = sorted(out, key=lambda k: -top(k))
  print(f"\n{split}, first {examples} examples; accuracy at `]` by the closed "
        f"list's height (lists of height <= {d_train} were trained), mean over seeds [95% "
        "t-interval]:\n")
  print(bench_util.markdown_table(["position", "runs"] + [f"height {h}" for h in heights],
                                  [[k, sum(r["kind"] == k for r in runs.values())] +
                                   [fmt_interval(out[k]["by_height"][h]) for h in heights]
                                   for k in order]))
  for table, label, title in (
      ("trained_heights_by_level", "level", "Lists of the trained heights by their level "
       f"(0: outermost; trained: height + level <= {d_train})"),
      ("trained_heights_by_sibling", "sibling", "Lists of the trained heights under the "
       "outermost, by their sibling (the highest list closed before them in the same list; "
       f"0: none; trained: < {d_train})")):
    columns = sorted({v for t in out.values() for v in t[table][1]})
    print(f"\n{title}:\n")
    print(bench_util.markdown_table(["position", "height"] + [f"{label} {v}" for v in columns],
                                    [[k, h] + [fmt_interval(out[k][table][h][v]) for v in columns]
                                     for k in order for h in range(1, d_train + 1)]))
  if _PLOT.value:
    print(f"\nwrote {plot(out, d_train, _PLOT.value)}")
  bench_util.write_json(_OUT.value, dict(machine=machine, split=split,
                                         examples=examples, d_train=d_train, runs=runs,
                                         by_kind=out))


if __name__ == "__main__":
  bench_util.run_main(main)
