"""Intervals for accuracies: a bootstrap over examples, and intervals over seeds.

Every accuracy the project reports carries a 95% interval:
  * within one evaluation, `bootstrap_ci` resamples the examples (Poisson
    bootstrap: each example weighted by a Poisson(1) count per replicate,
    which for the split sizes here is the ordinary bootstrap, and streams in
    chunks of replicates instead of materialising resampled datasets);
  * across runs, `seed_interval` (Student's t over seeds) and
    `paired_difference` (the same seeds and data, two position kinds);
  * and for rankings of kinds, `descending_ranks`, `average_ranks` and
    Spearman's rank correlation (`spearman`) with its two-sided permutation
    p-value (`spearman_permutation_p`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

import numpy as np

DEFAULT_REPLICATES = 1000
_CHUNK = 100

# t quantiles (two-sided 95%) for small degrees of freedom; beyond 30, the
# normal quantile is within 2%.
_T95 = {
    1: 12.706,
    2: 4.303,
    3: 3.182,
    4: 2.776,
    5: 2.571,
    6: 2.447,
    7: 2.365,
    8: 2.306,
    9: 2.262,
    10: 2.228,
    12: 2.179,
    15: 2.131,
    20: 2.086,
    25: 2.060,
    30: 2.042
}


def bootstrap_ci(statistic: Callable[[np.ndarray], np.ndarray], num_examples: int, *,
                 replicates: int = DEFAULT_REPLICATES, seed: int = 0) -> tuple[float, float]:
  """Percentile 95% interval of `statistic` under resampling of the examples.

  `statistic(weights_RxN)` gives the statistic of each of R weightings of the
  N examples (a weight is how often the example occurs in that replicate);
  NaN replicates (a statistic undefined on that resample) are left out.
  """
  if num_examples < 1:
    raise ValueError(f"bootstrap_ci: num_examples={num_examples} must be >= 1")
  rng = np.random.default_rng(seed)
  values = []
  for start in range(0, replicates, _CHUNK):
    weights_RxN = rng.poisson(1.0, (min(_CHUNK, replicates - start), num_examples))
    values.append(np.asarray(statistic(weights_RxN.astype(np.float64)), np.float64))
  values = np.concatenate(values)
  values = values[np.isfinite(values)]
  if not values.size:
    return (float("nan"), float("nan"))
  lo, hi = np.percentile(values, [2.5, 97.5])
  return float(lo), float(hi)


def ratio_of_sums(numerator_N: np.ndarray, denominator_N: np.ndarray):
  """The statistic `sum(w * numerator) / sum(w * denominator)` (e.g. token
  accuracy: correct tokens over scored tokens, pooled over examples)."""
  numerator_N = np.asarray(numerator_N, np.float64)
  denominator_N = np.asarray(denominator_N, np.float64)

  def statistic(weights_RxN):
    with np.errstate(invalid="ignore", divide="ignore"):
      return (weights_RxN @ numerator_N) / (weights_RxN @ denominator_N)

  return statistic


def mean_over_groups(numerator_N: np.ndarray, denominator_N: np.ndarray, groups_N: np.ndarray):
  """The statistic: the mean over groups (e.g. lengths) of each group's
  ratio of sums (the CHE score: the mean over lengths of per-length accuracy).
  Groups absent from a replicate are left out of its mean."""
  order = np.argsort(groups_N, kind="stable")
  groups = np.asarray(groups_N)[order]
  starts = np.flatnonzero(np.r_[True, groups[1:] != groups[:-1]])
  numerator = np.asarray(numerator_N, np.float64)[order]
  denominator = np.asarray(denominator_N, np.float64)[order]

  def statistic(weights_RxN):
    weights = weights_RxN[:, order]
    num = np.add.reduceat(weights * numerator, starts, axis=1)
    den = np.add.reduceat(weights * denominator, starts, axis=1)
    present = den > 0
    with np.errstate(invalid="ignore", divide="ignore"):
      per_group = np.where(present, num / den, 0.0)
      # A replicate with no group at all is NaN (left out by `bootstrap_ci`).
      return per_group.sum(axis=1) / present.sum(axis=1)

  return statistic


def t_quantile(dof: int) -> float:
  """The two-sided 95% quantile of Student's t with `dof` degrees of freedom."""
  if dof < 1:
    raise ValueError(f"t_quantile: dof={dof} must be >= 1")
  if dof > 30:
    return 1.96 + 2.4 / dof  # within 0.1% of the exact quantile
  below = max(d for d in _T95 if d <= dof)
  above = min(d for d in _T95 if d >= dof)
  if below == above:
    return _T95[dof]
  frac = (dof - below) / (above - below)  # linear in dof between tabulated points
  return _T95[below] + frac * (_T95[above] - _T95[below])


def seed_interval(values: Sequence[float]) -> dict:
  """Mean, standard deviation and 95% t-interval of the mean over seeds
  (`ci95` is None for a single seed)."""
  x = np.asarray(values, np.float64)
  if x.size == 0:
    raise ValueError("seed_interval: no values")
  mean = float(x.mean())
  if x.size == 1:
    return dict(mean=mean, std=0.0, n=1, ci95=None)
  std = float(x.std(ddof=1))
  half = t_quantile(x.size - 1) * std / np.sqrt(x.size)
  return dict(mean=mean, std=std, n=int(x.size), ci95=[mean - half, mean + half])


def paired_difference(a: Sequence[float], b: Sequence[float]) -> dict:
  """`a - b` over paired seeds: mean, 95% t-interval, and whether the
  interval excludes zero (`decided`: the only case a verdict is stated)."""
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  if a.shape != b.shape:
    raise ValueError(f"paired_difference: {a.size} and {b.size} values do not pair")
  out = seed_interval(a - b)
  lo_hi = out["ci95"]
  out["decided"] = lo_hi is not None and (lo_hi[0] > 0 or lo_hi[1] < 0)
  return out


def descending_ranks(means: dict[str, float]) -> dict[str, int]:
  """1 for the highest mean; ties share the better rank."""
  return {kind: 1 + sum(other > m for other in means.values()) for kind, m in means.items()}


def average_ranks(values: Sequence[float]) -> np.ndarray:
  """Ascending ranks from 1, tied values sharing their average rank."""
  x = np.asarray(values, np.float64)
  return np.array([(x < v).sum() + ((x == v).sum() + 1) / 2 for v in x])


def spearman(a: dict[str, float], b: dict[str, float]) -> float | None:
  """Spearman's rank correlation of two name -> value maps over their common
  names (ties at their average rank); None under 3 names or for all ties."""
  names = sorted(set(a) & set(b))
  if len(names) < 3:
    return None
  ra, rb = (average_ranks([m[k] for k in names]) for m in (a, b))
  if ra.std() == 0 or rb.std() == 0:
    return None
  return float(np.corrcoef(ra, rb)[0, 1])


def spearman_permutation_p(a: dict[str, float], b: dict[str, float], *, num: int = 20_000,
                           seed: int = 0) -> float | None:
  """Two-sided p-value of `spearman(a, b)` under independence: the share of
  orderings of `b`'s values over the common names whose |rho| reaches the
  observed one; every ordering up to 8 names (exact), else `num` random
  ones (`(hits + 1) / (num + 1)`). None where `spearman` is."""
  rho = spearman(a, b)
  if rho is None:
    return None
  names = sorted(set(a) & set(b))
  ra, rb = (average_ranks([m[k] for k in names]) for m in (a, b))
  ra, rb = ra - ra.mean(), rb - rb.mean()
  denominator = np.sqrt((ra**2).sum() * (rb**2).sum())
  observed = abs(rho) - 1e-12  # ties in |rho| count as reaching it
  if len(names) <= 8:
    orders = np.array(list(itertools.permutations(range(len(names)))))
    rhos = np.abs(rb[orders] @ ra) / denominator
    return float(np.mean(rhos >= observed))
  orders = np.argsort(np.random.default_rng(seed).random((num, len(names))), axis=1)
  hits = int(np.sum(np.abs(rb[orders] @ ra) / denominator >= observed))
  return (hits + 1) / (num + 1)
