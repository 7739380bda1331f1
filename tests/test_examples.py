"""examples/: the tunix Gemma 3 -> spectralize -> Spectral Evolution on Dyck example runs."""

import importlib.util
import json
import pathlib

import numpy as np
import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"


def _load_example(name: str):
  """The example script `examples/<name>.py` as a module (loaded by its path:
  examples/ is a folder of scripts, not a package)."""
  spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


@pytest.mark.slow
def test_tunix_gemma3_dyck_example(tmp_path):
  example = _load_example("tunix_gemma3_dyck")
  try:
    example.tunix_models.import_model("gemma3")
  except ImportError as e:
    pytest.skip(f"tunix's model code is not installed ({e})")
  summary = example.run(str(tmp_path), steps=30, record_every=10)  # 3 compilations
  assert summary == json.loads((tmp_path / "summary.json").read_text())
  assert summary["converted_layers"] == 2
  assert summary["step0_loss_change"] < 1e-6
  assert summary["last_loss"] < 0.5 * summary["first_loss"]
  assert summary["valid_token_accuracy"] > 0.5
  trajectory = np.load(tmp_path / "trajectory.npz")
  np.testing.assert_array_equal(trajectory["steps"], [0, 10, 20, 30])
  frequencies = trajectory["frequencies"]  # [T, layers, kv heads, pairs]
  assert frequencies.shape == (4, 2, 2, 8)
  # It starts at each layer's own spectrum (base 10,000 here) and moves.
  np.testing.assert_allclose(frequencies[0], np.broadcast_to(
      10_000.0 ** (-np.arange(8) / 8), (2, 2, 8)), rtol=1e-6)
  assert summary["largest_relative_frequency_change"] > 0.01
  assert (tmp_path / "trajectory.png").stat().st_size > 10_000
