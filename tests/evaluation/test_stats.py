"""Intervals: the bootstrap over examples and the intervals over seeds."""

import itertools

import numpy as np
import pytest

from bifocal_jax.evaluation import stats


def test_bootstrap_interval_of_a_proportion_matches_the_binomial_one():
  rng = np.random.default_rng(1)
  correct = (rng.random(2000) < 0.9).astype(float)
  lo, hi = stats.bootstrap_ci(stats.ratio_of_sums(correct, np.ones(2000)), 2000)
  p = correct.mean()
  half = 1.96 * np.sqrt(p * (1 - p) / 2000)
  assert lo < p < hi
  assert (hi - lo) / 2 == pytest.approx(half, rel=0.15)


def test_bootstrap_covers_the_truth_about_95_percent_of_the_time():
  rng = np.random.default_rng(2)
  covered = 0
  for trial in range(200):
    correct = (rng.random(300) < 0.7).astype(float)
    lo, hi = stats.bootstrap_ci(stats.ratio_of_sums(correct, np.ones(300)), 300, replicates=300,
                                seed=trial)
    covered += lo <= 0.7 <= hi
  assert 0.88 <= covered / 200 <= 0.99


def test_mean_over_groups_is_the_che_score_and_its_interval_widens_with_noise():
  tokens = np.array([2, 2, 4, 4, 1, 1])
  correct = np.array([2, 0, 4, 2, 1, 1])
  groups = np.array([41, 41, 42, 42, 43, 43])
  statistic = stats.mean_over_groups(correct, tokens, groups)
  assert statistic(np.ones((1, 6)))[0] == pytest.approx(np.mean([0.5, 0.75, 1.0]))
  # A replicate missing a whole group averages the others.
  assert statistic(np.array([[1, 1, 1, 1, 0, 0.0]]))[0] == pytest.approx(0.625)
  lo, hi = stats.bootstrap_ci(statistic, 6)
  assert lo < 0.75 < hi
  perfect = stats.mean_over_groups(tokens, tokens, groups)
  assert stats.bootstrap_ci(perfect, 6) == (1.0, 1.0)


def test_t_quantiles():
  assert stats.t_quantile(4) == pytest.approx(2.776)
  assert stats.t_quantile(11) == pytest.approx(2.201, abs=0.005)
  assert stats.t_quantile(100) == pytest.approx(1.984, abs=0.003)
  with pytest.raises(ValueError, match="dof=0"):
    stats.t_quantile(0)


def test_seed_interval_and_paired_difference():
  out = stats.seed_interval([0.8, 0.82, 0.84, 0.86, 0.88])
  assert out["mean"] == pytest.approx(0.84) and out["n"] == 5
  half = 2.776 * np.std([0.8, 0.82, 0.84, 0.86, 0.88], ddof=1) / np.sqrt(5)
  assert out["ci95"] == pytest.approx([0.84 - half, 0.84 + half])
  assert stats.seed_interval([0.5])["ci95"] is None
  # Paired: a small but consistent gain is decided; noise around zero is not.
  assert stats.paired_difference([0.81, 0.92, 0.73, 0.85], [0.8, 0.9, 0.72, 0.83])["decided"]
  assert not stats.paired_difference([0.81, 0.88, 0.73, 0.85], [0.8, 0.9, 0.72, 0.86])["decided"]
  with pytest.raises(ValueError, match="do not pair"):
    stats.paired_difference([1, 2], [1])


def test_descending_ranks_share_the_better_rank_on_ties():
  assert stats.descending_ranks({"a": 0.9, "b": 0.7, "c": 0.7, "d": 0.1}) == {
      "a": 1, "b": 2, "c": 2, "d": 4}


def test_spearman_over_common_names_with_average_ranks_for_ties():
  assert stats.spearman({"a": 1, "b": 2, "c": 2}, {"a": 1, "b": 2, "c": 3}) == (
      pytest.approx(np.corrcoef([1, 2.5, 2.5], [1, 2, 3])[0, 1]))
  assert stats.spearman({"a": 1, "b": 2}, {"a": 1, "b": 2, "c": 3}) is None  # 2 in common
  assert stats.spearman({"a": 1, "b": 1, "c": 1}, {"a": 1, "b": 2, "c": 3}) is None  # all tied
  scipy_stats = pytest.importorskip("scipy.stats")
  a, b = {"a": 0.3, "b": 0.9, "c": 0.9, "d": 0.1}, {"a": 0.5, "b": 0.2, "c": 0.8, "d": 0.4}
  assert stats.spearman(a, b) == pytest.approx(
      scipy_stats.spearmanr([a[k] for k in "abcd"], [b[k] for k in "abcd"]).statistic)


def test_spearman_permutation_p_exact_and_sampled():
  four = {k: i for i, k in enumerate("abcd")}
  # A perfect order of 4: 2 of the 24 orderings reach |rho| = 1.
  assert stats.spearman_permutation_p(four, four) == pytest.approx(2 / 24)
  assert stats.spearman_permutation_p(four, {"a": 1}) is None
  # With ties, exactly the share of orderings whose |rho| reaches the observed one.
  a = {"a": 1, "b": 2, "c": 2, "d": 3, "e": 5, "f": 4}
  b = {"a": 2, "b": 1, "c": 3, "d": 3, "e": 6, "f": 5}
  names = sorted(a)
  observed = abs(stats.spearman(a, b))
  reach = [abs(stats.spearman(a, dict(zip(names, order)))) >= observed - 1e-12
           for order in itertools.permutations([b[k] for k in names])]
  assert stats.spearman_permutation_p(a, b) == pytest.approx(np.mean(reach))
  rng = np.random.default_rng(0)
  names = [f"k{i}" for i in range(12)]
  x = dict(zip(names, rng.random(12)))
  same = stats.spearman_permutation_p(x, x)
  assert same == pytest.approx(1 / 20_001)  # no random ordering reaches it
  noise = dict(zip(names, rng.random(12)))
  scipy_stats = pytest.importorskip("scipy.stats")
  ours = stats.spearman_permutation_p(x, noise)
  theirs = scipy_stats.spearmanr([x[k] for k in names], [noise[k] for k in names],
                                 alternative="two-sided")
  exact = scipy_stats.permutation_test(
      ([x[k] for k in names],), lambda y: scipy_stats.spearmanr([noise[k] for k in names],
                                                               y).statistic,
      permutation_type="pairings", n_resamples=20_000, random_state=0).pvalue
  # scipy's two-sided p doubles the smaller tail, ours counts |rho|: without ties the same.
  assert abs(ours - exact) < 0.02 and abs(ours - theirs.pvalue) < 0.1
