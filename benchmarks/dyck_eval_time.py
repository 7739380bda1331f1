r"""One full evaluation of the default Dyck model on the published files.

  python -m benchmarks.dyck_eval_time --data_dir=DIR --out=results/benchmarks/dyck_eval_time.json
  python -m benchmarks.dyck_eval_time --data_dir=DIR --files=k8_m20.test

DIR holds the published files of Yao et al. 2021 (`k8_m*.dev`, `k8_m*.test`;
default: the data directory's `dyck-yao2021/`, as
`bifocal_jax/tasks/external/published.py` finds it). The model is
`configs/dyck.py`'s at initialisation (evaluation time does not depend on the weights). It
runs in a fresh process with the compilation cache off (a first evaluation:
every batch shape compiles), the way `eval.py --dyck_file` scores a file
(`Evaluator.dyck_file`). Reported per file and in total: wall seconds
(compiles included) and the scores (loss, token and closing-bracket
accuracy). (Against the attention kernel before issue #33: docs/performance.md, with
the commit that measured it.)
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

from benchmarks import bench_util
from bifocal_jax.evaluation import evaluator as evaluator_lib
from bifocal_jax.tasks.external import published
from bifocal_jax.training import sharding, state

_DATA_DIR = flags.DEFINE_string("data_dir", None, "Folder of the published Dyck files.")
_CONFIG = flags.DEFINE_string("config", "configs/dyck.py", "Training config file (its model).")
_FILES = flags.DEFINE_list("files", [], "Only these file names (default: every *.dev and *.test).")
_WORKER = flags.DEFINE_bool("worker", False, "Internal: evaluate in this process, print JSON.")
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


def evaluate_files(config_path: str, files: list[str]) -> dict:
  config = bench_util.load_config(config_path)
  mesh = sharding.make_mesh(config.mesh)
  rows = {}
  start_all = time.perf_counter()
  with jax.set_mesh(mesh):
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
      print(f"{os.path.basename(path)}: {seconds:.1f} s", file=sys.stderr, flush=True)
  return dict(files=rows, setup_seconds=setup_seconds,
              seconds=sum(r["seconds"] for r in rows.values()))


def main(argv):
  del argv
  files = published_files(_DATA_DIR.value)
  if _FILES.value:
    files = [f for f in files if os.path.basename(f) in _FILES.value]
    if len(files) != len(_FILES.value):
      raise ValueError(f"--files={_FILES.value}: not all found")
  if _WORKER.value:
    print(json.dumps(evaluate_files(_CONFIG.value, files)))
    return
  record = bench_util.machine()
  env = dict(os.environ, **{machine.CACHE_ENV: "off"})
  cmd = [sys.executable, "-m", "benchmarks.dyck_eval_time", "--worker",
         f"--config={_CONFIG.value}", f"--data_dir={os.path.dirname(files[0])}",
         f"--files={','.join(os.path.basename(f) for f in files)}"]
  out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True, cwd=bench_util.REPO,
                       env=env)
  run = json.loads(out.stdout.strip().splitlines()[-1])
  print(f"{record['cpu']}, {record['cores']} cores, {record['date']}, load average "
        f"{record['load_average']} -> {bench_util.load_average()}")
  table = [[name, row["examples"], f"{row['tokens']:,}", f"{row['seconds']:.1f}"] +
           [f"{row[k]:.4f}" for k in SCORES] for name, row in run["files"].items()]
  table.append(["all", "", "", f"{run['seconds']:.1f}"] + [""] * len(SCORES))
  print(bench_util.markdown_table(["file", "strings", "tokens", "seconds", *SCORES], table))
  bench_util.write_json(_OUT.value, dict(machine=record, config=_CONFIG.value, run=run,
                                         load_average_end=bench_util.load_average()))


if __name__ == "__main__":
  bench_util.run_main(main)
