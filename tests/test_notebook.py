"""notebooks/quickstart.ipynb: stored clean, and runs top to bottom on CPU."""

import json
import os
import pathlib
import sys

import nbformat
import pytest

NOTEBOOK = pathlib.Path(__file__).resolve().parent.parent / "notebooks" / "quickstart.ipynb"
KERNEL_NAME = "bifocal-jax-test"


def test_notebook_is_stored_without_outputs():
  nb = nbformat.read(NOTEBOOK, as_version=4)
  nbformat.validate(nb)
  code_cells = [c for c in nb.cells if c.cell_type == "code"]
  assert code_cells
  for cell in code_cells:
    assert cell.outputs == [] and cell.execution_count is None, cell.source[:80]


def _install_kernel(directory: pathlib.Path) -> None:
  """A kernel spec running this interpreter (the venv), found through JUPYTER_PATH."""
  spec = directory / "kernels" / KERNEL_NAME
  spec.mkdir(parents=True)
  (spec / "kernel.json").write_text(json.dumps(dict(
      argv=[sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
      display_name="bifocal-jax (test)", language="python")))


def _text(cell) -> str:
  return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


@pytest.mark.slow
def test_notebook_runs_on_cpu(tmp_path, monkeypatch):
  from nbclient import NotebookClient  # pylint: disable=g-import-not-at-top

  _install_kernel(tmp_path / "jupyter")
  monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
  # The kernel inherits the environment: CPU only, its temporary work directory under tmp_path.
  monkeypatch.setenv("JAX_PLATFORMS", "cpu")
  monkeypatch.setenv("TMPDIR", str(tmp_path))
  nb = nbformat.read(NOTEBOOK, as_version=4)
  client = NotebookClient(nb, kernel_name=KERNEL_NAME, timeout=300,
                          resources={"metadata": {"path": str(NOTEBOOK.parent)}})
  client.execute()  # raises CellExecutionError, naming the cell, on any error

  code_cells = [c for c in nb.cells if c.cell_type == "code"]
  assert "on CPU" in _text(code_cells[0])
  # The run trained in a fresh directory under TMPDIR and recorded its metrics.
  (workdir,) = [p for p in tmp_path.iterdir() if p.name.startswith("bifocal_quickstart_")]
  steps = [json.loads(line)["step"] for line in (workdir / "metrics.jsonl").read_text().splitlines()]
  assert steps[-1] == json.loads((workdir / "config.json").read_text())["steps"]
  # The trajectory plot was shown, and evaluation wrote its results.
  images = [o for c in code_cells for o in c.outputs if "image/png" in o.get("data", {})]
  assert len(images) == 1
  results = json.loads((workdir / "eval" / "results.json").read_text())
  assert {"valid", "test_length", "test_depth"} <= set(results["splits"])
  assert os.path.exists(workdir / "trajectory.png")


def _setup_functions():
  """The first cell's definitions (what it runs before installing anything)."""
  nb = nbformat.read(NOTEBOOK, as_version=4)
  source = nb.cells[1].source
  namespace = {}
  exec(source[:source.index("REPO_ROOT = find_checkout()")], namespace)  # pylint: disable=exec-used
  return source, namespace


def test_setup_has_one_url_variable_and_no_placeholder():
  source, namespace = _setup_functions()
  text = NOTEBOOK.read_text()
  assert "YOUR_ORG" not in text and "colab.research.google.com/github" not in text
  assert namespace["REPO_URL"] == ""  # set by the user; unset, the cell says so (below)
  assert "set REPO_URL at the top of this cell" in source


@pytest.mark.parametrize("installed, accelerator, expected", [
    ("0.12.0.1", "gpu", None),  # Colab's own JAX (built for its GPU) is kept
    ("0.13.1", "tpu", None),
    ("0.4.33", "gpu", "jax[cuda12]==0.12.0.1"),
    ("0.4.33", "tpu", "jax[tpu]==0.12.0.1"),
    (None, "cpu", "jax==0.12.0.1"),
])
def test_setup_keeps_a_recent_jax_or_installs_the_matching_extra(installed, accelerator, expected,
                                                                 monkeypatch):
  _, namespace = _setup_functions()
  monkeypatch.setitem(sys.modules, "jax", sys.modules.get("jax") or type(sys)("jax"))
  installs = []
  namespace["pip"] = lambda *args: installs.append(args)
  namespace["accelerator"] = lambda: accelerator

  def version(name):
    if installed is None:
      raise namespace["importlib"].metadata.PackageNotFoundError(name)
    return installed

  namespace["importlib"] = type(sys)("importlib_stand_in")
  namespace["importlib"].metadata = type(sys)("metadata_stand_in")
  namespace["importlib"].metadata.version = version
  namespace["importlib"].metadata.PackageNotFoundError = type("PackageNotFoundError", (Exception,), {})
  # This interpreter has imported jax: an upgrade asks for a restart instead of going on.
  if expected is None:
    namespace["ensure_jax"]()
    assert installs == []
  else:
    with pytest.raises(RuntimeError, match="restart the runtime"):
      namespace["ensure_jax"]()
    assert installs == [(expected,)]
