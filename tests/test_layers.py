"""The layers contract of pyproject.toml (`lint-imports`, run by `make lint`):
it holds for the tree, and an upward import or an import circle breaks it."""

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
LINT_IMPORTS = pathlib.Path(sys.executable).parent / "lint-imports"


def _lint(tree: pathlib.Path) -> subprocess.CompletedProcess:
  env = dict(os.environ, PYTHONPATH=str(tree))
  return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=tree, env=env,
                        capture_output=True, text=True, timeout=300)


@pytest.fixture
def tree(tmp_path):
  """A copy of the library and the config, importable from `tmp_path` first."""
  shutil.copytree(ROOT / "bifocal_jax", tmp_path / "bifocal_jax",
                  ignore=shutil.ignore_patterns("__pycache__"))
  for name in ("experiments", "benchmarks"):
    if (ROOT / name / "__init__.py").exists():
      shutil.copytree(ROOT / name, tmp_path / name,
                      ignore=shutil.ignore_patterns("__pycache__", "results"))
  shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
  return tmp_path


def _append(path: pathlib.Path, line: str) -> None:
  path.write_text(path.read_text() + f"\n{line}\n")


@pytest.mark.skipif(not LINT_IMPORTS.exists(), reason="import-linter is not installed")
def test_the_tree_keeps_its_layers_and_has_no_circles(tree):
  result = _lint(tree)
  assert result.returncode == 0, result.stdout + result.stderr
  assert "0 broken" in result.stdout


@pytest.mark.skipif(not LINT_IMPORTS.exists(), reason="import-linter is not installed")
def test_an_upward_import_breaks_the_layers(tree):
  _append(tree / "bifocal_jax" / "nn" / "rope.py", "from bifocal_jax.training import steps")
  result = _lint(tree)
  assert result.returncode != 0
  assert "the library in layers BROKEN" in result.stdout
  assert "bifocal_jax.nn.rope -> bifocal_jax.training.steps" in result.stdout


@pytest.mark.skipif(not LINT_IMPORTS.exists(), reason="import-linter is not installed")
def test_an_import_circle_within_a_layer_breaks_the_acyclic_contract(tree):
  # kernels <- positions already (fope): kernels -> positions closes a circle.
  _append(tree / "bifocal_jax" / "nn" / "kernels.py", "from bifocal_jax.nn.positions import base")
  result = _lint(tree)
  assert result.returncode != 0
  assert "no import circles, at any depth BROKEN" in result.stdout


@pytest.mark.skipif(not LINT_IMPORTS.exists(), reason="import-linter is not installed")
def test_the_library_importing_the_experiment_or_the_benchmarks_breaks_their_layers(tree):
  _append(tree / "bifocal_jax" / "cli.py", "from experiments.extrapolation import runs")
  _append(tree / "experiments" / "extrapolation" / "report_tables.py",
          "from benchmarks import bench_util")
  result = _lint(tree)
  assert result.returncode != 0
  assert "experiments and benchmarks over the library BROKEN" in result.stdout
  assert "bifocal_jax.cli -> experiments.extrapolation.runs" in result.stdout
  assert "experiments.extrapolation.report_tables -> benchmarks.bench_util" in result.stdout


@pytest.mark.skipif(not LINT_IMPORTS.exists(), reason="import-linter is not installed")
def test_an_import_circle_in_the_experiment_breaks_the_acyclic_contract(tree):
  # runs <- sweep already: runs -> sweep closes a circle.
  _append(tree / "experiments" / "extrapolation" / "runs.py",
          "from experiments.extrapolation import sweep")
  result = _lint(tree)
  assert result.returncode != 0
  assert "no import circles, at any depth BROKEN" in result.stdout
