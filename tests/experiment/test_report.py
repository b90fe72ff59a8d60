"""Report building blocks: cost-to-target arithmetic, Markdown tables, PNG plots."""

from __future__ import annotations

import pytest

from pivotgym.experiment.plots import plot_bars, plot_curves
from pivotgym.experiment.report import markdown_table, pct, ratio_text
from pivotgym.experiment.stats import reach_ratio, time_to_reach

E2E = [
    {"turns": 0, "seconds": 0, "score": 0.1},
    {"turns": 100, "seconds": 50, "score": 0.3},
    {"turns": 200, "seconds": 100, "score": 0.5},
]
PIVOT = [{"turns": 40, "seconds": 20, "score": 0.1}, {"turns": 60, "seconds": 30, "score": 0.55}]


def test_reach_ratio_arithmetic():
    assert time_to_reach(E2E, 0.3) == 100 and time_to_reach(E2E, 0.9) is None
    assert reach_ratio(PIVOT, E2E, "turns") == {
        "target": 0.5,
        "fast": 60.0,
        "reference": 200.0,
        "ratio": pytest.approx(200 / 60),
    }
    assert reach_ratio(PIVOT, E2E, "seconds")["ratio"] == pytest.approx(100 / 30)
    never = reach_ratio([{"turns": 5, "seconds": 1, "score": 0.2}], E2E)
    assert never["ratio"] is None and "did not reach" in ratio_text(never, "turns")
    assert "3.33x" in ratio_text(reach_ratio(PIVOT, E2E), "turns")


def test_a_flat_e2e_curve_makes_the_cost_not_measurable():
    flat = [{"turns": 0, "seconds": 0, "score": 0.5}, {"turns": 80, "seconds": 40, "score": 0.5}]
    ratio = reach_ratio(PIVOT, flat)
    assert ratio["reference"] == 0.0 and ratio["ratio"] is None
    assert ratio_text(ratio, "turns").startswith("not measurable: E2E RL never rose above its start score")


def curve(xs, per_task_rows):
    """A curve with per-task scores: point i at cost xs[i] scores per_task_rows[i]."""
    return [
        {"turns": x, "seconds": x / 2, "score": sum(r) / len(r), "per_task": list(r)} for x, r in zip(xs, per_task_rows)
    ]


N = 12  # curve tasks
E2E_SLOW = curve([0, 100, 200, 300], [[0] * N, [1] * 2 + [0] * 10, [1] * 4 + [0] * 8, [1] * 6 + [0] * 6])
PIVOT_FAST = curve([40, 60, 80, 100], [[0] * N, [1] * 6 + [0] * 6, [1] * 7 + [0] * 5, [1] * 8 + [0] * 4])


def test_bootstrap_reproduces_a_consistent_speedup_over_seeds():
    from pivotgym.experiment.stats import REPRODUCED, bootstrap_cost_ratio

    result = bootstrap_cost_ratio([PIVOT_FAST] * 3, [E2E_SLOW] * 3, "turns", resamples=500)
    assert result["ratio"] == pytest.approx(300 / 60)
    assert result["low"] > 1 and result["verdict"] == REPRODUCED
    assert (result["tasks"], result["seeds"]) == (N, 3)
    assert bootstrap_cost_ratio([PIVOT_FAST] * 3, [E2E_SLOW] * 3, "turns", resamples=500) == result  # seeded


FLAT_E2E = curve([0, 100, 200], [[1] + [0] * (N - 1)] * 3)  # E2E RL never rises above its start


@pytest.mark.parametrize(
    "pivot, e2e",
    [(PIVOT_FAST, FLAT_E2E), (curve([40, 60], [[0] * N] * 2), FLAT_E2E), (E2E_SLOW, E2E_SLOW)],
    ids=["flat-e2e", "both-flat", "identical"],
)
def test_flat_or_identical_curves_are_not_measurable(pivot, e2e):
    from pivotgym.experiment.stats import NOT_MEASURABLE, bootstrap_cost_ratio

    result = bootstrap_cost_ratio([pivot], [e2e], "turns", resamples=300)
    assert result["ratio"] == 1.0 and result["verdict"] == NOT_MEASURABLE, result
    assert result["low"] <= 1 <= result["high"]


def test_a_single_lucky_task_is_not_enough():
    """The old report quoted a ratio from one crossing; here PivotRL is ahead only through one task, so the
    interval over tasks must include 1x."""
    from pivotgym.experiment.stats import NOT_MEASURABLE, bootstrap_cost_ratio, cost_ratio

    e2e = curve([0, 100, 200], [[0] * N, [0] * N, [1] + [0] * (N - 1)])
    pivot = curve([50, 60, 70], [[0] * N, [1] + [0] * (N - 1), [1] + [0] * (N - 1)])
    assert cost_ratio([pivot], [e2e]) == pytest.approx(200 / 60)  # the point estimate looks like a 3.3x win
    result = bootstrap_cost_ratio([pivot], [e2e], resamples=1000)
    assert result["verdict"] == NOT_MEASURABLE and result["low"] <= 1.0


def test_pivotrl_costlier_is_contradicted_and_never_reaching_counts_as_zero():
    from pivotgym.experiment.stats import CONTRADICTED, bootstrap_cost_ratio, cost_ratio

    late = curve([400, 500, 600], [[0] * N, [0] * N, [1] * 6 + [0] * 6])
    assert bootstrap_cost_ratio([late], [E2E_SLOW], resamples=300)["verdict"] == CONTRADICTED
    never = curve([40, 60], [[0] * N, [1] + [0] * (N - 1)])
    assert cost_ratio([never], [E2E_SLOW]) == 0.0


def test_bootstrap_rejects_curves_without_per_task_scores():
    from pivotgym.experiment.stats import bootstrap_cost_ratio

    with pytest.raises(ValueError, match="per_task"):
        bootstrap_cost_ratio([PIVOT], [E2E])
    with pytest.raises(ValueError, match="one curve per seed"):
        bootstrap_cost_ratio([PIVOT_FAST, PIVOT_FAST], [E2E_SLOW])
    with pytest.raises(ValueError, match="same tasks"):
        bootstrap_cost_ratio([curve([1], [[0, 1]])], [curve([1], [[0, 1, 1]])])


def test_mean_difference_interval_and_verdicts():
    from pivotgym.experiment.stats import CONTRADICTED, NOT_MEASURABLE, REPRODUCED, bootstrap_mean_difference

    better = {f"t{i}": 1.0 if i < 30 else 0.0 for i in range(60)}
    worse = {f"t{i}": 1.0 if i < 10 else 0.0 for i in range(60)}
    up = bootstrap_mean_difference([better, better], [worse, worse], resamples=500)
    assert up["diff"] == pytest.approx(20 / 60) and up["low"] > 0 and up["verdict"] == REPRODUCED
    assert bootstrap_mean_difference([worse], [better], resamples=500)["verdict"] == CONTRADICTED
    same = bootstrap_mean_difference([better], [better], resamples=200)
    assert same["diff"] == 0 and same["verdict"] == NOT_MEASURABLE
    one = {**worse, "t59": 1.0}  # one item apart out of 60
    assert bootstrap_mean_difference([one], [worse], resamples=500)["verdict"] == NOT_MEASURABLE
    extra = bootstrap_mean_difference([{**better, "only-a": 1.0}], [worse], resamples=100)
    assert extra["items"] == 60  # only the items both models scored
    with pytest.raises(ValueError, match="share no"):
        bootstrap_mean_difference([{"a": 1.0}], [{"b": 1.0}])


def test_markdown_table_and_percent():
    assert markdown_table(["a", "b"], [[1, "x|y"]]) == "| a | b |\n|---|---|\n| 1 | x\\|y |"
    assert pct(0.4321) == "43.2" and pct(None) == "-"


def test_plots_are_real_pngs(tmp_path):
    curves = plot_curves({"PivotRL": PIVOT, "E2E RL": E2E}, tmp_path / "c.png", target=0.5)
    bars = plot_bars(
        {"PivotRL": 0.5, "random turns": 0.3}, tmp_path / "b.png", percent=True, errors={"PivotRL": [0.4, 0.6]}
    )
    for path in (curves, bars):
        data = path.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


def _ood_summary(sft_minus_base: tuple[float, float, float], pivot_minus_sft: tuple[float, float, float]) -> dict:
    from pivotgym.experiment.stats import CONTRADICTED, NOT_MEASURABLE, REPRODUCED

    def diff(d: float, lo: float, hi: float) -> dict:
        verdict = REPRODUCED if lo > 0 else CONTRADICTED if hi < 0 else NOT_MEASURABLE
        return {"diff": d, "low": lo, "high": hi, "items": 100, "seeds": 1, "verdict": verdict}

    return {
        "methods": {"pivot": {"in_domain": None, "delta_ood": 0.0}, "sft": {"in_domain": None, "delta_ood": -0.1}},
        "differences": {"sft-vs-base-ood": diff(*sft_minus_base), "pivot-vs-sft-ood": diff(*pivot_minus_sft)},
        "ablation": {},
    }


@pytest.mark.parametrize(
    "sft_minus_base, pivot_minus_sft, verdict, side",
    [
        ((-0.10, -0.18, -0.02), (0.09, 0.02, 0.16), "reproduced", "below 0"),  # SFT forgets, PivotRL keeps
        ((0.10, 0.02, 0.18), (0.02, 0.00, 0.05), "contradicted (SFT gains OOD here", "above 0"),  # SFT gains
        ((-0.01, -0.08, 0.06), (0.01, -0.05, 0.07), "not measurable", "includes 0"),
    ],
)
def test_ood_retention_claim_reads_the_sign_of_each_difference(sft_minus_base, pivot_minus_sft, verdict, side):
    from pivotgym.experiment.report import _claims

    line = next(c for c in _claims(_ood_summary(sft_minus_base, pivot_minus_sft)) if "OOD retained" in c)
    assert f"SFT regresses**: {verdict}" in line
    assert f"SFT − base on OOD {100 * sft_minus_base[0]:+.1f} points" in line and f"seed(s), {side};" in line
