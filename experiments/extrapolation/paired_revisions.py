"""The same runs' summaries at two commits, paired over seeds.

When a run's code changes (a fix, a re-run), its summaries are withdrawn and
the sweep writes new ones under the same names: same seeds, same data, only
the change differs. This pairs each split's accuracy, new minus old, over the
seeds both revisions have (`bifocal_jax.evaluation.stats.paired_difference`):

  python -m experiments.extrapolation.paired_revisions --old 5ea8a21 \\
      results/converged/listops_depth/scratch/randomized_rope

`--new` defaults to the working tree. Summaries committed before they moved
(`results/PRESET/` was `benchmarks/results/runs/PRESET/` before commit 7279abc) are read from
`--old_directory`. Dyck splits pair `close_accuracy`
(closing-bracket accuracy), the others `accuracy`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys

from bifocal_jax.evaluation import stats

_SEED = re.compile(r"seed(\d+)\.json$")


def read_revision(directory: str, revision: str | None) -> dict[int, dict]:
  """`{seed: summary}` of `directory/seed*.json` at `revision` (None: the files)."""
  if revision is None:
    names = os.listdir(directory) if os.path.isdir(directory) else []

    def read(name):
      with open(os.path.join(directory, name)) as f:
        return f.read()

  else:
    listing = subprocess.run(["git", "ls-tree", "--name-only", f"{revision}:{directory}"],
                             capture_output=True, text=True, check=False)
    if listing.returncode:
      raise ValueError(f"{directory} at {revision}: {listing.stderr.strip()}")
    names = listing.stdout.split()

    def read(name):
      return subprocess.run(["git", "show", f"{revision}:{directory}/{name}"],
                            capture_output=True, text=True, check=True).stdout

  out = {}
  for name in names:
    if (m := _SEED.search(name)):
      try:
        out[int(m.group(1))] = json.loads(read(name))
      except json.JSONDecodeError as e:
        raise ValueError(f"{directory}/{name} at {revision or 'the files'}: not JSON ({e})") from e
  return out


def paired_rows(old: dict[int, dict], new: dict[int, dict]) -> list[dict]:
  """Per split of the new summaries: the seeds both have, the old and new
  means, and `stats.paired_difference(new, old)`."""
  seeds = sorted(set(old) & set(new))
  rows = []
  for split in (new[seeds[0]]["splits"] if seeds else {}):
    metric = "close_accuracy" if "close_accuracy" in new[seeds[0]]["splits"][split] else "accuracy"
    pairs = [(old[s]["splits"][split][metric], new[s]["splits"][split][metric]) for s in seeds
             if split in old[s]["splits"]]
    if not pairs:
      continue
    before, after = zip(*pairs)
    rows.append(dict(split=split, metric=metric, seeds=len(pairs), old=sum(before) / len(pairs),
                     new=sum(after) / len(pairs), diff=stats.paired_difference(after, before)))
  return rows


def markdown(rows: list[dict]) -> str:
  lines = ["| split | metric | seeds | old | new | new - old [95% interval] |",
           "| --- | --- | --- | --- | --- | --- |"]
  for r in rows:
    d = r["diff"]
    interval = "" if d["ci95"] is None else f" [{d['ci95'][0]:+.3f}, {d['ci95'][1]:+.3f}]"
    lines.append(f"| {r['split']} | {r['metric']} | {r['seeds']} | {r['old']:.3f} | "
                 f"{r['new']:.3f} | {d['mean']:+.3f}{interval} |")
  return "\n".join(lines)


def compare(directory: str, old: str, new: str | None = None,
            old_directory: str | None = None) -> str:
  """The markdown table of `directory`'s summaries at `new` (None: the
  files) against those at `old` (in `old_directory` where they were then);
  a ValueError when a revision or file is unreadable or no seed is in both."""
  rows = paired_rows(read_revision(old_directory or directory, old),
                     read_revision(directory, new))
  if not rows:
    raise ValueError(f"no seed of {directory} in both revisions")
  return markdown(rows)


def main(argv: list[str] | None = None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--old", required=True, help="The commit of the old summaries.")
  parser.add_argument("--new", help="The commit of the new summaries (default: the files).")
  parser.add_argument("--old_directory",
                      help="Where the old summaries were at --old, if not the same directory.")
  parser.add_argument("directory", help="The summaries' directory (.../<task>/<arm>/<kind>).")
  args = parser.parse_args(argv)
  try:
    print(compare(args.directory, args.old, args.new, args.old_directory))
  except ValueError as e:
    sys.exit(f"paired_revisions: {e}")


if __name__ == "__main__":
  main()
