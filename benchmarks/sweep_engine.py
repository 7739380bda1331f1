r"""The sweep's engine on one machine: Ray (embedded local cluster) against the
scheduler it replaced, and what the shared compilation cache saves per run.

  git worktree add /tmp/old_engine 8cd609d   # the last commit with `--jobs`
  python -m benchmarks.sweep_engine --old_checkout /tmp/old_engine

Both engines run the same small preset (4 kinds x 2 seeds of the
tiny Dyck model, fixed budgets), two at a time (Ray: `--num_cpus 2`, each
task on the share of cores it claims; the old engine: `--jobs 2`, its cores
pinned as by default), each pass from empty
workdirs and an empty compilation cache; the passes alternate (old, Ray, old,
Ray, ...) and each engine's figure is its median wall time. Then Ray runs the
preset once more on fresh workdirs with the last Ray pass's cache kept: a
run's compile seconds (its trainer's "compiled N programs in parallel in X s"
line) cold against warm is what the cache saves it. Without
`--old_checkout`, only the Ray passes. Writes results/benchmarks/sweep_engine.json.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

from absl import app
from absl import flags

from benchmarks import bench_util
from bifocal_jax.training.atomic_files import write_atomically

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_FILE = os.path.join(REPO, "results", "benchmarks", "sweep_engine.json")

_OLD = flags.DEFINE_string("old_checkout", None, "A checkout with the old engine (`--jobs`).")
_REPEATS = flags.DEFINE_integer("repeats", 2, "Passes of each engine.")
_STEPS = flags.DEFINE_integer("steps", 3000, "Each run's training steps.")
_OUT = flags.DEFINE_string("out", OUT_FILE, "Where the figures go.")

# Run in each checkout with its own code (`python -c`): builds the preset,
# runs it two at a time, prints the wall time.
_SCRIPT = """
import sys, time
start = time.time()
from experiments.extrapolation import sweep as ex
task = ex.TaskSpec("dyck", ("valid", "test_length", "test_depth"), variant="tiny",
                   max_steps={steps}, overrides=(("eval_examples", 64),
                   ("checkpoint_every", {steps})), eval_args=("--num_examples=64",))
preset = ex.Preset(tasks=(task,), kinds=("rope", "alibi", "nope", "bifocal_heads"),
                   seeds=(0, 1), calibrated=False)
if "{engine}" == "ray":
  from experiments.extrapolation import engine
  sweep = ex.Sweep(preset, sys.argv[1], sys.argv[2], log=lambda m: None, bar=False)
  cluster = engine.Cluster(num_cpus=2)
  print("START", time.time() - start)
  statuses = sweep.run(cluster)
else:  # as its command line ran it: pinned
  sweep = ex.Sweep(preset, sys.argv[1], sys.argv[2], log=lambda m: None, pin_cores=True)
  statuses = sweep.run(jobs=2)
assert set(statuses.values()) == {{"done"}} and len(statuses) == 8, statuses
print("WALL", time.time() - start)
"""
_COMPILED = re.compile(r"compiled \d+ programs in parallel in ([\d.]+) s")


def one_pass(checkout: str, engine: str, steps: int, cache: str, work: str) -> tuple[float, float]:
  """Wall seconds of the preset's sweep with `engine` from `checkout`, and of
  its start-up (imports, and Ray's: up to the local cluster's start)."""
  out, results = os.path.join(work, "out"), os.path.join(work, "results")
  env = dict(os.environ, PYTHONPATH=checkout, BIFOCAL_COMPILATION_CACHE=cache)
  proc = subprocess.run([sys.executable, "-c", _SCRIPT.format(steps=steps, engine=engine),
                         out, results], cwd=checkout, env=env, capture_output=True, text=True)
  if proc.returncode != 0:
    raise RuntimeError(f"{engine} pass failed: {proc.stderr[-2000:]}")
  wall = float(proc.stdout.split("WALL")[-1])
  started = float(proc.stdout.split("START")[-1].split()[0]) if "START" in proc.stdout else 0.0
  return wall, started


def compile_seconds(work: str) -> dict[str, float]:
  """Each run's compile seconds, from its train.log."""
  out = {}
  for root, _, files in os.walk(os.path.join(work, "out")):
    if "train.log" in files:
      with open(os.path.join(root, "train.log")) as f:
        found = _COMPILED.findall(f.read())
      if found:
        out[os.path.relpath(root, os.path.join(work, "out"))] = float(found[-1])
  return out


def main(argv):
  del argv
  base = tempfile.mkdtemp(prefix="sweep_engine_")
  walls, starts = {"ray": [], "old": []}, []
  engines = ["old", "ray"] if _OLD.value else ["ray"]
  try:
    for repeat in range(_REPEATS.value):
      for engine in engines:
        work = os.path.join(base, f"{engine}{repeat}")
        cache = os.path.join(work, "cache")
        checkout = os.path.abspath(_OLD.value) if engine == "old" else REPO
        wall, started = one_pass(checkout, engine, _STEPS.value, cache, work)
        walls[engine].append(wall)
        if engine == "ray":
          starts.append(started)
        print(f"{engine} pass {repeat}: {wall:.1f} s (start-up {started:.1f} s)", flush=True)
    cold_work = os.path.join(base, f"ray{_REPEATS.value - 1}")
    warm_work = os.path.join(base, "warm")
    one_pass(REPO, "ray", _STEPS.value, os.path.join(cold_work, "cache"), warm_work)
    cold, warm = compile_seconds(cold_work), compile_seconds(warm_work)
  finally:
    shutil.rmtree(base, ignore_errors=True)
  commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                          text=True).stdout.strip()
  saved = {name: round(cold[name] - warm[name], 2) for name in cold if name in warm}
  result = dict(
      command=" ".join(["python -m benchmarks.sweep_engine"] + sys.argv[1:]),
      machine=bench_util.machine(),
      commit=commit, runs=8, steps=_STEPS.value, wall_seconds=walls,
      median_seconds={k: statistics.median(v) for k, v in walls.items() if v},
      ray_start_seconds=starts,
      compile_seconds=dict(cold=cold, warm=warm, saved=saved,
                           median_saved=statistics.median(saved.values()) if saved else None))
  if walls["old"]:
    result["ray_over_old"] = round(result["median_seconds"]["ray"] /
                                   result["median_seconds"]["old"], 3)
  os.makedirs(os.path.dirname(_OUT.value), exist_ok=True)
  write_atomically(_OUT.value, json.dumps(result, indent=1) + "\n")
  print(json.dumps({k: result[k] for k in ("median_seconds", "ray_over_old") if k in result}))
  print(f"compile seconds saved per run (median): {result['compile_seconds']['median_saved']}")


if __name__ == "__main__":
  app.run(main)
