"""The README's "Use it in your own model" snippets run as written."""

import pathlib
import runpy

import numpy as np
import pytest

from bifocal_jax import geometric_frequencies

SNIPPETS = pathlib.Path(__file__).resolve().parent.parent / "docs" / "snippets"


@pytest.mark.parametrize("name", ["nnx.py", "linen.py"])
def test_snippet_runs_and_ends_with_per_head_spectral_frequencies(name):
  namespace = runpy.run_path(str(SNIPPETS / name), run_name="__snippet__")
  frequencies = np.asarray(namespace["frequencies"])
  assert frequencies.shape == (2, 8)  # [heads, pairs]
  # One step inside the freeze: still the geometric spectrum.
  np.testing.assert_allclose(frequencies, np.broadcast_to(geometric_frequencies(16), (2, 8)),
                             rtol=1e-6)
  assert np.isfinite(float(namespace["loss"]))


@pytest.mark.parametrize("name", ["nnx.py", "linen.py"])
def test_readme_shows_the_tested_snippet_verbatim(name):
  readme = (SNIPPETS.parent.parent / "README.md").read_text()
  assert (SNIPPETS / name).read_text().strip() in readme
