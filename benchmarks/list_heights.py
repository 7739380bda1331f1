r"""Where trained `listops_depth` runs fail past the training depth: accuracy
at each `]` by the closed list's height and level (`bifocal_jax/list_heights.py`).

  python benchmarks/list_heights.py --workdirs='OUT/listops_depth/scratch/*/seed*' \
      --examples=1000 --out=benchmarks/results/list_heights.json

Each workdir is a trained run (its last checkpoint); its kind and seed are read
from its config; a run whose last checkpoint is short of its `steps` (one a
sweep is still training) is skipped, and said so. Prints, per kind (mean over its runs [95% t-interval]), the
accuracy at lists of each height; at each trained height (<= `d_train`) by
level: a list as high as trained ones but sitting deeper than any did; and at
each trained height by its sibling (the highest list closed before it in the
same enclosing list): a list as high as trained ones right after one higher
than any list under the outermost in training (>= `d_train`).
"""

from __future__ import annotations

import glob
import os
import sys

from absl import app, flags

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_util  # pylint: disable=g-import-not-at-top,wrong-import-position
from bifocal_jax import evaluate, list_heights  # pylint: disable=g-import-not-at-top,wrong-import-position,wrong-import-order

_WORKDIRS = flags.DEFINE_string("workdirs", None, "Glob of trained listops_depth run directories.")
_SPLIT = flags.DEFINE_string("split", "test_depth", "The split to score.")
_EXAMPLES = flags.DEFINE_integer("examples", 1000, "Its first examples.")
_OUT = flags.DEFINE_string("out", None, "Write the counts and the tables as JSON here.")


def _fmt(cell: dict | None) -> str:
  if cell is None:
    return "-"
  if cell["ci95"] is None:
    return f"{cell['mean']:.3f}"
  return f"{cell['mean']:.3f} [{cell['ci95'][0]:.2f}, {cell['ci95'][1]:.2f}]"


def main(argv):
  del argv
  workdirs = sorted(glob.glob(_WORKDIRS.value or ""))
  if not workdirs:
    raise ValueError(f"--workdirs={_WORKDIRS.value!r}: matches no directory")
  runs, d_train = {}, None
  for workdir in workdirs:
    run = evaluate.load_run(workdir)
    if run.step < run.config.steps:  # a sweep's run still in flight: not a trained model
      print(f"{workdir}: skipped, its last checkpoint is step {run.step} of "
            f"{run.config.steps}", file=sys.stderr, flush=True)
      continue
    kind, d_train = run.config.position.kind, run.config.task.d_train
    counts = list_heights.score_run(run, _SPLIT.value, num_examples=_EXAMPLES.value)
    runs[workdir] = dict(kind=kind, seed=run.config.seed, step=run.step, counts=counts)
    print(f"{workdir}: {kind} seed {run.config.seed}", file=sys.stderr, flush=True)
  if not runs:
    raise ValueError(f"--workdirs={_WORKDIRS.value!r}: no run has finished training")
  out = list_heights.tables(runs, d_train)
  heights = sorted({h for t in out.values() for h in t["by_height"]})
  levels = sorted({v for t in out.values() for v in t["trained_heights_by_level"][1]})
  siblings = sorted({v for t in out.values() for v in t["trained_heights_by_sibling"][1]})
  top = lambda k: (out[k]["by_height"][heights[-1]] or {}).get("mean", 0.0)
  order = sorted(out, key=lambda k: -top(k))
  print(f"\n{_SPLIT.value}, first {_EXAMPLES.value} examples; accuracy at `]` by the closed "
        f"list's height (lists of height <= {d_train} were trained), mean over seeds [95% "
        "t-interval]:\n")
  print(bench_util.markdown_table(["position", "runs"] + [f"height {h}" for h in heights],
                                  [[k, sum(r["kind"] == k for r in runs.values())] +
                                   [_fmt(out[k]["by_height"][h]) for h in heights] for k in order]))
  print(f"\nLists of the trained heights by their level (0: outermost; trained: "
        f"height + level <= {d_train}):\n")
  print(bench_util.markdown_table(["position", "height"] + [f"level {v}" for v in levels],
                                  [[k, h] + [_fmt(out[k]["trained_heights_by_level"][h][v])
                                             for v in levels]
                                   for k in order for h in range(1, d_train + 1)]))
  print(f"\nLists of the trained heights under the outermost, by their sibling (the highest "
        f"list closed before them in the same list; 0: none; trained: < {d_train}):\n")
  print(bench_util.markdown_table(["position", "height"] + [f"sibling {v}" for v in siblings],
                                  [[k, h] + [_fmt(out[k]["trained_heights_by_sibling"][h][v])
                                             for v in siblings]
                                   for k in order for h in range(1, d_train + 1)]))
  bench_util.write_json(_OUT.value, dict(machine=bench_util.machine(), split=_SPLIT.value,
                                         examples=_EXAMPLES.value, d_train=d_train, runs=runs,
                                         by_kind=out))


if __name__ == "__main__":
  app.run(main)
