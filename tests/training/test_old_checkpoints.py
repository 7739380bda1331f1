"""A run written by an earlier version of the package restores and resumes.

`tests/data/run_237caf6/` is a bifocal Dyck run trained by commit 237caf6
(before the library's layered layout) and cut at its step-10 checkpoint, as
a preemption leaves it; `tests/data/run_237caf6.json` has what that version
went on to log for steps 11-20 and what its evaluator scored at step 20
(its commands are in the file). Today's trainer must resume it and log the
same losses, and today's evaluator score the same. Compared with a tolerance
(XLA:CPU's code may differ across CPUs), not bitwise; the same process is
exact (`test_reliability.py`).
"""

import json
import shutil
import subprocess
import sys

import pytest

import helpers

pytestmark = pytest.mark.slow

DATA = helpers.ROOT / "tests" / "data"


def _run(*args):
  # As the run was written: XLA's optimisations on (the tests' subprocesses skip them).
  env = helpers.subprocess_env()
  env.pop("JAX_DISABLE_MOST_OPTIMIZATIONS")
  proc = subprocess.run([sys.executable, *args], cwd=helpers.ROOT, text=True,
                        capture_output=True, timeout=300, env=env)
  assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
  return proc.stdout


def test_a_run_of_an_earlier_version_resumes_to_what_that_version_logged(tmp_path):
  expected = json.loads((DATA / "run_237caf6.json").read_text())
  workdir = tmp_path / "run"
  shutil.copytree(DATA / "run_237caf6", workdir)
  out = _run("train.py", "--config=configs/dyck.py:tiny", "--config.steps=20",
             "--config.checkpoint_every=10", "--config.eval_every=10", "--config.log_every=1",
             f"--workdir={workdir}")
  assert f"resuming {workdir} from step 10" in out
  logged = {str(r["step"]): r["loss"] for r in helpers.read_metrics(workdir) if r["step"] > 10}
  assert logged == pytest.approx(expected["losses"], rel=1e-4)
  _run("eval.py", f"--workdir={workdir}", "--splits=valid,test_depth", "--num_examples=64")
  results = json.loads((workdir / "eval" / "results.json").read_text())
  assert results["step"] == 20 and results["position"] == "bifocal_heads"
  for split, scores in expected["splits"].items():
    mine = results["splits"][split]
    assert {k: mine[k] for k in ("examples", "tokens")} == {
        k: scores[k] for k in ("examples", "tokens")}, split
    assert mine["loss"] == pytest.approx(scores["loss"], rel=1e-4), split
    for key in ("token_accuracy", "close_accuracy", "sequence_accuracy", "che_score"):
      assert mine[key] == pytest.approx(scores[key], abs=0.01), (split, key)
