r"""Re-runs one landed run of a sweep as the preset runs it now, into another
directory, and sets its splits beside the landed summary's.

  python -m experiments.extrapolation.rerun --preset converged --run listops_depth/scratch/rope/seed0 \
      --out /tmp/rerun

What a change of the code or of a task's overrides does to a finished run
(length groups, a fix): the same seed and data, trained and evaluated by
`sweep.execute` into `OUT` (its workdir `OUT/<run>`; a run already
trained there is only evaluated), its summary written to `OUT/<run>.json`
(`run_summary.summary_of`), the landed one read from `--results`. One run
against one run: a difference inside the intervals and the seeds' spread is
what a change of float rounding alone does; a wider one needs the seeds
(`paired_revisions.py`).

`--attach_probe`: a landed run summarized before the mechanism probes
existed, its workdir gone, gets the rerun's `probe` (`eval.py --probe` of the
model trained again), recorded as such under `probe_rerun` with the rerun's
splits beside the landed ones, so the probe tables can count it; a rerun
already summarized in `OUT` is read rather than trained again.
"""

from __future__ import annotations

import json
import os
import sys
import time

from absl import app, flags

from bifocal_jax.training.atomic_files import write_atomically
from experiments.extrapolation import report_tables
from experiments.extrapolation import sweep
from experiments.extrapolation.presets import PRESETS
from experiments.extrapolation.run_summary import logged_seconds, summary_of, summary_path
from experiments.extrapolation.runs import Run

# `--preset`, `--out` and `--results` are sweep.py's flags (imported with it).
_RUN = flags.DEFINE_string("run", None, "The run's name: TASK/ARM/KIND/seedN.")
_ATTACH_PROBE = flags.DEFINE_bool(
    "attach_probe", False, "Write the rerun's probes into the landed summary, which has none.")


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


def with_rerun_probe(landed: dict, rerun: dict) -> dict:
  """The landed summary with the rerun's `probe`, and under `probe_rerun`
  where it came from: the rerun's date, commit, seconds and, per split, its
  headline metric beside the landed one's (a ValueError when the landed run
  has probes of its own or the rerun has none)."""
  name = f"{landed.get('task')}/{landed.get('arm')}/{landed.get('kind')}/seed{landed.get('seed')}"
  if landed.get("probe"):
    raise ValueError(f"{name}: the landed summary has probes of its own")
  if not rerun.get("probe"):
    raise ValueError(f"{name}: the rerun has no probes (its task runs none)")
  identity = ("task", "arm", "kind", "seed")
  if tuple(rerun.get(k) for k in identity) != tuple(landed.get(k) for k in identity):
    raise ValueError(f"{name}: the rerun is of another run ({rerun.get('task')}/"
                     f"{rerun.get('arm')}/{rerun.get('kind')}/seed{rerun.get('seed')})")
  splits = {}
  for split, now in rerun["splits"].items():
    metric = "close_accuracy" if "close_accuracy" in now else "accuracy"
    if metric in landed["splits"].get(split, {}):  # splits both runs scored that way
      splits[split] = {"metric": metric, "landed": landed["splits"][split][metric],
                       "rerun": now[metric]}
  return {**landed, "probe": rerun["probe"],
          "probe_rerun": {"date": rerun.get("date"), "commit": rerun.get("commit"),
                          "seconds": rerun.get("seconds"), "splits": splits}}


def main(argv):
  del argv
  preset, out = sweep._PRESET.value, sweep._OUT.value  # pylint: disable=protected-access
  if preset is None or _RUN.value is None:
    sys.exit("error: --preset and --run are required")
  results = sweep._RESULTS.value or os.path.join(sweep.RESULTS_DIR, preset)  # pylint: disable=protected-access
  try:
    run = find_run(preset, _RUN.value)
  except ValueError as e:
    sys.exit(f"error: {e}")
  landed_path = summary_path(results, run)
  if not os.path.exists(landed_path):
    sys.exit(f"error: --run={_RUN.value!r}: no landed summary at {landed_path}")
  with open(landed_path) as f:
    landed = json.load(f)
  if _ATTACH_PROBE.value and landed.get("probe"):  # before hours of training
    sys.exit(f"error: --run={_RUN.value!r}: the landed summary has probes of its own")
  path = summary_path(out, run)
  if _ATTACH_PROBE.value and os.path.exists(path):
    with open(path) as f:
      rerun = json.load(f)
    print(f"read {path}")
  else:
    rerun = _train_again(run, preset, out, results)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
      json.dump(rerun, f, indent=1)
    print(f"wrote {path}")
  print(f"\n{comparison(landed, rerun)}")
  if _ATTACH_PROBE.value:
    try:
      attached = with_rerun_probe(landed, rerun)
    except ValueError as e:
      sys.exit(f"error: {e}")
    write_atomically(landed_path, json.dumps(attached, indent=1))  # whole, or as it was
    print(f"attached its probes to {landed_path}")


def _train_again(run: Run, preset: str, out: str, results: str) -> dict:
  """`run` trained and evaluated into `out` by the sweep's own path; its summary."""
  budget = sweep.Sweep(PRESETS[preset], out, results).budget(run.task)
  start = time.time()
  with sweep._Stop() as stop:  # pylint: disable=protected-access
    status = sweep.execute(run, out, budget, stop, print)
  if status != "done":
    sys.exit(f"error: {run.name}: {status} (see {run.workdir(out)})")
  seconds = max(logged_seconds(run.workdir(out)), time.time() - start)
  return summary_of(run, out, budget, seconds)


if __name__ == "__main__":
  app.run(main)
