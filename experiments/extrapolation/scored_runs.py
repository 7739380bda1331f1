"""What the failure analyses (`list_heights.py`, `dyck_skips.py`) share: the
sweep's trained runs scored one by one, earlier `--out`s read back and
merged, the machine they were scored on, and their command line.

An analysis's `--out` is JSON: `runs` (`{workdir: {"kind", "seed", "step",
"counts"}}`, each run's `labelled_counts` counts), the fields it was scored
with, and `machine`.
"""

from __future__ import annotations

import datetime
import glob
import json
import os
import platform
import sys
from typing import Callable

import jax

from bifocal_jax.cli import markdown_table, run_main, write_json  # noqa: F401  (the commands' main, their output)
from bifocal_jax.evaluation import evaluate
from experiments.extrapolation import runs as runs_lib


def machine() -> dict:
  """What the counts were scored on, and when."""
  cpu = platform.processor() or platform.machine()
  try:
    with open("/proc/cpuinfo") as f:
      names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
    cpu = names[0] if names else cpu
  except OSError:
    pass
  device = jax.devices()[0]
  try:
    load = tuple(round(x, 2) for x in os.getloadavg())
  except OSError:
    load = None
  return dict(
      date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
      cpu=cpu, cores=os.cpu_count(), backend=jax.default_backend(),
      device=getattr(device, "device_kind", str(device)), devices=jax.device_count(),
      jax=jax.__version__, load_average=load)


def score_trained_runs(pattern: str | None, score: Callable[[evaluate.Run], dict]) -> tuple[dict, object]:
  """`({workdir: {"kind", "seed", "step", "counts": score(run)}}, the last
  run's task config)` over the run directories `pattern` (`--workdirs`) matches,
  each at its last checkpoint. A run whose last checkpoint is short of its
  `steps` (one a sweep is still training) is skipped, and said so on stderr;
  nothing matched, or nothing finished, is a one-line ValueError. `pattern`
  may be several globs, comma-separated."""
  # directories only: a rerun's summaries (`OUT/<run>.json`) sit beside its workdirs
  workdirs = sorted({w for p in (pattern or "").split(",") if p for w in glob.glob(p)
                     if os.path.isdir(w)})
  if not workdirs:
    raise ValueError(f"--workdirs={pattern!r}: matches no directory")
  runs, task = {}, None
  for workdir in workdirs:
    run = evaluate.load_run(workdir)
    if run.step < run.config.steps:
      print(f"{workdir}: skipped, its last checkpoint is step {run.step} of "
            f"{run.config.steps}", file=sys.stderr, flush=True)
      continue
    kind, task = runs_lib.kind_name(run.config.position), run.config.task
    runs[workdir] = dict(kind=kind, seed=run.config.seed, step=run.step, counts=score(run))
    print(f"{workdir}: {kind} seed {run.config.seed}", file=sys.stderr, flush=True)
  if not runs:
    raise ValueError(f"--workdirs={pattern!r}: no run has finished training")
  return runs, task


def read_scored_runs(paths: str, script: str, *, fields: tuple[str, ...], labels: int,
                     optional: tuple[str, ...] = ()) -> dict:
  """The earlier `--out`s of `script` at `paths` (comma-separated), merged:
  their runs, and `fields` (which must agree between files but `machine`: the
  first file's); `optional` fields, the first file's (None when absent). Each
  run's counts are keyed by `labels` comma-separated labels. A one-line
  ValueError for a file that is not one, or files that disagree."""
  merged = None
  for path in paths.split(","):
    try:
      with open(path) as f:
        data = json.load(f)
      out = {k: data[k] for k in ("runs",) + fields}
      for name, run in out["runs"].items():
        if not isinstance(run["kind"], str) or not all(
            len(k.split(",")) == labels and {"correct", "total"} <= set(v)
            for k, v in run["counts"].items()):
          raise ValueError(f"run {name!r} has no counts by {labels} labels")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
      raise ValueError(f"--from_json={path!r}: not a {script} --out "
                       f"({type(e).__name__}: {e})") from None
    if merged is None:
      merged = dict(out, **{k: data.get(k) for k in optional})
      continue
    for k in fields:
      if k != "machine" and out[k] != merged[k]:
        raise ValueError(f"--from_json={path!r}: its {k} {out[k]!r} is not the first file's "
                         f"{merged[k]!r}")
    merged["runs"] = {**merged["runs"], **out["runs"]}
  return merged
