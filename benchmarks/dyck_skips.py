r"""Where trained Dyck runs fail past the training depth: closing-bracket
accuracy at each position by its depth and by the pairs just walked past
(`bifocal_jax/dyck_skips.py`).

  python benchmarks/dyck_skips.py --workdirs='OUT/dyck/scratch/*/seed*' \
      --examples=1000 --out=benchmarks/results/dyck_skips.json

Each workdir is a trained Dyck run (its last checkpoint); its kind and seed
are read from its config; a run whose last checkpoint is short of its `steps`
(one a sweep is still training) is skipped, and said so. `--split` also takes a
Dyck file (`k8_m20.test`: a published one, its first `--examples` lines).
`--from_json` reads the counts of earlier `--out`s instead (comma-separated,
merged: runs scored one at a time make one table). Last, from the data
alone, how far back the innermost open bracket is at each skipped height, on
the split and on training strings (`dyck_skips.walk_back`). Prints, per kind
(mean over its runs [95% t-interval]), Yao et al.'s closing-bracket accuracy
by depth, by skipped height (the highest pair closed so far inside the
innermost open bracket), and by skipped height at the trained depths alone.
"""

from __future__ import annotations

import os
import sys

from absl import flags

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_util  # pylint: disable=g-import-not-at-top,wrong-import-position
from bifocal_jax import dyck_skips  # pylint: disable=g-import-not-at-top,wrong-import-position,wrong-import-order
from bifocal_jax.evaluation import probe
from report_tables import fmt_interval  # pylint: disable=g-import-not-at-top,wrong-import-position

_WORKDIRS = flags.DEFINE_string("workdirs", None,
                                "Globs (comma-separated) of trained Dyck run directories.")
_FROM_JSON = flags.DEFINE_string("from_json", None,
                                 "Read the runs' counts from these earlier --outs "
                                 "(comma-separated) instead of scoring --workdirs.")
_SPLIT = flags.DEFINE_string("split", "test_depth",
                             "A task split, or a Dyck file (`k8_m20.test`: a published one).")
_EXAMPLES = flags.DEFINE_integer("examples", 1000, "Its first examples (a file's first lines).")
_OUT = flags.DEFINE_string("out", None, "Write the counts and the tables as JSON here.")


def main(argv):
  del argv
  if _FROM_JSON.value:
    source = bench_util.read_scored_runs(_FROM_JSON.value, "dyck_skips.py",
                                         fields=("m", "split", "examples", "machine"), labels=2,
                                         optional=("walk_back",))
    runs, m, split, examples, machine, walk = (
        source[k] for k in ("runs", "m", "split", "examples", "machine", "walk_back"))
  else:
    split, examples, machine = _SPLIT.value, _EXAMPLES.value, bench_util.machine()
    first = []  # a scored run, whose evaluator reads the strings for the walk back

    def score(run):
      if not first:
        first.append(run)
      return dyck_skips.score_run(run, split, num_examples=examples)

    runs, task = bench_util.score_trained_runs(_WORKDIRS.value, score)
    m = task.m
    # the data's own walk back, on the split and on training strings
    vocab = probe.brackets(first[0].setup.task)
    walk = {
        name: dyck_skips.walk_back(first[0].evaluator.batches(name, num_examples=examples), vocab)
        for name in dict.fromkeys((split, "train"))
    }
  out = dyck_skips.tables(runs, m)
  depths = sorted({d for t in out.values() for d in t["by_depth"]})
  skips = sorted({s for t in out.values() for s in t["by_skipped"]})
  order = sorted(out, key=lambda k: -((out[k]["by_depth"][depths[-1]] or {}).get("mean", 0.0)))
  seeds = lambda k: sum(r["kind"] == k for r in runs.values())
  print(f"\n{split}, first {examples} strings; closing-bracket accuracy by depth "
        f"(trained: <= {m}), mean over seeds [95% t-interval]:\n")
  print(bench_util.markdown_table(["position", "runs"] + [f"depth {d}" for d in depths],
                                  [[k, seeds(k)] + [fmt_interval(out[k]["by_depth"][d]) for d in depths]
                                   for k in order]))
  for table, what in (("by_skipped", "every position"),
                      ("by_skipped_at_trained_depths", f"positions at depth <= {m}")):
    print(f"\nBy skipped height (the highest pair closed so far inside the innermost open "
          f"bracket; trained: < {m}), {what}:\n")
    print(bench_util.markdown_table(["position", "runs"] + [f"skipped {s}" for s in skips],
                                    [[k, seeds(k)] + [fmt_interval(out[k][table][s]) for s in skips]
                                     for k in order]))
  if walk:
    print(f"\nTokens back to the innermost open bracket by skipped height, median / 90th "
          f"percentile (first {examples} strings; the data's, not a model's):\n")
    skips = sorted({int(s) for w in walk.values() for s in w})
    cell = lambda w, s: (f"{w[s]['median']:.0f} / {w[s]['p90']:.0f}" if s in w else "-")
    print(bench_util.markdown_table(
        ["strings"] + [f"skipped {s}" for s in skips],
        [[name] + [cell({int(k): v for k, v in w.items()}, s) for s in skips]
         for name, w in walk.items()]))
  bench_util.write_json(_OUT.value, dict(machine=machine, split=split, examples=examples, m=m,
                                         runs=runs, by_kind=out, walk_back=walk))


if __name__ == "__main__":
  bench_util.run_main(main)
