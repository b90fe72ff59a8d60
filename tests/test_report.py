"""Report building blocks: cost-to-target arithmetic, Markdown tables, PNG plots."""

from __future__ import annotations

import pytest

from pivotgym.report import markdown_table, pct, plot_bars, plot_curves, ratio_text, reach_ratio, time_to_reach

E2E = [{"turns": 0, "seconds": 0, "score": 0.1}, {"turns": 100, "seconds": 50, "score": 0.3},
       {"turns": 200, "seconds": 100, "score": 0.5}]
PIVOT = [{"turns": 40, "seconds": 20, "score": 0.1}, {"turns": 60, "seconds": 30, "score": 0.55}]


def test_reach_ratio_arithmetic():
    assert time_to_reach(E2E, 0.3) == 100 and time_to_reach(E2E, 0.9) is None
    assert reach_ratio(PIVOT, E2E, "turns") == {"target": 0.5, "fast": 60.0, "reference": 200.0,
                                               "ratio": pytest.approx(200 / 60)}
    assert reach_ratio(PIVOT, E2E, "seconds")["ratio"] == pytest.approx(100 / 30)
    never = reach_ratio([{"turns": 5, "seconds": 1, "score": 0.2}], E2E)
    assert never["ratio"] is None and "did not reach" in ratio_text(never, "turns")
    assert "3.33x" in ratio_text(reach_ratio(PIVOT, E2E), "turns")


def test_a_flat_e2e_curve_makes_the_cost_not_measurable():
    flat = [{"turns": 0, "seconds": 0, "score": 0.5}, {"turns": 80, "seconds": 40, "score": 0.5}]
    ratio = reach_ratio(PIVOT, flat)
    assert ratio["reference"] == 0.0 and ratio["ratio"] is None
    assert ratio_text(ratio, "turns").startswith("not measurable: E2E RL never rose above its start score")


def test_claim_verdicts_count_only_measurable_seeds():
    from pivotgym.report import _seed_verdict

    win, loss = reach_ratio(PIVOT, E2E), {"target": 0.5, "fast": 300.0, "reference": 200.0, "ratio": 200 / 300}
    flat = {"target": 0.5, "fast": 60.0, "reference": 0.0, "ratio": None}
    never = {"target": 0.5, "fast": None, "reference": 200.0, "ratio": None}
    assert _seed_verdict({"0": win, "1": flat}).startswith("reproduced, 1 of 1 measurable seed(s) (seed 0 3.33x)")
    assert "seed(s) 1 not measurable" in _seed_verdict({"0": win, "1": flat})
    assert _seed_verdict({"0": win, "2": loss}).startswith("mixed, 1 of 2")
    assert _seed_verdict({"0": never}) == "not reproduced, 0 of 1 measurable seed(s) (seed 0 never reached)"
    assert _seed_verdict({"1": flat}).startswith("not measurable in any seed")


def test_markdown_table_and_percent():
    assert markdown_table(["a", "b"], [[1, "x|y"]]) == "| a | b |\n|---|---|\n| 1 | x\\|y |"
    assert pct(0.4321) == "43.2" and pct(None) == "-"


def test_plots_are_real_pngs(tmp_path):
    curves = plot_curves({"PivotRL": PIVOT, "E2E RL": E2E}, tmp_path / "c.png", target=0.5)
    bars = plot_bars({"PivotRL": 0.5, "random turns": 0.3}, tmp_path / "b.png", percent=True,
                     errors={"PivotRL": [0.4, 0.6]})
    for path in (curves, bars):
        data = path.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
