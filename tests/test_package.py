"""The package as pip and Colab users get it: the wheel, installed into a fresh
virtual environment, runs its commands from an unrelated folder."""

import os
import shutil
import site
import subprocess
import sys
import zipfile

import pytest

import helpers

ROOT = helpers.ROOT


def _run(command, *, cwd, env, timeout=600):
  proc = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                        timeout=timeout)
  assert proc.returncode == 0, f"{command}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
  return proc


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
  """(venv, its python, an unrelated folder): the wheel built from a copy of
  the sources and installed with `--no-deps` into a new venv, which sees the
  test interpreter's packages (jax, flax, ...) through a `.pth` file."""
  base = tmp_path_factory.mktemp("package")
  source = base / "source"  # a copy: the build writes build/ and *.egg-info beside its sources
  source.mkdir()
  for name in ("pyproject.toml", "README.md"):
    shutil.copy(ROOT / name, source / name)
  shutil.copytree(ROOT / "bifocal_jax", source / "bifocal_jax",
                  ignore=shutil.ignore_patterns("__pycache__"))
  env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
  _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(base / "dist"),
        str(source)], cwd=base, env=env)
  (wheel,) = (base / "dist").glob("bifocal_jax-*.whl")
  with zipfile.ZipFile(wheel) as z:
    names = z.namelist()
  assert "bifocal_jax/configs/dyck.py" in names and "bifocal_jax/train.py" in names
  venv = base / "venv"
  _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=base, env=env)
  python = venv / "bin" / "python"
  (purelib,) = (venv / "lib").glob("python3*/site-packages")
  (purelib / "test_interpreter_packages.pth").write_text("\n".join(site.getsitepackages()) + "\n")
  _run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
        str(wheel)], cwd=base, env=env)
  elsewhere = base / "elsewhere"
  elsewhere.mkdir()
  return venv, python, elsewhere


@pytest.mark.slow
def test_the_installed_commands_train_evaluate_and_list_tasks(installed, compilation_cache_env):
  venv, python, elsewhere = installed
  env = helpers.subprocess_env(**compilation_cache_env)
  env.pop("PYTHONPATH", None)
  env["BIFOCAL_DATA_DIR"] = str(elsewhere / "no_data")
  where = _run([str(python), "-c", "import bifocal_jax; print(bifocal_jax.__file__)"],
               cwd=elsewhere, env=env).stdout
  assert where.startswith(str(venv)), where
  train = _run([str(venv / "bin" / "bifocal-train"), "--config", "dyck:tiny", "--workdir", "run"],
               cwd=elsewhere, env=env)
  assert train.stdout.splitlines()[-1] == (
      f"next: python -m bifocal_jax.eval --workdir {elsewhere / 'run'}")
  # `python -m bifocal_jax.train` is the same command (here stopped by its flag check).
  bad = subprocess.run([str(python), "-m", "bifocal_jax.train", "--config=dyk", "--workdir=run"],
                       cwd=elsewhere, env=env, capture_output=True, text=True, timeout=600)
  assert bad.returncode == 2 and bad.stderr.startswith(
      "error: --config=dyk: no such file, nor a config of the package (did you mean dyck?)"
  ), bad.stderr
  evaluated = _run([str(venv / "bin" / "bifocal-eval"), "--workdir=run", "--num_examples=8"],
                   cwd=elsewhere, env=env)
  assert evaluated.stdout.splitlines()[-1] == f"wrote {elsewhere / 'run' / 'eval' / 'results.json'}"
  absent = subprocess.run([str(python), "-m", "bifocal_jax.eval", "--workdir=run",
                           "--dyck_file=k8_m10.test"], cwd=elsewhere, env=env,
                          capture_output=True, text=True, timeout=600)
  assert absent.returncode == 2 and "python -m bifocal_jax.tasks.external fetch" in absent.stderr
  listed = _run([str(python), "-m", "bifocal_jax.tasks", "--config", "odds_first:tiny",
                 "--split=test_length", "--num=3", "--format=che"], cwd=elsewhere, env=env)
  assert len(listed.stdout.splitlines()) == 3 and listed.stdout.startswith('{"length":')
  configs = _run([str(python), "-m", "bifocal_jax.configs"], cwd=elsewhere, env=env)
  assert "  dyck  (variants: tiny, paper)" in configs.stdout.splitlines()
  lora = subprocess.run([str(python), "-m", "bifocal_jax.surgery.tunix_lora", "--help"],
                        cwd=elsewhere, env=env, capture_output=True, text=True, timeout=600)
  assert lora.returncode == 1 and "--family" in lora.stdout, lora.stderr  # absl's --help status
  assert sorted(os.listdir(elsewhere)) == ["run"]  # nothing else written where it ran
