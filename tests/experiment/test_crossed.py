"""The crossed seeds x problems analysis: hand-computed components, the reduction to the per-problem t test, the
seed term in the MDD, and the coverage of its interval by simulation with a known seed effect."""

from __future__ import annotations

import math
import random

import pytest

from pivotgym.experiment.crossed import crossed_design, difference_table
from pivotgym.experiment.stats import item_difference


def test_components_match_a_hand_computed_two_way_anova():
    # 2 seeds x 3 problems: grand mean 3, seed means 2 and 4, problem means 2, 3, 4
    table = [[1.0, 2.0, 3.0], [3.0, 4.0, 5.0]]
    d = crossed_design(table)
    assert d.mean == pytest.approx(3.0)
    assert d.ms_seed == pytest.approx(3 * 2.0 / 1)  # P * sum((seed mean - grand)^2) / (S - 1) = 3 * 2
    assert d.ms_problem == pytest.approx(2 * 2.0 / 2)  # S * sum((problem mean - grand)^2) / (P - 1) = 2 * 2 / 2
    assert d.ms_residual == pytest.approx(0.0)
    assert d.var_seed == pytest.approx(6.0 / 3) and d.var_problem == pytest.approx(2.0 / 2)
    # var(mean) = (MS_seed + MS_problem - MS_resid) / (S P) = 8 / 6
    assert d.se == pytest.approx(math.sqrt(8 / 6))


def test_without_a_seed_effect_it_is_the_per_problem_t_test():
    from pivotgym.eval.stats import t_interval

    rng = random.Random(3)
    problem = [rng.gauss(0, 0.2) for _ in range(30)]
    # seeds differ by noise only, and the seed means are identical (no seed main effect at all)
    noises = ([0.01] * 15 + [-0.01] * 15, [-0.01] * 15 + [0.01] * 15)
    table = [[p + e for p, e in zip(problem, noise)] for noise in noises]
    d = crossed_design(table)
    assert d.var_seed == 0.0 and d.seed_effect == "none seen"
    means = [sum(col) / 2 for col in zip(*table)]
    t = t_interval(means)
    low, high = d.interval()
    assert (low, high) == (pytest.approx(t.low), pytest.approx(t.high)) and d.df == pytest.approx(29)


def test_one_seed_is_the_paired_t_interval_and_says_the_seed_effect_is_not_estimable():
    a = [{f"t{i}": float(i % 3 == 0) for i in range(20)}]
    b = [{f"t{i}": float(i % 5 == 0) for i in range(20)}]
    out = item_difference(a, b)
    assert out["method"] == "paired-t" and out["seed_effect"] == "not estimable" and out["seeds"] == 1
    assert out["df"] == pytest.approx(19) and out["low"] < out["diff"] < out["high"]


def test_a_table_without_spread_has_no_interval_and_no_mdd():
    """Two models that score 0 on every problem (a 135M model on tau2): the difference is 0, but a variance of
    0 estimated from such a table is no evidence that any difference would be seen - the interval and the
    MDD are not estimable (None), never [0, 0] and 0 points."""
    zeros = [{"t5": 0.0, "t9": 0.0}]
    out = item_difference(zeros, zeros)
    assert out["diff"] == 0.0 and (out["low"], out["high"], out["mdd"]) == (None, None, None)
    same = item_difference([{"a": 0.5, "b": 0.5, "c": 0.5}], [{"a": 0.25, "b": 0.25, "c": 0.25}])
    assert same["diff"] == pytest.approx(0.25) and same["mdd"] is None  # a constant gap: no spread either


def test_a_seed_that_is_better_everywhere_widens_the_interval_and_more_problems_cannot_remove_it():
    rng = random.Random(0)
    problem = [rng.gauss(0, 0.1) for _ in range(40)]
    shifts = [0.08, -0.06, 0.05, -0.07, 0.0]
    table = [[0.02 + s + p + rng.gauss(0, 0.02) for p in problem] for s in shifts]
    d = crossed_design(table)
    assert d.seed_effect == "counted" and d.var_seed > 0
    per_problem_sd = math.sqrt(sum((m - d.mean) ** 2 for m in (sum(c) / 5 for c in zip(*table))) / 39)
    assert d.se > 1.5 * per_problem_sd / math.sqrt(40)  # the old interval (t over problems) was far narrower
    floor = (1.959964 + 0.841621) * math.sqrt(d.var_seed / 5)
    assert d.mdd_at(5, 10_000) > floor * 0.99  # more problems: the seed term stays
    assert d.mdd_at(20, 40) < d.mdd  # more seeds shrink it


def test_difference_table_keeps_only_shared_items_and_pairs_seeds():
    items, table = difference_table([{"a": 1.0, "b": 0.0, "x": 1.0}], [{"a": 0.0, "b": 0.0}])
    assert items == ["a", "b"] and table == [[1.0, 0.0]]
    with pytest.raises(ValueError, match="one item mapping per seed"):
        difference_table([{"a": 1.0}], [])
    with pytest.raises(ValueError, match="share no"):
        difference_table([{"a": 1.0}], [{"b": 1.0}])


def _coverage(seeds: int, reps: int, crossed: bool) -> float:
    """Share of simulated experiments whose 95% interval covers the true difference 0.03, with a seed effect
    (SD 0.03), a problem effect (SD 0.10) and residual noise (SD 0.08) over 40 problems."""
    from pivotgym.eval.stats import t_interval

    rng = random.Random(seeds)
    true, hits = 0.03, 0
    for _ in range(reps):
        problem = [rng.gauss(0, 0.10) for _ in range(40)]
        shifts = [rng.gauss(0, 0.03) for _ in range(seeds)]
        table = [[true + a + p + rng.gauss(0, 0.08) for p in problem] for a in shifts]
        if crossed:
            low, high = crossed_design(table).interval()
        else:  # the old analysis: each problem averaged over seeds, t over problems
            t = t_interval([sum(c) / seeds for c in zip(*table)])
            low, high = t.low, t.high
        hits += low <= true <= high
    return hits / reps


@pytest.mark.parametrize("seeds", [5, 20])
def test_the_crossed_interval_keeps_its_coverage_with_a_seed_effect(seeds):
    # 600 replications: the share's SE is ~0.009 at 95%, so [0.92, 0.985] leaves > 3 SE either side
    assert 0.92 <= _coverage(seeds, 600, crossed=True) <= 0.985


def test_the_old_per_problem_interval_undercovers_with_the_same_seed_effect():
    # its SE leaves out seed/S: sqrt(0.000282 / 0.000462) = 0.78 of the true one, so it covers P(|Z| < 1.53) = 0.87
    assert _coverage(5, 600, crossed=False) < 0.90


def test_the_report_says_why_a_flat_table_has_no_mdd():
    from pivotgym.experiment.stats import difference_text

    text = difference_text(item_difference([{"t5": 0.0, "t9": 0.0}], [{"t5": 0.0, "t9": 0.0}]), unit="test tasks")
    assert "CI [-, -]" in text and "not estimable (every item and seed gave the same difference" in text
    assert "0.0 points" not in text.split("detectable")[1]
