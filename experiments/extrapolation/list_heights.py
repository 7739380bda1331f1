"""Where ListOps answers fail: accuracy at each `]` by the closed list's height and level.

A `listops_depth` expression deeper than training is wrong at some `]`; two
causes predict different places. A list's *height* (1 for a list of digits,
1 + its highest argument list's otherwise) is how many nested evaluations its
value composes: a list higher than any trained asks the model for a longer
computation. Its *level* (0 for the outermost list, 1 inside it, ...) is how
deep it sits: a low list at a high level asks only for a known computation at
a position deeper than trained. Its *sibling* (the height of the highest list
closed before it inside the same enclosing list; 0 when none) says what the
model has just walked past: a list after a sibling higher than any trained
one asks for a known computation in a context that no training string had.
`test_depth` expressions have all three; the split's accuracy mixes them.

`close_labels` labels every `]` from the token ids; `score_run` scores a
trained run's predictions (the evaluation's argmax over the digits) on a
split, counted by `(height, level, sibling)`; `tables` reads many runs' counts
as per-kind accuracies, mean over seeds.

The command scores the sweep's trained runs and prints the tables:

  python -m experiments.extrapolation.list_heights \
      --workdirs='OUT/listops_depth/scratch/*/seed*' \
      --examples=1000 --out=results/analyses/list_heights.json \
      --plot=results/analyses/list_heights.png

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

import jax
import jax.numpy as jnp
import numpy as np
from absl import flags

from bifocal_jax.evaluation import evaluate, probe
from bifocal_jax.evaluation import evaluator
from experiments.extrapolation import labelled_counts
from experiments.extrapolation import plot_style
from experiments.extrapolation import scored_runs
from experiments.extrapolation.report_tables import fmt_interval

LABELS = ("height", "level", "sibling")


def close_labels(inputs_BxL: np.ndarray, valid_BxL: np.ndarray,
                 vocab: probe.Brackets) -> dict[str, np.ndarray]:
  """Per position (`-1` but at a `]`): `height` of the list it closes (1: only
  digits inside), its `level` (lists around it: 0 for the outermost) and its
  `sibling` (the highest list closed before it in the same enclosing list: 0
  when none, -1 for the outermost), from the probes' stack over the token ids
  (`probe.nesting_labels`)."""
  labels = probe.nesting_labels(inputs_BxL, valid_BxL, vocab)
  closing = labels["height"] >= 0
  return dict(height=labels["height"], level=np.where(closing, labels["depth"], -1),
              sibling=labels["sibling"])


def count(correct_BxL: np.ndarray, labels: dict[str, np.ndarray]) -> dict[str, dict[str, int]]:
  """`{"h,l,s": {"correct": c, "total": n}}` over the labelled `]`, keyed by
  height, level and sibling (`labelled_counts.count`)."""
  return labelled_counts.count(correct_BxL, labels["height"] >= 0, labels, LABELS)


def score_run(run: evaluate.Run, split: str, *, num_examples: int | None = None) -> dict:
  """`count` of `run`'s correct answers at every `]` of the first
  `num_examples` of `split`, predicted as the evaluation predicts them."""
  setup = run.setup
  if setup.task.name != "listops_depth":
    raise ValueError(f"list_heights: task {setup.task.name!r} scores no list but the last "
                     "(needs listops_depth)")
  vocab = probe.brackets(setup.task)

  class_ids = jnp.asarray(evaluator.class_ids(setup.task))

  @jax.jit
  def predict(params, inputs, valid):
    logits = setup.model(params)(inputs, valid, rng=run.evaluator.rng, train=False)
    return class_ids[logits[..., class_ids].argmax(-1)]

  counts = {}
  with jax.set_mesh(setup.mesh):
    for batch in run.evaluator.split_batches(split, num_examples=num_examples):
      predicted = np.asarray(predict(run.params, batch["inputs"], batch["valid"]))
      correct = (predicted == batch["targets"]) & (batch["mask"] > 0)
      counts = labelled_counts.merge(
          counts, count(correct, close_labels(batch["inputs"], batch["valid"], vocab)))
  return counts


def tables(runs: dict[str, dict], d_train: int) -> dict:
  """Per kind, over `runs` (`{name: {"kind": k, "counts": count, ...}}`), each
  cell the mean of its runs' accuracies (`labelled_counts.over_seeds`): by
  height; at each trained height (<= `d_train`) by level; and, below the
  outermost list, by sibling."""
  grouped, (heights, levels, siblings) = labelled_counts.by_kind(runs, len(LABELS))
  siblings = [s for s in siblings if s != -1]
  trained = range(1, d_train + 1)

  def kind_tables(rs):
    over_seeds = labelled_counts.over_seeds
    by_level = lambda h, v: over_seeds(rs, lambda a, b, _: a == h and b == v)
    by_sibling = lambda h, s: over_seeds(rs, lambda a, _, c: a == h and c == s)
    return dict(
        by_height={h: over_seeds(rs, lambda a, *_, h=h: a == h) for h in heights},
        trained_heights_by_level={h: {
            v: by_level(h, v) for v in levels
        } for h in trained},
        trained_heights_by_sibling={h: {
            s: by_sibling(h, s) for s in siblings
        } for h in trained})

  return {kind: kind_tables(rs) for kind, rs in grouped.items()}


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
  if FLAGS.from_json:
    source = scored_runs.read_scored_runs(FLAGS.from_json, "list_heights.py",
                                           fields=("d_train", "split", "examples", "machine"),
                                           labels=3)
    runs, d_train, split, examples, machine = (
        source[k] for k in ("runs", "d_train", "split", "examples", "machine"))
  else:
    split, examples, machine = FLAGS.split, FLAGS.examples, scored_runs.machine()
    runs, task = scored_runs.score_trained_runs(
        FLAGS.workdirs, lambda run: score_run(run, split, num_examples=examples))
    d_train = task.d_train
  out = tables(runs, d_train)
  heights = sorted({h for t in out.values() for h in t["by_height"]})
  top = lambda k: (out[k]["by_height"][heights[-1]] or {}).get("mean", 0.0)
  order = sorted(out, key=lambda k: -top(k))
  print(f"\n{split}, first {examples} examples; accuracy at `]` by the closed "
        f"list's height (lists of height <= {d_train} were trained), mean over seeds [95% "
        "t-interval]:\n")
  print(scored_runs.markdown_table(["position", "runs"] + [f"height {h}" for h in heights],
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
    print(scored_runs.markdown_table(["position", "height"] + [f"{label} {v}" for v in columns],
                                     [[k, h] + [fmt_interval(out[k][table][h][v]) for v in columns]
                                      for k in order for h in range(1, d_train + 1)]))
  if FLAGS.plot:
    print(f"\nwrote {plot(out, d_train, FLAGS.plot)}")
  scored_runs.write_json(FLAGS.out, dict(machine=machine, split=split,
                                         examples=examples, d_train=d_train, runs=runs,
                                         by_kind=out))


FLAGS = flags.FLAGS


def define_flags() -> None:
  """The command's flags, defined when it runs rather than on import (the
  module is also imported, beside other commands' flags)."""
  flags.DEFINE_string("workdirs", None,
                      "Globs (comma-separated) of trained listops_depth run directories.")
  flags.DEFINE_string("from_json", None, "Read the runs' counts from these earlier --outs "
                      "(comma-separated) instead of scoring --workdirs.")
  flags.DEFINE_string("split", "test_depth", "The split to score.")
  flags.DEFINE_integer("examples", 1000, "Its first examples.")
  flags.DEFINE_string("out", None, "Write the counts and the tables as JSON here.")
  flags.DEFINE_string("plot", None, "Draw the three tables as a figure here (.png).")


if __name__ == "__main__":
  define_flags()
  scored_runs.run_main(main)
