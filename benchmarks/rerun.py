r"""Re-runs one landed run of a sweep as the preset runs it now, into another
directory, and sets its splits beside the landed summary's.

  python benchmarks/rerun.py --preset converged --run listops_depth/scratch/rope/seed0 \
      --out /tmp/rerun

What a change of the code or of a task's overrides does to a finished run
(length groups, a fix): the same seed and data, trained and evaluated by
`extrapolation.execute` into `OUT` (its workdir `OUT/<run>`; a run already
trained there is only evaluated), its summary written to `OUT/<run>.json`
(`run_summary.summary_of`), the landed one read from `--results`. One run
against one run: a difference inside the intervals and the seeds' spread is
what a change of float rounding alone does; a wider one needs the seeds
(`paired_revisions.py`).
"""

from __future__ import annotations

import json
import os
import sys
import time

from absl import app, flags

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import extrapolation  # pylint: disable=g-import-not-at-top,wrong-import-position
import report_tables  # pylint: disable=g-import-not-at-top,wrong-import-position
from extrapolation_presets import PRESETS  # pylint: disable=g-import-not-at-top,wrong-import-position
from extrapolation_runs import Run  # pylint: disable=g-import-not-at-top,wrong-import-position
from run_summary import logged_seconds, summary_of, summary_path  # pylint: disable=g-import-not-at-top,wrong-import-position

# `--preset`, `--out` and `--results` are extrapolation.py's flags (imported with it).
_RUN = flags.DEFINE_string("run", None, "The run's name: TASK/ARM/KIND/seedN.")


def find_run(preset_name: str, name: str) -> Run:
  """The preset's run named `name`, or a ValueError naming the choices' form."""
  runs = {r.name: r for r in PRESETS[preset_name].runs()}
  if name not in runs:
    tasks = sorted({r.task.name for r in runs.values()})
    raise ValueError(f"--run={name!r}: no such run in preset {preset_name!r} (names are "
                     f"TASK/ARM/KIND/seedN; its tasks: {', '.join(tasks)})")
  return runs[name]


def comparison(landed: dict, rerun: dict) -> str:
  """A table per split: the landed run's and the rerun's accuracy (Dyck:
  closing-bracket) with their 95% intervals over examples, and rerun minus landed."""
  rows = [["split", "metric", "landed", "rerun", "rerun - landed"], ["---"] * 5]
  for split, now in rerun["splits"].items():
    before = landed["splits"].get(split)
    if before is None:
      continue
    metric = "close_accuracy" if "close_accuracy" in now else "accuracy"
    interval = "close_ci95" if metric == "close_accuracy" else "ci95"
    cells = [report_tables.fmt_interval(dict(mean=s[metric], ci95=s.get(interval)))
             for s in (before, now)]
    rows.append([split, metric, *cells, f"{now[metric] - before[metric]:+.4f}"])
  rows.append(["seconds", "", f"{landed['seconds']:.0f}", f"{rerun['seconds']:.0f}", ""])
  return report_tables.markdown_table(rows)


def main(argv):
  del argv
  preset, out = extrapolation._PRESET.value, extrapolation._OUT.value  # pylint: disable=protected-access
  if preset is None or _RUN.value is None:
    sys.exit("error: --preset and --run are required")
  results = extrapolation._RESULTS.value or os.path.join(extrapolation.RESULTS_DIR, preset)  # pylint: disable=protected-access
  try:
    run = find_run(preset, _RUN.value)
  except ValueError as e:
    sys.exit(f"error: {e}")
  landed_path = summary_path(results, run)
  if not os.path.exists(landed_path):
    sys.exit(f"error: --run={_RUN.value!r}: no landed summary at {landed_path}")
  with open(landed_path) as f:
    landed = json.load(f)
  budget = extrapolation.Sweep(PRESETS[preset], out, results).budget(run.task)
  start = time.time()
  with extrapolation._Stop() as stop:  # pylint: disable=protected-access
    status = extrapolation.execute(run, out, budget, stop, print)
  if status != "done":
    sys.exit(f"error: {run.name}: {status} (see {run.workdir(out)})")
  seconds = max(logged_seconds(run.workdir(out)), time.time() - start)
  rerun = summary_of(run, out, budget, seconds)
  path = summary_path(out, run)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w") as f:
    json.dump(rerun, f, indent=1)
  print(f"wrote {path}\n\n{comparison(landed, rerun)}")


if __name__ == "__main__":
  app.run(main)
