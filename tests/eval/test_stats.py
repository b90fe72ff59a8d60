"""Intervals over problems and the minimum detectable difference (pivotgym.eval.stats), with a simulation of
coverage at 5 and 50 problems."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from pivotgym.eval.stats import (
    bca_interval,
    mdd_from_half_width,
    mean_interval_over,
    min_detectable_difference,
    paired_differences,
    paired_t_interval,
    t_interval,
)

#: the simulation's replications (Monte Carlo SE of a 95% coverage: sqrt(.95 * .05 / R) ~ 0.003)
REPS = 5000
#: how far the t interval's simulated coverage may sit from 95% on realistic scores (~4 Monte Carlo SEs)
TOLERANCE = 0.015


def _scores(rng: np.random.Generator, reps: int, problems: int, a: float, b: float, turns: int) -> np.ndarray:
    """Per-problem turn accuracies: each problem has its own success rate p ~ Beta(a, b) (heterogeneous
    problems) and its score is the share of ``turns`` Bernoulli(p) turns that pass: bounded, discrete, skewed."""
    p = rng.beta(a, b, size=(reps, problems))
    return rng.binomial(turns, p) / turns


def _t_coverage(x: np.ndarray, truth: float) -> float:
    n = x.shape[1]
    half = sps.t.ppf(0.975, n - 1) * x.std(axis=1, ddof=1) / math.sqrt(n)
    return float(np.mean(np.abs(x.mean(axis=1) - truth) <= half))


def _percentile_bootstrap_coverage(rng: np.random.Generator, x: np.ndarray, truth: float, resamples: int) -> float:
    """The report's old interval (pivotgym.experiment.stats.bootstrap_mean_difference: resample the problems,
    take the 2.5th and 97.5th sorted resample means), vectorised over replications."""
    reps, n = x.shape
    picks = rng.integers(0, n, size=(reps, resamples, n))
    means = np.take_along_axis(np.broadcast_to(x[:, None, :], picks.shape), picks, axis=2).mean(axis=2)
    means.sort(axis=1)
    low, high = means[:, int(0.025 * (resamples - 1))], means[:, int(0.975 * (resamples - 1))]
    return float(np.mean((low <= truth) & (truth <= high)))


@pytest.mark.parametrize("problems", [5, 50])
def test_the_t_interval_covers_95_percent_of_realistic_per_problem_scores(problems):
    rng = np.random.default_rng(20260521 + problems)
    a, b = 2.0, 3.0  # problems' success rates spread around 40%, eight turns each
    x = _scores(rng, REPS, problems, a, b, turns=8)
    coverage = _t_coverage(x, a / (a + b))
    assert abs(coverage - 0.95) <= TOLERANCE, coverage


def test_the_old_percentile_bootstrap_over_5_problems_undercovers_where_the_t_interval_does_not():
    rng = np.random.default_rng(7)
    a, b = 2.0, 3.0
    x = _scores(rng, 2000, 5, a, b, turns=8)
    boot = _percentile_bootstrap_coverage(rng, x, a / (a + b), resamples=1000)
    t = _t_coverage(x, a / (a + b))
    assert boot < 0.89, boot  # ~86%: the nominal 95% is far off
    assert t - boot > 0.05


def test_the_t_interval_on_strongly_heterogeneous_problems_stays_above_90_percent_at_5_and_near_95_at_50():
    """The honest limit: with U-shaped problem difficulty (many near 0 or 1) five problems cover ~91%."""
    rng = np.random.default_rng(11)
    a, b = 0.5, 0.8
    assert _t_coverage(_scores(rng, REPS, 5, a, b, turns=5), a / (a + b)) >= 0.895
    assert abs(_t_coverage(_scores(rng, REPS, 50, a, b, turns=5), a / (a + b)) - 0.95) <= TOLERANCE


def test_t_interval_matches_the_textbook_formula_and_has_no_interval_below_two_values():
    values = [0.2, 0.4, 0.5, 0.3, 0.6]
    out = t_interval(values)
    sd = float(np.std(values, ddof=1))
    half = sps.t.ppf(0.975, 4) * sd / math.sqrt(5)
    assert out.mean == pytest.approx(0.4) and out.sd == pytest.approx(sd)
    assert (out.low, out.high) == (pytest.approx(0.4 - half), pytest.approx(0.4 + half))
    assert out.half_width == pytest.approx(half) and out.se == pytest.approx(sd / math.sqrt(5))
    lone = t_interval([0.7])
    assert lone.mean == 0.7 and math.isnan(lone.low) and lone.to_dict()["low"] is None
    assert out.to_dict()["method"] == "t" and out.to_dict()["n"] == 5


def test_paired_t_interval_pairs_by_unit_id_and_refuses_mismatched_sequences():
    base = {"p1": 0.2, "p2": 0.5, "p3": 0.4, "only-base": 0.9}
    trained = {"p3": 0.6, "p1": 0.3, "p2": 0.5, "only-trained": 0.0}
    assert paired_differences(base, trained) == pytest.approx([0.1, 0.0, 0.2])
    out = paired_t_interval(base, trained)
    assert out.method == "paired-t" and out.n == 3 and out.mean == pytest.approx(0.1)
    assert out.low < 0.1 < out.high
    assert out.to_dict()["mdd"] == pytest.approx(min_detectable_difference(out.sd, 3))
    assert "mdd" not in t_interval([0.1, 0.2]).to_dict()
    with pytest.raises(ValueError, match="0 trained|3 base scores but 2"):
        paired_differences([0.1, 0.2, 0.3], [0.1, 0.2])
    with pytest.raises(ValueError, match="two mappings"):
        paired_differences(base, [0.1])


def test_bca_interval_brackets_the_mean_is_reproducible_and_degenerate_values_give_a_point():
    values = [0.1, 0.9, 0.4, 0.5, 0.3, 0.7, 0.2, 0.6, 0.5, 0.8]
    first, again = bca_interval(values, seed=3), bca_interval(values, seed=3)
    assert first == again and first.method == "bca"
    assert first.low < first.mean < first.high
    t = t_interval(values)
    assert abs(first.half_width - t.half_width) < 0.5 * t.half_width  # same scale as the t interval
    flat = bca_interval([0.5] * 6)
    assert flat.low == flat.high == 0.5
    assert mean_interval_over(values, "bca", 0.95) == bca_interval(values)
    with pytest.raises(ValueError, match="'t' or 'bca'"):
        mean_interval_over(values, "percentile")


@pytest.mark.parametrize("n", [5, 20, 50])
def test_the_minimum_detectable_difference_has_80_percent_power_under_the_noncentral_t(n):
    sd = 0.14
    mdd = min_detectable_difference(sd, n)
    crit = sps.t.ppf(0.975, n - 1)
    shift = mdd / (sd / math.sqrt(n))
    power = 1 - sps.nct.cdf(crit, n - 1, shift) + sps.nct.cdf(-crit, n - 1, shift)
    assert power == pytest.approx(0.8, abs=0.015)
    assert min_detectable_difference(sd, 4 * n) < mdd  # more problems, smaller detectable difference


def test_mdd_from_half_width_reproduces_the_issue_numbers():
    """The PivotRL - SFT interval [-17.5, +6.9] over 5 problems: half-width 12.2 points -> ~16 points."""
    mdd = mdd_from_half_width(12.2, 5)
    assert 15.5 < mdd < 17.5
    interval = t_interval([0.1, -0.2, 0.05, 0.3, -0.1, 0.0, 0.2])
    assert mdd_from_half_width(interval.half_width, interval.n) == pytest.approx(interval.mdd())
    assert math.isnan(min_detectable_difference(0.1, 1)) and math.isnan(mdd_from_half_width(1.0, 1))
    with pytest.raises(ValueError, match="power"):
        min_detectable_difference(0.1, 5, power=1.0)


def test_bounds_clip_a_shares_interval_but_keep_the_unclipped_half_width_for_power():
    values = [0.0, 0.0, 0.1, 0.9, 0.05]
    free, clipped = t_interval(values), t_interval(values, bounds=(0.0, 1.0))
    assert free.low < 0 and clipped.low == 0.0 and clipped.high == free.high
    assert clipped.half_width == pytest.approx(free.half_width)
    paired = paired_t_interval([1.0, 0.9, 1.0], [0.0, 0.2, 0.1], bounds=(-1.0, 1.0))
    assert paired.low >= -1.0 and paired.half_width > paired.mean - paired.low


def test_bca_covers_at_50_problems_but_not_at_5_which_is_why_t_is_the_default():
    """scipy's BCa, vectorised over 1,000 replications (Monte Carlo SE ~0.7 points) with 999 resamples each.
    A replication whose five scores are all equal has no BCa interval (NaN): it counts as a miss."""
    import warnings

    rng = np.random.default_rng(5)

    def coverage(problems: int) -> float:
        hits = 0
        for _ in range(10):
            x = _scores(rng, 100, problems, 2.0, 3.0, turns=8)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # scipy warns about the degenerate replications
                result = sps.bootstrap(
                    (x,), np.mean, axis=-1, vectorized=True, n_resamples=999, method="BCa", random_state=rng
                )
            low, high = result.confidence_interval
            hits += int(np.sum((low <= 0.4) & (0.4 <= high)))
        return hits / 1000

    assert abs(coverage(50) - 0.95) <= 0.025
    assert coverage(5) < 0.91  # ~86-88%


def test_pass_hat_k_is_tau2s_all_k_of_n_succeed_averaged_over_tasks():
    from pivotgym.eval.stats import pass_hat_k

    runs = {"a": [True, True, False], "b": [False, False, False], "c": [True, True, True]}
    assert pass_hat_k(runs, 1) == pytest.approx((2 / 3 + 0 + 1) / 3)
    assert pass_hat_k(runs, 2) == pytest.approx((1 / 3 + 0 + 1) / 3)  # C(2,2)/C(3,2) for a
    assert pass_hat_k(runs, 3) == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match=r"pass\^4 needs 4 or more episodes of each task; fewer for \['a', 'b', 'c'\]"):
        pass_hat_k(runs, 4)
