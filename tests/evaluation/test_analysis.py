"""Spectral analysis: the harmonic fit, the per-head report and the plots."""

import json

import numpy as np
import pytest

from bifocal_jax.evaluation import spectrum
from bifocal_jax.nn import rope


def planted(period, harmonics, *, noise_cycles, seed):
  """Frequencies 2 pi (k + noise) / period, shuffled."""
  rng = np.random.default_rng(seed)
  k = np.asarray(harmonics, np.float64)
  omega = 2 * np.pi * (k + rng.normal(0.0, noise_cycles, k.size)) / period
  order = rng.permutation(k.size)
  return omega[order], k[order].astype(int)


@pytest.mark.parametrize("period,harmonics,seed", [
    (23.0, (1, 2, 3, 5, 7, 11), 0),
    (7.5, (1, 3, 4, 6, 9), 1),
    (160.0, (2, 3, 5, 8, 13, 14), 2),
])
def test_harmonic_fit_recovers_planted_fundamental(period, harmonics, seed):
  omega, k = planted(period, harmonics, noise_cycles=0.01, seed=seed)
  fit = spectrum.harmonic_fit(omega)
  assert fit["period"] == pytest.approx(period, rel=0.01)
  assert fit["harmonics"] == k.tolist()
  assert fit["fraction_explained"] == 1.0
  assert fit["score"] > 0.8
  assert fit["rms_error"] < 0.03


def test_harmonic_fit_explains_only_the_harmonic_part():
  omega, _ = planted(40.0, (1, 2, 3, 4, 5, 6, 8, 9), noise_cycles=0.005, seed=3)
  # Four frequencies half-way between harmonics of 40: never explained by it.
  off = 2 * np.pi * np.array([10.5, 11.5, 12.5, 13.5]) / 40.0
  fit = spectrum.harmonic_fit(np.concatenate([omega, off]))
  assert fit["period"] == pytest.approx(40.0, rel=0.01)
  assert fit["explained"] == [True] * 8 + [False] * 4
  assert fit["fraction_explained"] == pytest.approx(8 / 12)
  assert fit["score"] > 0.3


@pytest.mark.parametrize("rotary_dim", [8, 16, 32])
def test_geometric_spectrum_is_not_harmonic(rotary_dim):
  fit = spectrum.harmonic_fit(np.asarray(rope.geometric_frequencies(rotary_dim)))
  assert fit["score"] < 0.25, fit
  assert fit["fraction_explained"] <= 0.5


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_log_uniform_spectrum_scores_near_chance(seed):
  omega = np.exp(np.random.default_rng(seed).uniform(np.log(1e-3), 0.0, 16))
  fit = spectrum.harmonic_fit(omega)
  assert abs(fit["score"]) < 0.3, fit
  assert fit["fraction_explained"] < 0.5


def test_harmonic_fit_with_explicit_periods():
  omega = 2 * np.pi * np.array([1.0, 2.0, 3.0]) / 10.0
  fit = spectrum.harmonic_fit(omega, periods=[10.0], null_draws=4)
  assert fit["period"] == pytest.approx(10.0)
  assert fit["harmonics"] == [1, 2, 3]
  nothing = spectrum.harmonic_fit(omega, periods=[1.0], null_draws=4)
  assert np.isnan(nothing["period"]) and nothing["fraction_explained"] == 0.0


@pytest.mark.parametrize("kwargs,match", [
    (dict(frequencies=[0.1, -0.2]), "frequencies"),
    (dict(frequencies=[[0.1, 0.2]]), "frequencies"),
    (dict(frequencies=[]), "frequencies"),
    (dict(frequencies=[0.1, np.nan]), "frequencies"),
    (dict(frequencies=[0.1], tolerance=0.7), "tolerance"),
    (dict(frequencies=[0.1], max_harmonic=0), "max_harmonic"),
    (dict(frequencies=[0.1], periods=[-1.0]), "periods"),
])
def test_harmonic_fit_rejects_bad_input(kwargs, match):
  with pytest.raises(ValueError, match=match):
    spectrum.harmonic_fit(**kwargs)


def synthetic_trajectory():
  """2 layers x 2 heads x 6 pairs; layer 1 head 0 evolves to harmonics of 30."""
  geometric = np.asarray(rope.geometric_frequencies(12))
  target, _ = planted(30.0, (1, 2, 3, 4, 6, 9), noise_cycles=0.005, seed=4)
  target = np.sort(target)[::-1]
  steps = np.array([0, 10, 20])
  freqs = np.broadcast_to(geometric, (3, 2, 2, 6)).copy()
  for t, a in enumerate((0.0, 0.5, 1.0)):
    freqs[t, 1, 0] = np.exp((1 - a) * np.log(geometric) + a * np.log(target))
  return steps, freqs, geometric


def test_spectrum_report():
  steps, freqs, geometric = synthetic_trajectory()
  report = spectrum.spectrum_report(steps, freqs, geometric)
  json.dumps(report, allow_nan=False)  # JSON-ready
  assert report["step"] == 20 and report["records"] == 3 and report["shape"] == [2, 2, 6]
  assert len(report["heads"]) == 4
  heads = {(h["layer"], h["head"]): h for h in report["heads"]}
  evolved = heads[(1, 0)]
  assert evolved["drift"] > 0.1
  assert evolved["fit"]["period"] == pytest.approx(30.0, rel=0.01)
  assert evolved["fit"]["score"] > 0.8
  for key in [(0, 0), (0, 1), (1, 1)]:
    assert heads[key]["drift"] == 0.0
    assert heads[key]["fit"]["score"] < 0.25
  expected = np.abs(np.log(freqs[-1]) - np.log(geometric)).mean()
  assert report["drift"] == pytest.approx(expected)
  assert report["geometric_fit"]["score"] == heads[(0, 0)]["fit"]["score"]
  text = spectrum.format_spectrum_report(report)
  assert "30.0" in text and len(text.splitlines()) == 3 + 4
  # Default start: the first record (here the geometric spectrum).
  assert spectrum.spectrum_report(steps, freqs)["drift"] == pytest.approx(report["drift"])


def test_spectrum_report_of_fixed_spectrum_run_is_empty():
  report = spectrum.spectrum_report(np.array([0, 5]), np.zeros((2, 0, 0, 0)))
  assert report["heads"] == [] and report["drift"] is None
  assert "no spectral" in spectrum.format_spectrum_report(report)


def test_spectrum_report_rejects_bad_shapes():
  with pytest.raises(ValueError, match="frequencies"):
    spectrum.spectrum_report(np.array([0, 1]), np.ones((3, 1, 1, 4)))
  with pytest.raises(ValueError, match="geometric"):
    spectrum.spectrum_report(np.array([0]), np.ones((1, 1, 1, 4)), geometric=np.ones(3))


def test_plots_write_pngs(tmp_path):
  steps, freqs, geometric = synthetic_trajectory()
  paths = spectrum.spectrum_plots(steps, freqs, str(tmp_path / "plots"), geometric=geometric)
  assert set(paths) == {"trajectory", "spectrum", "wavelengths"}
  for path in paths.values():
    with open(path, "rb") as f:
      data = f.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
  with pytest.raises(ValueError, match="final"):
    spectrum.plot_spectrum(freqs[-1], geometric[:3], str(tmp_path / "x.png"))
