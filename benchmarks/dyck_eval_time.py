r"""One full evaluation of the default Dyck model on the published files, before / after.

  python benchmarks/dyck_eval_time.py --data_dir=DIR --out=benchmarks/results/dyck_eval_time.json
  python benchmarks/dyck_eval_time.py --data_dir=DIR --files=k8_m20.test

DIR holds the published files of Yao et al. 2021 (`k8_m*.dev`, `k8_m*.test`;
default: the data directory's `dyck-yao2021/`, as
`bifocal_jax/tasks/external/published.py` finds it). The model is
`configs/dyck.py`'s at initialisation (evaluation time does not depend on the weights). Each
kernel runs in a fresh process with the compilation cache off (a first
evaluation: every batch shape compiles), the way `eval.py --dyck_file` scores
a file (`Evaluator.dyck_file`): first with the attention kernel before issue
#33 (`baseline_attention.py`), then with the current one. Reported per file
and in total: wall seconds (compiles included), and the largest difference
of the scores between the two (loss, token and closing-bracket accuracy).
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import time

from absl import flags

from bifocal_jax import machine

machine.use_tuned_allocator()  # as eval.py: see bifocal_jax/machine.py

import jax  # pylint: disable=g-import-not-at-top,wrong-import-position

from bifocal_jax.evaluation import evaluator as evaluator_lib
from bifocal_jax.training import sharding, state
from bifocal_jax.tasks.external import published  # pylint: disable=g-import-not-at-top,wrong-import-position

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import baseline_attention  # pylint: disable=g-import-not-at-top,wrong-import-position
import bench_util  # pylint: disable=g-import-not-at-top,wrong-import-position

_DATA_DIR = flags.DEFINE_string("data_dir", None, "Folder of the published Dyck files.")
_CONFIG = flags.DEFINE_string("config", "configs/dyck.py", "Training config file (its model).")
_KERNELS = flags.DEFINE_list("kernels", ["baseline", "current"], "Attention kernels, in order.")
_FILES = flags.DEFINE_list("files", [], "Only these file names (default: every *.dev and *.test).")
_WORKER = flags.DEFINE_string("worker", None, "Internal: evaluate with this kernel, print JSON.")
_OUT = flags.DEFINE_string("out", None, "Write the results as JSON here.")
SCORES = ("loss", "token_accuracy", "close_accuracy")


def published_files(data_dir: str | None) -> list[str]:
  if data_dir is None:
    data_dir = published.folder()
  files = sorted(glob.glob(os.path.join(data_dir, "*.dev")) +
                 glob.glob(os.path.join(data_dir, "*.test")))
  if not files:
    raise ValueError(f"data_dir={data_dir!r}: no *.dev or *.test files")
  return files


def evaluate_files(kernel: str, config_path: str, files: list[str]) -> dict:
  config = bench_util.load_config(config_path)
  mesh = sharding.make_mesh(config.mesh)
  rows = {}
  start_all = time.perf_counter()
  with jax.set_mesh(mesh), baseline_attention.use_baseline(kernel == "baseline"):
    s, train_state = state.setup(config, mesh)
    evaluator = evaluator_lib.Evaluator(s)
    setup_seconds = time.perf_counter() - start_all
    for path in files:
      start = time.perf_counter()
      result = evaluator.dyck_file(train_state["params"], path)
      seconds = time.perf_counter() - start
      rows[os.path.basename(path)] = dict(seconds=seconds, examples=result["examples"],
                                          tokens=result["tokens"],
                                          **{k: result[k] for k in SCORES})
      print(f"{kernel} {os.path.basename(path)}: {seconds:.1f} s", file=sys.stderr, flush=True)
  return dict(kernel=kernel, files=rows, setup_seconds=setup_seconds,
              seconds=sum(r["seconds"] for r in rows.values()))


def main(argv):
  del argv
  files = published_files(_DATA_DIR.value)
  if _FILES.value:
    files = [f for f in files if os.path.basename(f) in _FILES.value]
    if len(files) != len(_FILES.value):
      raise ValueError(f"--files={_FILES.value}: not all found")
  if _WORKER.value:
    print(json.dumps(evaluate_files(_WORKER.value, _CONFIG.value, files)))
    return
  machine = bench_util.machine()
  env = dict(os.environ, **{machine.CACHE_ENV: "off"})
  runs = {}
  for kernel in _KERNELS.value:
    cmd = [sys.executable, os.path.abspath(__file__), f"--worker={kernel}",
           f"--config={_CONFIG.value}", f"--data_dir={os.path.dirname(files[0])}",
           f"--files={','.join(os.path.basename(f) for f in files)}"]
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True, cwd=bench_util.REPO,
                         env=env)
    runs[kernel] = json.loads(out.stdout.strip().splitlines()[-1])
  print(f"{machine['cpu']}, {machine['cores']} cores, {machine['date']}, load average "
        f"{machine['load_average']} -> {bench_util.load_average()}")
  names = [os.path.basename(f) for f in files]
  header = ["file", "strings", "tokens"] + [f"{k} s" for k in runs]
  table = []
  for name in names:
    first = next(iter(runs.values()))["files"][name]
    table.append([name, first["examples"], f"{first['tokens']:,}"] +
                 [f"{r['files'][name]['seconds']:.1f}" for r in runs.values()])
  table.append(["all", "", ""] + [f"{r['seconds']:.1f}" for r in runs.values()])
  print(bench_util.markdown_table(header, table))
  results = dict(machine=machine, config=_CONFIG.value, runs=runs,
                 load_average_end=bench_util.load_average())
  if set(runs) >= {"baseline", "current"}:
    base, cur = runs["baseline"], runs["current"]
    results["speedup"] = base["seconds"] / cur["seconds"]
    results["max_score_difference"] = max(
        abs(base["files"][n][k] - cur["files"][n][k]) for n in names for k in SCORES)
    print(f"baseline / current: {results['speedup']:.2f}x; largest score difference "
          f"{results['max_score_difference']:.1e}")
  bench_util.write_json(_OUT.value, results)


if __name__ == "__main__":
  bench_util.run_main(main)
