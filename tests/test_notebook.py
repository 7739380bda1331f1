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
