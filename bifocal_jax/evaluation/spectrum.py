"""Spectral analysis of recorded frequency trajectories.

`load_trajectory(workdir)` returns what training recorded: the spectral
frequencies (angular, radians per token) of every layer and spectral head,
sampled every `spectral.record_every` steps, from the newest checkpoint.

The harmonic analysis (`harmonic_fit`) makes the "harmonic basis" claim
measurable. A spectrum is harmonic with fundamental period P (tokens) when
its frequencies are integer multiples of `2 pi / P`: `omega_j = 2 pi k_j / P`.
For a candidate P, frequency j sits at `x_j = omega_j P / (2 pi)` harmonics;
its nearest harmonic is `k_j = round(x_j)` and its error `|x_j - k_j|` is in
cycles: how far from a whole number of turns pair j has rotated after one
period P. Frequency j is *explained* when `1 <= k_j <= max_harmonic` and the
error is at most `tolerance` cycles (default 0.05 = 18 degrees).

Two things would make the best fit meaningless, and both are handled:
* P -> infinity: every frequency is near *some* high harmonic. Bounding the
  harmonic number (`max_harmonic`) and measuring the error in cycles (not
  relative to omega) keeps the chance of explaining a frequency at about
  `2 * tolerance` for every P.
* Searching many P: the best of thousands of candidates explains some
  frequencies of any spectrum by luck. So the score is normalised by chance:
  `chance` is the mean best fraction explained of `null_draws` random
  log-uniform spectra with as many frequencies over the same range, searched
  over the same periods, and `score = (fraction - chance) / (1 - chance)`:
  1 when every frequency is explained, about 0 for a spectrum no more harmonic
  than a random one (a geometric RoPE spectrum scores near 0), negative when
  worse.
Among the periods explaining the most frequencies, the smallest-error one is
kept (so the fundamental wins over its multiples, whose errors are larger by
the same factor), refined by least squares over its explained frequencies.
"""

from __future__ import annotations

import math
import os

import numpy as np
from absl import logging

from bifocal_jax.training import checkpoint as checkpoint_lib

TWO_PI = 2.0 * math.pi

__all__ = ("pyplot", "load_trajectory", "candidate_periods", "harmonic_fit", "spectrum_report",
           "format_spectrum_report", "plot_trajectory", "plot_spectrum", "plot_wavelengths",
           "spectrum_plots")


def pyplot():
  """`matplotlib.pyplot` on the file backend (Agg), imported on first use:
  importing it would lengthen every `train.py` process's start-up
  (docs/performance.md), and training never plots."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  return plt


def load_trajectory(workdir: str, *, step: int | None = None,
                    member: int | None = None) -> tuple[np.ndarray, np.ndarray]:
  """`(steps[T], frequencies[T, layers, heads, pairs])` of the run in `workdir`
  (of a population, of its member `member`).

  Heads are the spectral heads (1 for a shared spectrum), pairs the spectral
  pairs. A run without spectral frequencies (`rope`, `nope`, ...) has an empty
  trajectory: `frequencies.shape == (T, 0, 0, 0)`; the loader logs which.
  """
  with checkpoint_lib.Checkpointer.read_only(workdir) as ckpt:
    t = ckpt.restore_trajectory(step)
  if "count" in t:  # a population: every member's buffer, and how much each recorded
    if member is None or not 0 <= member < len(t["count"]):
      raise ValueError(f"member={member}: {workdir} holds a population of {len(t['count'])} "
                       "members; name one (0..)")
    count = int(t["count"][member])
    t = dict(steps=t["steps"][member, :count], frequencies=t["frequencies"][member, :count])
  elif member is not None:
    raise ValueError(f"member={member}: {workdir} holds a single run, not a population")
  steps, frequencies = t["steps"].astype(np.int64), t["frequencies"].astype(np.float32)
  if frequencies.size == 0:
    logging.info("%s: no spectral frequencies (a fixed-spectrum run): empty trajectory", workdir)
  return steps, frequencies


# ----------------------------------------------------------------------------
# Harmonic analysis.
# ----------------------------------------------------------------------------


def _check_frequencies(frequencies, name: str = "frequencies") -> np.ndarray:
  omega = np.asarray(frequencies, np.float64)
  if omega.ndim != 1 or omega.size == 0:
    raise ValueError(f"{name} must be a non-empty 1-D array [pairs], got shape {omega.shape}")
  if not np.all(np.isfinite(omega)) or np.any(omega <= 0):
    raise ValueError(f"{name} must be positive and finite, got {omega.tolist()}")
  return omega


def candidate_periods(frequencies, *, max_harmonic: int = 16,
                      tolerance: float = 0.05) -> np.ndarray:
  """A log grid of fundamental periods (tokens) for `harmonic_fit`.

  From the period putting the highest frequency at harmonic 1 to the one
  putting the lowest at `max_harmonic`; spaced finely enough (relative step
  `tolerance / (4 max_harmonic)`) that a true fundamental is within a quarter
  of the tolerance of a grid point at every allowed harmonic.
  """
  omega = _check_frequencies(frequencies)
  low = TWO_PI / omega.max() * (1.0 - tolerance)
  high = TWO_PI * max_harmonic / omega.min() * (1.0 + tolerance)
  step = tolerance / (4.0 * max_harmonic)
  return np.exp(np.arange(math.log(low), math.log(high) + step, step))


def _explain(omega, periods, max_harmonic, tolerance):
  """For periods [G]: harmonics [G, n], errors in cycles [G, n], explained [G, n]."""
  x = periods[:, None] * omega[None, :] / TWO_PI
  k = np.rint(x)
  error = np.abs(x - k)
  explained = (k >= 1) & (k <= max_harmonic) & (error <= tolerance)
  return k, error, explained


def _best_period(omega, periods, max_harmonic, tolerance):
  """(period, harmonics, explained, rms error) of the best period, refined."""
  _, _, explained = _explain(omega, periods, max_harmonic, tolerance)
  counts = explained.sum(-1)
  if counts.max() == 0:
    n = omega.size
    return math.nan, np.zeros(n, np.int64), np.zeros(n, bool), math.nan
  candidates = periods[counts == counts.max()]
  k, _, explained = _explain(omega, candidates, max_harmonic, tolerance)
  # Least squares for P over each candidate's explained frequencies:
  # minimise sum_j (omega_j P / 2pi - k_j)^2.
  w = explained.astype(np.float64)
  refined = TWO_PI * (w * k * omega).sum(-1) / (w * omega**2).sum(-1)
  k, error, explained = _explain(omega, refined, max_harmonic, tolerance)
  counts = explained.sum(-1)
  rms = np.sqrt((np.where(explained, error, 0.0)**2).sum(-1) / np.maximum(counts, 1))
  best = np.lexsort((refined, rms, -counts))[0]
  return float(refined[best]), k[best].astype(np.int64), explained[best], float(rms[best])


def harmonic_fit(frequencies, *, periods=None, max_harmonic: int = 16, tolerance: float = 0.05,
                 null_draws: int = 32, seed: int = 0) -> dict:
  """The fundamental period whose integer harmonics best explain `frequencies`.

  Args:
    frequencies: `[pairs]` angular frequencies (radians per token), > 0.
    periods: candidate fundamental periods in tokens; default
      `candidate_periods(frequencies, ...)`.
    max_harmonic: the highest harmonic number k allowed.
    tolerance: the largest error, in cycles, of an explained frequency.
    null_draws: random spectra drawn for the chance level (deterministic in
      `seed`).

  Returns:
    A dict: `period` (tokens; NaN if no candidate explains anything),
    `fraction_explained`, `score` (chance-normalised, see the module
    docstring), `chance` (the best fraction explained of random spectra),
    `harmonics` (nearest harmonic number of each frequency, a list of int),
    `explained` (list of bool), `rms_error` (cycles, over explained ones).
  """
  omega = _check_frequencies(frequencies)
  if not isinstance(max_harmonic, (int, np.integer)) or max_harmonic < 1:
    raise ValueError(f"max_harmonic must be a positive integer, got {max_harmonic!r}")
  if not 0 < tolerance < 0.5:
    raise ValueError(f"tolerance must be in (0, 0.5) cycles, got {tolerance!r}")
  if not isinstance(null_draws, (int, np.integer)) or null_draws < 1:
    raise ValueError(f"null_draws must be a positive integer, got {null_draws!r}")
  if periods is None:
    periods = candidate_periods(omega, max_harmonic=max_harmonic, tolerance=tolerance)
  periods = np.asarray(periods, np.float64).reshape(-1)
  if periods.size == 0 or np.any(~np.isfinite(periods)) or np.any(periods <= 0):
    raise ValueError(
        f"periods must be a non-empty array of positive periods, got shape {periods.shape}")

  period, harmonics, explained, rms = _best_period(omega, periods, max_harmonic, tolerance)
  fraction = float(explained.mean())
  # Chance level: random log-uniform spectra of the same size and range.
  rng = np.random.default_rng(seed)
  lo, hi = np.log(omega.min()), np.log(omega.max())
  chance = float(
      np.mean([
          _best_period(np.exp(rng.uniform(lo, hi, omega.size)), periods, max_harmonic,
                       tolerance)[2].mean() for _ in range(null_draws)
      ]))
  score = 0.0 if chance >= 1.0 else (fraction - chance) / (1.0 - chance)
  return dict(period=period, score=float(score), fraction_explained=fraction, chance=chance,
              harmonics=harmonics.tolist(), explained=explained.tolist(), rms_error=rms)


# ----------------------------------------------------------------------------
# Reports.
# ----------------------------------------------------------------------------


def _json_float(v: float) -> float | None:
  return None if not math.isfinite(v) else float(v)


def _json_fit(fit: dict) -> dict:
  return {k: _json_float(v) if isinstance(v, float) else v for k, v in fit.items()}


def spectrum_report(steps, frequencies, geometric=None, **fit_kwargs) -> dict:
  """Per layer and spectral head: harmonic fit of the final spectrum, and drift.

  Args:
    steps: `[T]` recorded steps.
    frequencies: `[T, layers, heads, pairs]` recorded spectra.
    geometric: the starting (geometric) spectrum, `[pairs]` or broadcastable
      to `[layers, heads, pairs]`; default: the first record.
    **fit_kwargs: passed to `harmonic_fit`.

  Returns:
    A JSON-ready dict: `step` (the last record), `records`, `shape`
    (`[layers, heads, pairs]`), `drift` / `max_drift` (mean / max of
    `|log(omega_final / omega_geometric)|` over everything),
    `geometric_fit` (the fit of the starting spectrum of the first head: the
    reference a learned spectrum should beat), and `heads`: one entry per
    (layer, head) with `layer`, `head`, `drift`, `max_drift`, `frequencies`
    (final) and `fit`. Empty `heads` for a run without spectral frequencies.
  """
  steps = np.asarray(steps)
  frequencies = np.asarray(frequencies, np.float64)
  if frequencies.ndim != 4 or steps.shape != frequencies.shape[:1]:
    raise ValueError(
        f"frequencies must be [T, layers, heads, pairs] with T = len(steps) = {steps.shape}, "
        f"got shape {frequencies.shape}")
  report = dict(step=int(steps[-1]) if steps.size else None, records=int(steps.size),
                shape=list(frequencies.shape[1:]), drift=None, max_drift=None, geometric_fit=None,
                heads=[])
  if frequencies.size == 0:
    return report
  final = frequencies[-1]
  start = frequencies[0] if geometric is None else np.asarray(geometric, np.float64)
  try:
    start = np.broadcast_to(start, final.shape)
  except ValueError:
    raise ValueError(f"geometric has shape {np.shape(geometric)}, not broadcastable to "
                     f"[layers, heads, pairs] = {final.shape}") from None
  log_drift = np.abs(np.log(final) - np.log(start))
  report.update(drift=float(log_drift.mean()), max_drift=float(log_drift.max()),
                geometric_fit=_json_fit(harmonic_fit(start[0, 0], **fit_kwargs)))
  for layer in range(final.shape[0]):
    for head in range(final.shape[1]):
      report["heads"].append(
          dict(layer=layer, head=head, drift=float(log_drift[layer, head].mean()),
               max_drift=float(log_drift[layer, head].max()), frequencies=final[layer,
                                                                                head].tolist(),
               fit=_json_fit(harmonic_fit(final[layer, head], **fit_kwargs))))
  return report


def format_spectrum_report(report: dict) -> str:
  """The report as a plain-text table (one row per layer/head)."""
  if not report["heads"]:
    return "no spectral frequencies (a fixed-spectrum run)"
  g = report["geometric_fit"]
  lines = [
      f"spectrum at step {report['step']} ({report['records']} records), "
      f"mean |log drift| {report['drift']:.4f}, max {report['max_drift']:.4f}",
      f"geometric start: score {g['score']:+.2f}, explained {g['fraction_explained']:.2f} "
      f"(chance {g['chance']:.2f})",
      f"{'layer':>5} {'head':>4} {'drift':>8} {'period':>10} {'score':>6} "
      f"{'explained':>9} {'chance':>6}  harmonics"
  ]
  for h in report["heads"]:
    fit = h["fit"]
    period = "-" if fit["period"] is None else f"{fit['period']:.2f}"
    harmonics = " ".join(str(k) if e else "." for k, e in zip(fit["harmonics"], fit["explained"]))
    lines.append(f"{h['layer']:>5} {h['head']:>4} {h['drift']:>8.4f} {period:>10} "
                 f"{fit['score']:>+6.2f} {fit['fraction_explained']:>9.2f} {fit['chance']:>6.2f}  "
                 f"{harmonics}")
  return "\n".join(lines)


# ----------------------------------------------------------------------------
# Plots.
# ----------------------------------------------------------------------------


def _check_trajectory(steps, frequencies):
  steps = np.asarray(steps)
  frequencies = np.asarray(frequencies, np.float64)
  if frequencies.ndim != 4 or frequencies.size == 0 or steps.shape != frequencies.shape[:1]:
    raise ValueError(
        f"frequencies must be a non-empty [T, layers, heads, pairs] with T = len(steps) = "
        f"{steps.shape}, got shape {frequencies.shape}")
  return steps, frequencies


def _save(fig, path: str) -> str:
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  fig.savefig(path, dpi=110, bbox_inches="tight")
  pyplot().close(fig)
  return path


def plot_trajectory(steps, frequencies, path: str) -> str:
  """Every spectral frequency over training (log scale), one panel per layer
  and head; the geometric start of each is marked. Returns `path` (a PNG)."""
  steps, frequencies = _check_trajectory(steps, frequencies)
  _, layers, heads, pairs = frequencies.shape
  plt = pyplot()
  fig, axes = plt.subplots(layers, heads, figsize=(3.2 * heads + 1, 2.6 * layers + 0.5),
                           squeeze=False, sharex=True, sharey=True)
  colors = plt.cm.viridis(np.linspace(0, 1, pairs))
  for layer in range(layers):
    for head in range(heads):
      ax = axes[layer, head]
      for pair in range(pairs):
        ax.plot(steps, frequencies[:, layer, head, pair], color=colors[pair], lw=1)
      ax.scatter(np.full(pairs, steps[0]), frequencies[0, layer, head], marker="o",
                 facecolors="none", edgecolors="k", s=18, zorder=3,
                 label="geometric start" if layer == head == 0 else None)
      ax.set_yscale("log")
      ax.set_title(f"layer {layer}, spectral head {head}", fontsize=9)
      if layer == layers - 1:
        ax.set_xlabel("step")
      if head == 0:
        ax.set_ylabel("omega (rad/token)")
  axes[0, 0].legend(fontsize=7, loc="best")
  fig.suptitle("Spectral Evolution: rotary frequencies over training")
  return _save(fig, path)


def plot_spectrum(final, geometric, path: str) -> str:
  """The final spectra (`[layers, heads, pairs]`) against the geometric one
  (`[pairs]`), frequency against pair index, log scale. Returns `path`."""
  final = np.asarray(final, np.float64)
  geometric = np.asarray(geometric, np.float64).reshape(-1)
  if final.ndim != 3 or final.size == 0 or final.shape[-1] != geometric.size:
    raise ValueError(
        f"final must be [layers, heads, pairs={geometric.size}], got shape {final.shape}")
  plt = pyplot()
  fig, ax = plt.subplots(figsize=(6.5, 4))
  pairs = np.arange(geometric.size)
  ax.plot(pairs, geometric, "k--", marker="s", ms=4, label="geometric", zorder=3)
  layers, heads, _ = final.shape
  colors = plt.cm.tab10(np.arange(layers * heads) % 10)
  for layer in range(layers):
    for head in range(heads):
      ax.plot(pairs, final[layer, head], marker="o", ms=3, lw=0.8,
              color=colors[layer * heads + head], label=f"L{layer} H{head}")
  ax.set_yscale("log")
  ax.set_xlabel("pair index")
  ax.set_ylabel("omega (rad/token)")
  ax.set_title("final spectrum vs geometric")
  ax.legend(fontsize=7, ncol=max(1, (layers * heads + 1) // 8))
  return _save(fig, path)


def plot_wavelengths(final, geometric, path: str) -> str:
  """Histogram of wavelengths `2 pi / omega` (tokens, log bins) of the final
  spectra against the geometric one. Returns `path`."""
  final = np.asarray(final, np.float64).reshape(-1)
  geometric = np.asarray(geometric, np.float64).reshape(-1)
  if final.size == 0 or geometric.size == 0:
    raise ValueError(
        f"final and geometric must be non-empty, got sizes {final.size}, {geometric.size}")
  wave_final, wave_geometric = TWO_PI / final, TWO_PI / geometric
  both = np.concatenate([wave_final, wave_geometric])
  bins = np.geomspace(both.min() * 0.9, both.max() * 1.1, 30)
  plt = pyplot()
  fig, ax = plt.subplots(figsize=(6.5, 4))
  ax.hist(wave_geometric, bins=bins, alpha=0.5, color="k", label="geometric",
          weights=np.full(wave_geometric.size, 1.0 / wave_geometric.size))
  ax.hist(wave_final, bins=bins, alpha=0.6, color="C1", label="learned (all heads)",
          weights=np.full(wave_final.size, 1.0 / wave_final.size))
  ax.set_xscale("log")
  ax.set_xlabel("wavelength 2 pi / omega (tokens)")
  ax.set_ylabel("fraction of frequencies")
  ax.legend()
  return _save(fig, path)


def spectrum_plots(steps, frequencies, directory: str, geometric=None) -> dict[str, str]:
  """All three plots of a trajectory into `directory`; `{name: path}`."""
  steps, frequencies = _check_trajectory(steps, frequencies)
  geometric = frequencies[0, 0, 0] if geometric is None else np.asarray(geometric).reshape(-1)
  return dict(
      trajectory=plot_trajectory(steps, frequencies,
                                 os.path.join(directory, "spectral_trajectory.png")),
      spectrum=plot_spectrum(frequencies[-1], geometric, os.path.join(directory, "spectrum.png")),
      wavelengths=plot_wavelengths(frequencies[-1], geometric,
                                   os.path.join(directory, "wavelengths.png")))
