"""What a fix superseded, kept as data: `results/<preset>/superseded.json`.

When a scheme's code is fixed, its summaries are withdrawn (git keeps them)
and the sweep reruns the same seeds from scratch. This file keeps what the
withdrawn summaries scored, each split's scalar metrics per seed, so that the
report can say what the fix changed (`fix_report.py`) from the committed data
alone, with no git history at hand. Each cell records the commit it was read
at, where its summaries were then, and why they were withdrawn. Written from
the commit before the withdrawal (`git log --diff-filter=D` finds it):

  python -m experiments.extrapolation.superseded --preset converged \\
      --commit f715821^ --why "stick-breaking's remainder as its kernel's test" \\
      benchmarks/results/runs/converged/dyck/scratch/stickbreaking

Each directory is `.../<task>/<arm>/<group>`; a cell already in the file is
replaced, the rest are kept.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from bifocal_jax.training.atomic_files import write_json_atomically
from experiments.extrapolation import paired_revisions
from experiments.extrapolation import presets as presets_lib
from experiments.extrapolation import runs as runs_lib

FILE = "superseded.json"


def path(results_dir: str) -> str:
  return os.path.join(results_dir, FILE)


def load(results_dir: str) -> list[dict]:
  """The cells of `results_dir`'s file ([] without one), seeds as ints; a
  ValueError naming the file when it is not what `main` writes."""
  try:
    with open(path(results_dir)) as f:
      data = json.load(f)
  except FileNotFoundError:
    return []
  except json.JSONDecodeError as e:
    raise ValueError(f"{path(results_dir)}: not readable as JSON ({e})") from None
  try:
    return [{**cell, "seeds": {int(seed): s for seed, s in cell["seeds"].items()}}
            for cell in data["cells"]]
  except (KeyError, TypeError, ValueError, AttributeError) as e:
    raise ValueError(f"{path(results_dir)}: not a superseded-summaries file "
                     f"(expected {{'cells': [{{..., 'seeds': {{seed: summary}}}}]}}; {e!r})") from None


def scalars(summary: dict) -> dict:
  """The summary's `splits`, each split's numbers only (what the boards read)."""
  return {"splits": {split: {k: v for k, v in metrics.items()
                             if isinstance(v, (int, float)) and not isinstance(v, bool)}
                     for split, metrics in summary["splits"].items()}}


def cell(directory: str, commit: str, why: str) -> dict:
  """The cell of `directory` (`.../<task>/<arm>/<group>`) at `commit`."""
  task, arm, group = os.path.normpath(directory).split(os.sep)[-3:]
  seeds = paired_revisions.read_revision(directory, commit)
  if not seeds:
    raise ValueError(f"{directory} at {commit}: no seed*.json there")
  full = subprocess.run(["git", "rev-parse", commit], capture_output=True, text=True,
                        check=True).stdout.strip()
  return dict(task=task, arm=arm, group=group, commit=full, directory=directory, why=why,
              seeds={str(seed): scalars(s) for seed, s in sorted(seeds.items())})


def merged(existing: list[dict], new: list[dict]) -> list[dict]:
  """`existing` with `new`'s cells replacing those of the same (task, arm, group)."""
  key = lambda c: (c["task"], c["arm"], c["group"])
  out = {key(c): {**c, "seeds": {str(s): v for s, v in c["seeds"].items()}} for c in existing}
  out.update({key(c): c for c in new})
  return [out[k] for k in sorted(out)]


def main(argv: list[str] | None = None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--preset", required=True, help="Whose results/<preset>/ gets the file.")
  parser.add_argument("--commit", required=True, help="The commit the summaries are read at.")
  parser.add_argument("--why", required=True, help="Why they were withdrawn (one line).")
  parser.add_argument("directories", nargs="+", help="Summary directories at --commit.")
  args = parser.parse_args(argv)
  if args.preset not in presets_lib.PRESETS:
    parser.error(f"--preset={args.preset!r}: must be one of {', '.join(presets_lib.PRESETS)}")
  results_dir = os.path.join(runs_lib.RESULTS_DIR, args.preset)
  try:
    cells = [cell(d, args.commit, args.why) for d in args.directories]
    os.makedirs(results_dir, exist_ok=True)
    write_json_atomically(path(results_dir), {"cells": merged(load(results_dir), cells)})
  except (ValueError, subprocess.CalledProcessError) as e:
    sys.exit(f"superseded: {e}")
  for c in cells:
    print(f"{c['task']}/{c['arm']}/{c['group']}: {len(c['seeds'])} seeds at {c['commit'][:7]}")


if __name__ == "__main__":
  main()
