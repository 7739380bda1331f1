"""Where Dyck answers fail: closing-bracket accuracy by depth and by the pairs
just walked past.

After each token of a Dyck string the model names the bracket that closes the
innermost open one (Yao et al.'s score, `metrics.close_correct`). Past the
training depth `m` two things at a position can be new to the model: its
*depth* (brackets open after the token), and its *skipped* height: the
height of the highest pair closed so far directly inside the innermost open
bracket, i.e. what lies between that bracket and the token the model reads.
Training strings are at most `m` deep, so a pair inside an open bracket is at
most `m - 1` high there; a `test_depth` string (depths `m+1..2m`) has both
deeper positions and higher skipped pairs, and its accuracy mixes them.
`by_skipped_at_trained_depths` holds depth within training, so a fall there is
the skipped pairs' alone.

`position_labels` labels every position from the token ids (the probes'
stack, `probe.nesting_labels`); `score_run` counts a trained run's correct
positions on a split by `(depth, skipped)` (`labelled_counts`); `tables` reads
many runs' counts as per-kind accuracies, mean over seeds. `walk_back` says how
far back the innermost open bracket is at each skipped height: a long string
can skip a pair of trained height yet need a longer look back, or not.

The command scores the sweep's trained runs and prints the tables:

  python -m experiments.extrapolation.dyck_skips --workdirs='OUT/dyck/scratch/*/seed*' \
      --examples=1000 --out=results/analyses/dyck_skips.json

Each workdir is a trained Dyck run (its last checkpoint); its kind and seed
are read from its config; a run whose last checkpoint is short of its `steps`
(one a sweep is still training) is skipped, and said so. `--split` also takes a
Dyck file (`k8_m20.test`: a published one, its first `--examples` lines).
`--from_json` reads the counts of earlier `--out`s instead (comma-separated,
merged: runs scored one at a time make one table). Last, from the data
alone, how far back the innermost open bracket is at each skipped height, on
the split and on training strings (`walk_back`). Prints, per kind
(mean over its runs [95% t-interval]), Yao et al.'s closing-bracket accuracy
by depth, by skipped height (the highest pair closed so far inside the
innermost open bracket), and by skipped height at the trained depths alone.
"""

from __future__ import annotations

from collections.abc import Iterable

import jax
import jax.numpy as jnp
import numpy as np
from absl import flags

from bifocal_jax.evaluation import evaluate, probe
from bifocal_jax.training import metrics
from experiments.extrapolation import labelled_counts
from experiments.extrapolation import scored_runs
from experiments.extrapolation.report_tables import fmt_interval

LABELS = ("depth", "skipped")


def position_labels(inputs_BxL: np.ndarray, valid_BxL: np.ndarray,
                    vocab: probe.Brackets) -> dict[str, np.ndarray]:
  """Per position, after its token: `depth` (brackets open; 0 on padding) and
  `skipped` (the highest pair closed so far inside the innermost open bracket:
  0 when none yet, -1 when none is open)."""
  labels = probe.nesting_labels(inputs_BxL, valid_BxL, vocab)
  return {k: labels[k] for k in LABELS}


def score_run(run: evaluate.Run, split: str, *, num_examples: int | None = None) -> dict:
  """`labelled_counts.count` of `run`'s Yao-correct positions on the first
  `num_examples` of `split` (a task split, or a Dyck file: `Evaluator.batches`),
  keyed `"depth,skipped"`."""
  setup = run.setup
  if setup.task.name != "dyck":
    raise ValueError(f"dyck_skips: task {setup.task.name!r} has no closing-bracket score "
                     "(needs dyck)")
  vocab = probe.brackets(setup.task)

  @jax.jit
  def correct(params, inputs, valid, targets, mask):
    logits = setup.model(params)(inputs, valid, rng=run.evaluator.rng, train=False)
    return metrics.close_correct(logits, targets, mask, jnp.asarray(vocab.close_ids))

  counts = {}
  with jax.set_mesh(setup.mesh):
    for batch in run.evaluator.batches(split, num_examples=num_examples):
      ok = np.asarray(
          correct(run.params, *(batch[k] for k in ("inputs", "valid", "targets", "mask"))))
      labels = position_labels(batch["inputs"], batch["valid"], vocab)
      counts = labelled_counts.merge(counts,
                                     labelled_counts.count(ok, batch["mask"] > 0, labels, LABELS))
  return counts


def walk_back(batches: Iterable[dict[str, np.ndarray]], vocab: probe.Brackets) -> dict[int, dict]:
  """Per skipped height, over the scored positions (a bracket open) of
  `batches`: how many (`positions`), and the median and 90th percentile of the
  tokens back to the innermost open bracket (`median`, `p90`): how far the
  model must look past the skipped pairs to find it. A property of the data."""
  back: dict[int, list[np.ndarray]] = {}
  for batch in batches:
    labels = probe.nesting_labels(batch["inputs"], batch["valid"], vocab)
    scored = labels["depth"] > 0
    distance = np.arange(scored.shape[1])[None, :] - labels["top"]
    for s in np.unique(labels["skipped"][scored]):
      back.setdefault(int(s), []).append(distance[scored & (labels["skipped"] == s)])
  out = {}
  for s, parts in sorted(back.items()):
    d = np.concatenate(parts)
    median, p90 = np.percentile(d, [50, 90])
    out[s] = dict(positions=int(d.size), median=float(median), p90=float(p90))
  return out


def tables(runs: dict[str, dict], m: int) -> dict:
  """Per kind, over `runs` (`{name: {"kind": k, "counts": count, ...}}`), each
  cell the mean of its runs' accuracies (`labelled_counts.over_seeds`): by
  depth; by skipped height; and by skipped height at the trained depths
  (<= `m`)."""
  grouped, (depths, skips) = labelled_counts.by_kind(runs, len(LABELS))
  over_seeds = labelled_counts.over_seeds

  def kind_tables(rs):
    return dict(
        by_depth={d: over_seeds(rs, lambda a, _, d=d: a == d) for d in depths},
        by_skipped={s: over_seeds(rs, lambda _, b, s=s: b == s) for s in skips},
        by_skipped_at_trained_depths={
            s: over_seeds(rs, lambda a, b, s=s: a <= m and b == s) for s in skips
        })

  return {kind: kind_tables(rs) for kind, rs in grouped.items()}


def main(argv):
  del argv
  if FLAGS.from_json:
    source = scored_runs.read_scored_runs(FLAGS.from_json, "dyck_skips.py",
                                          fields=("m", "split", "examples", "machine"), labels=2,
                                          optional=("walk_back",))
    runs, m, split, examples, machine, walk = (
        source[k] for k in ("runs", "m", "split", "examples", "machine", "walk_back"))
  else:
    split, examples, machine = FLAGS.split, FLAGS.examples, scored_runs.machine()
    first = []  # a scored run, whose evaluator reads the strings for the walk back

    def score(run):
      if not first:
        first.append(run)
      return score_run(run, split, num_examples=examples)

    runs, task = scored_runs.score_trained_runs(FLAGS.workdirs, score)
    m = task.m
    # the data's own walk back, on the split and on training strings
    vocab = probe.brackets(first[0].setup.task)
    walk = {
        name: walk_back(first[0].evaluator.batches(name, num_examples=examples), vocab)
        for name in dict.fromkeys((split, "train"))
    }
  out = tables(runs, m)
  depths = sorted({d for t in out.values() for d in t["by_depth"]})
  skips = sorted({s for t in out.values() for s in t["by_skipped"]})
  order = sorted(out, key=lambda k: -((out[k]["by_depth"][depths[-1]] or {}).get("mean", 0.0)))
  seeds = lambda k: sum(r["kind"] == k for r in runs.values())
  print(f"\n{split}, first {examples} strings; closing-bracket accuracy by depth "
        f"(trained: <= {m}), mean over seeds [95% t-interval]:\n")
  print(scored_runs.markdown_table(["position", "runs"] + [f"depth {d}" for d in depths],
                                   [[k, seeds(k)] + [fmt_interval(out[k]["by_depth"][d])
                                                     for d in depths] for k in order]))
  for table, what in (("by_skipped", "every position"),
                      ("by_skipped_at_trained_depths", f"positions at depth <= {m}")):
    print(f"\nBy skipped height (the highest pair closed so far inside the innermost open "
          f"bracket; trained: < {m}), {what}:\n")
    print(scored_runs.markdown_table(["position", "runs"] + [f"skipped {s}" for s in skips],
                                     [[k, seeds(k)] + [fmt_interval(out[k][table][s])
                                                       for s in skips] for k in order]))
  if walk:
    print(f"\nTokens back to the innermost open bracket by skipped height, median / 90th "
          f"percentile (first {examples} strings; the data's, not a model's):\n")
    skips = sorted({int(s) for w in walk.values() for s in w})
    cell = lambda w, s: (f"{w[s]['median']:.0f} / {w[s]['p90']:.0f}" if s in w else "-")
    print(scored_runs.markdown_table(
        ["strings"] + [f"skipped {s}" for s in skips],
        [[name] + [cell({int(k): v for k, v in w.items()}, s) for s in skips]
         for name, w in walk.items()]))
  scored_runs.write_json(FLAGS.out, dict(machine=machine, split=split, examples=examples, m=m,
                                          runs=runs, by_kind=out, walk_back=walk))


FLAGS = flags.FLAGS


def define_flags() -> None:
  """The command's flags, defined when it runs rather than on import (the
  module is also imported, beside other commands' flags)."""
  flags.DEFINE_string("workdirs", None, "Globs (comma-separated) of trained Dyck run directories.")
  flags.DEFINE_string("from_json", None, "Read the runs' counts from these earlier --outs "
                      "(comma-separated) instead of scoring --workdirs.")
  flags.DEFINE_string("split", "test_depth",
                      "A task split, or a Dyck file (`k8_m20.test`: a published one).")
  flags.DEFINE_integer("examples", 1000, "Its first examples (a file's first lines).")
  flags.DEFINE_string("out", None, "Write the counts and the tables as JSON here.")


if __name__ == "__main__":
  define_flags()
  scored_runs.run_main(main)
