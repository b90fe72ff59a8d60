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
    assert "**3.33x** fewer" in ratio_text(reach_ratio(PIVOT, E2E), "turns")


def test_a_pivotrl_that_needs_more_than_e2e_is_said_to_need_more():
    # E2E reached its final score after 50 turns, PivotRL (profiling counted) only after 200: 4x more, not
    # "0.25x fewer"
    e2e = [{"turns": 0, "seconds": 0, "score": 0.1}, {"turns": 50, "seconds": 10, "score": 0.3}]
    late = [{"turns": 100, "seconds": 20, "score": 0.1}, {"turns": 200, "seconds": 40, "score": 0.3}]
    ratio = reach_ratio(late, e2e)
    assert ratio["ratio"] == pytest.approx(0.25)
    text = ratio_text(ratio, "turns")
    assert text.endswith("after 200 turns vs E2E's 50: **4.00x** more") and "fewer" not in text


@pytest.mark.parametrize("final", [0.5, 0.4])
def test_an_e2e_curve_that_ends_no_higher_makes_the_cost_not_measurable(final):
    e2e = [{"turns": 0, "seconds": 0, "score": 0.5}, {"turns": 80, "seconds": 40, "score": final}]
    ratio = reach_ratio(PIVOT, e2e)
    assert ratio["reference"] == 0.0 and ratio["ratio"] is None
    text = ratio_text(ratio, "turns")
    # the score named is the final one, labelled as such (not passed off as the start score)
    assert text.startswith("not measurable: E2E RL ended no higher than it started")
    assert f"final score {100 * final:.1f}%" in text


def curve(xs, per_task_rows):
    """A curve with per-task scores: point i at cost xs[i] scores per_task_rows[i]."""
    return [
        {"turns": x, "seconds": x / 2, "score": sum(r) / len(r), "per_task": list(r)} for x, r in zip(xs, per_task_rows)
    ]


N = 12  # curve tasks
E2E_SLOW = curve([0, 100, 200, 300], [[0] * N, [1] * 2 + [0] * 10, [1] * 4 + [0] * 8, [1] * 6 + [0] * 6])
PIVOT_FAST = curve([40, 60, 80, 100], [[0] * N, [1] * 6 + [0] * 6, [1] * 7 + [0] * 5, [1] * 8 + [0] * 4])


def test_matched_budget_scores_each_method_at_the_smaller_final_cost():
    from pivotgym.experiment.stats import NOT_MEASURABLE, REPRODUCED, matched_budget, score_at

    # budget per seed = min(100, 300) = 100 turns: PivotRL's last point (8/12) vs E2E's point at 100 (2/12)
    assert score_at(E2E_SLOW, 100) == [1.0] * 2 + [0.0] * 10
    assert score_at(PIVOT_FAST, 30) is None  # before profiling ends PivotRL has no trained point: no score
    result = matched_budget([PIVOT_FAST] * 3, [E2E_SLOW] * 3, "turns")
    assert result["budget"] == 100 and result["fast"] == pytest.approx(8 / 12)
    assert result["reference"] == pytest.approx(2 / 12) and result["diff"] == pytest.approx(6 / 12)
    assert result["tasks"] == N and result["seeds"] == 3 and result["verdict"] == REPRODUCED
    assert result["mdd"] > 0 and result["low"] <= result["diff"] <= result["high"]
    # without profiling PivotRL's budget starts at 0: min(100 - 40, 300) = 60, where E2E RL has no point but its
    # start: the difference would be PivotRL - E2E's start model under another name, so it is not measurable
    unpaid = matched_budget([PIVOT_FAST], [E2E_SLOW], "turns", profiling=False)
    assert unpaid["budget"] == 60 and unpaid["verdict"] == NOT_MEASURABLE and "diff" not in unpaid
    assert "reference in seed 0 (budget 60)" in unpaid["reason"]
    named = matched_budget([PIVOT_FAST], [E2E_SLOW], profiling=False, names=("PivotRL", "E2E RL"), seeds=[7])
    assert named["reason"].endswith(": E2E RL in seed 7 (budget 60)")


def test_scores_are_interpolated_inside_each_curve():
    from pivotgym.experiment.stats import score_at

    # halfway between E2E's points at 100 (2 tasks solved) and 200 (4 solved)
    assert score_at(E2E_SLOW, 150) == [1.0, 1.0, 0.5, 0.5] + [0.0] * 8
    assert score_at(E2E_SLOW, 301) is None  # past the curve's end: nothing was measured there


def test_a_budget_axis_the_curves_do_not_record_is_an_error():
    from pivotgym.experiment.stats import matched_budget

    with pytest.raises(ValueError, match="lack 'lr_sum'"):
        matched_budget([PIVOT_FAST], [E2E_SLOW], "lr_sum")


FLAT_E2E = curve([0, 100, 200], [[1] + [0] * (N - 1)] * 3)  # E2E RL never rises above its start


def test_a_flat_e2e_curve_is_still_compared_at_the_matched_budget():
    """The old cost ratio returned 1x by construction when E2E never improved; the matched budget compares the
    scores the two methods actually reached."""
    from pivotgym.experiment.stats import NOT_MEASURABLE, REPRODUCED, matched_budget

    assert matched_budget([PIVOT_FAST], [FLAT_E2E])["verdict"] == REPRODUCED
    same = matched_budget([E2E_SLOW], [E2E_SLOW])
    assert same["diff"] == 0 and same["verdict"] == NOT_MEASURABLE


def test_a_single_lucky_task_is_not_enough():
    from pivotgym.experiment.stats import NOT_MEASURABLE, matched_budget

    e2e = curve([0, 40, 200], [[0] * N, [0] * N, [0] * N])
    pivot = curve([50, 60, 70], [[0] * N, [1] + [0] * (N - 1), [1] + [0] * (N - 1)])
    result = matched_budget([pivot], [e2e])
    assert result["diff"] == pytest.approx(1 / N) and result["verdict"] == NOT_MEASURABLE
    assert result["mdd"] > result["diff"]  # the design cannot detect a one-task difference


def test_pivotrl_behind_is_contradicted_and_one_that_had_not_started_is_not_measured():
    from pivotgym.experiment.stats import CONTRADICTED, NOT_MEASURABLE, matched_budget

    slow = curve([40, 100, 300], [[0] * N, [0] * N, [0] * N])
    assert matched_budget([slow], [E2E_SLOW])["verdict"] == CONTRADICTED  # at 300 turns PivotRL is still at 0
    late = curve([400, 500, 600], [[0] * N, [0] * N, [1] * 6 + [0] * 6])
    result = matched_budget([late], [E2E_SLOW])  # at 300 turns PivotRL was still profiling
    assert result["verdict"] == NOT_MEASURABLE and "fast in seed 0" in result["reason"]


def test_matched_budget_rejects_curves_without_per_task_scores():
    from pivotgym.experiment.stats import matched_budget

    with pytest.raises(ValueError, match="per_task"):
        matched_budget([PIVOT], [E2E])
    with pytest.raises(ValueError, match="one curve per seed"):
        matched_budget([PIVOT_FAST, PIVOT_FAST], [E2E_SLOW])
    with pytest.raises(ValueError, match="same tasks"):
        matched_budget([curve([1], [[0, 1]])], [curve([1], [[0, 1, 1]])])


def test_mean_difference_interval_and_verdicts():
    from pivotgym.experiment.stats import CONTRADICTED, NOT_MEASURABLE, REPRODUCED
    from pivotgym.experiment.stats import item_difference as paired_item_difference

    better = {f"t{i}": 1.0 if i < 30 else 0.0 for i in range(60)}
    worse = {f"t{i}": 1.0 if i < 10 else 0.0 for i in range(60)}
    up = paired_item_difference([better, better], [worse, worse])
    assert up["diff"] == pytest.approx(20 / 60) and up["low"] > 0 and up["verdict"] == REPRODUCED
    assert up["method"] == "crossed" and up["seeds"] == 2 and 0 < up["mdd"] < up["diff"]
    assert paired_item_difference([better], [worse])["method"] == "paired-t"
    assert paired_item_difference([worse], [better])["verdict"] == CONTRADICTED
    same = paired_item_difference([better], [better])
    assert same["diff"] == 0 and same["verdict"] == NOT_MEASURABLE
    one = {**worse, "t59": 1.0}  # one item apart out of 60
    assert paired_item_difference([one], [worse])["verdict"] == NOT_MEASURABLE
    extra = paired_item_difference([{**better, "only-a": 1.0}], [worse])
    assert extra["items"] == 60  # only the items both models scored
    with pytest.raises(ValueError, match="share no"):
        paired_item_difference([{"a": 1.0}], [{"b": 1.0}])


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


def test_harm_check_reads_non_pivot_pass_and_drift(tmp_path):
    import json

    from scipy import stats as sps

    from pivotgym.experiment.layout import RunLayout
    from pivotgym.experiment.report import harm_check

    layout = RunLayout(tmp_path)
    runs = {"pivot": [(0.5, 0.5), (0.5, 0.625)], "placebo": [(0.5, 0.25), (0.5, 0.375)]}
    for tag, per_seed in runs.items():
        for seed, (start, end) in enumerate(per_seed):
            path = layout.metrics(tag, seed)
            path.parent.mkdir(parents=True)
            rows = [
                {"kind": "eval", "step": 0, "eval_non_pivot_pass": start, "eval_non_pivot_states": 8},
                {"kind": "train", "step": 1, "drift_rms": 1e-5},
                {"kind": "train", "step": 2, "drift_rms": 3e-5 * (seed + 1)},
                {"kind": "eval", "step": 2, "eval_non_pivot_pass": end, "eval_non_pivot_states": 8},
            ]
            path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    harm = harm_check(layout, [0, 1, 2])  # seed 2 never ran: left out
    assert harm["pivot"]["delta"] == 0.0625 and harm["placebo"]["delta"] == -0.1875
    assert harm["placebo"]["drift_rms"] == 4.5e-5 and harm["placebo"]["seeds"] == 2
    # the change's paired t interval over the two seeds: mean -0.1875, sd 0.0884, t(0.975, 1) = 12.71
    interval = harm["placebo"]["interval"]
    half = sps.t.ppf(0.975, 1) * 0.125 / 2**0.5 / 2**0.5
    assert interval["seeds"] == 2 and interval["low"] == pytest.approx(-0.1875 - half)
    assert interval["high"] == pytest.approx(-0.1875 + half) and interval["mdd"] > 0


def test_seeds_that_all_changed_alike_give_no_interval_rather_than_one_of_zero_width():
    from pivotgym.experiment.stats import seed_difference

    # two seeds, each +1 of 16 non-pivot states: a t interval of zero width would read as "reproduced"
    same = seed_difference([0.0625, 0.0625])
    assert same["diff"] == 0.0625 and same["low"] is None and same["high"] is None and same["mdd"] is None
    assert same["verdict"] == "not measurable at this scale" and "same difference" in same["reason"]
    spread = seed_difference([0.0625, 0.125])
    assert spread["low"] < 0.0625 < 0.125 < spread["high"] and "reason" not in spread


@pytest.mark.parametrize("cap, held_back", [(10, True), (23, False), (None, False)])
def test_an_e2e_turn_cap_below_the_longest_plan_is_called_a_handicap(tmp_path, cap, held_back):
    from pivotgym.experiment import ExperimentConfig
    from pivotgym.experiment.layout import RunLayout
    from pivotgym.experiment.report import e2e_turn_cap
    from pivotgym.experiment.summary import claims
    from pivotgym.jsonl import write_trajectories
    from pivotgym.types import Trajectory

    layout = RunLayout(tmp_path)
    layout.make_dirs()
    plans = {"long": 15, "mid": 11, "short": 3}  # assistant turns of each task's expert plan
    write_trajectories(
        layout.expert,
        [
            Trajectory(id=t, env_id="e", task_id=t, messages=[{"role": "assistant", "content": "a"}] * n)
            for t, n in plans.items()
        ],
    )
    config = ExperimentConfig(name="x", env="planning/gripper-gen-v0", e2e={"max_turns": cap} if cap else {})
    found = e2e_turn_cap(layout, config)
    assert (found is not None) == held_back
    if held_back:
        assert found == {"max_turns": 10, "longest_plan": 15, "unsolvable": ["long", "mid"]}
        line = next(c for c in claims({"methods": {}, "ablation": {}, "e2e_turn_cap": found}) if "held back" in c)
        assert "capped at 10 turns while the longest expert plan it trains on has 15 steps" in line
        assert "2 of its tasks cannot be solved" in line


def test_floors_stand_beside_the_in_domain_score(tmp_path):
    import json

    from pivotgym.eval.floors import METRICS
    from pivotgym.experiment import ExperimentConfig
    from pivotgym.experiment.layout import RunLayout
    from pivotgym.experiment.report import write_experiment_report

    layout = RunLayout(tmp_path)
    layout.make_dirs()
    metric = {"mean": 0.25, "low": 0.2, "high": 0.3, "n": 40, "sd": 0.1, "se": 0.016, "method": "t"}
    metrics = {m: dict(metric) for m in METRICS}
    metrics["expert"]["mean"], metrics["legal"]["mean"] = 1.0, 4.0
    floors = {"metrics": metrics, "judged_states": 320, "problems": 40}
    layout.floors.write_text(json.dumps(floors))
    config = ExperimentConfig(name="x", env="planning/gripper-gen-v0", curve={"metric": "turns"})
    summary = write_experiment_report(layout, config)
    report = layout.report.read_text()
    assert "| random legal action (floor) | 25.0 |" in report and "| expert action (ceiling) | 100.0 |" in report
    assert "320 held-out states of 40 problems" in report and "[20.0, 30.0]" in report
    assert summary["floors"]["random_legal"]["mean"] == 0.25


def test_parse_rate_stands_beside_each_models_ood_score(tmp_path):
    import json

    from pivotgym.experiment import ExperimentConfig
    from pivotgym.experiment.layout import RunLayout
    from pivotgym.experiment.report import write_experiment_report

    layout = RunLayout(tmp_path)
    layout.make_dirs()

    def result(value: float, parsed: float) -> dict:
        score = {"value": value, "metric": "accuracy", "n": 200, "ci95": [0, 1], "parse_rate": parsed}
        return {"scores": {"reasoning/chain-sum-v0@test": score}, "role": {"reasoning/chain-sum-v0@test": "ood"}}

    layout.result("base").write_text(json.dumps(result(0.16, 0.9)))
    layout.result("sft", 0).write_text(json.dumps(result(0.25, 1.0)))
    write_experiment_report(layout, ExperimentConfig(name="x", env="arith/chain-v0"))
    report = layout.report.read_text()
    assert "Parse rate" in report and "| reasoning/chain-sum-v0@test | 90.0 | 100.0 |" in report


def test_each_method_is_compared_with_the_model_it_starts_from_and_the_placebo(tmp_path):
    """With rl_init: warmup the report gives PivotRL, SFT and the placebo minus the warm-up model, and PivotRL
    minus the placebo, as paired intervals over the same test tasks."""
    import json

    from pivotgym.experiment import ExperimentConfig
    from pivotgym.experiment.layout import RunLayout
    from pivotgym.experiment.report import write_experiment_report

    layout = RunLayout(tmp_path)
    layout.make_dirs()
    member = "planning/gripper-gen-v0@test"
    scores = {"base": [0.0] * 4, "warmup": [0.5, 0.4, 0.6, 0.5], "sft": [0.7, 0.6, 0.8, 0.7]}
    scores |= {"pivot": [0.6, 0.5, 0.6, 0.6], "placebo": [0.5, 0.4, 0.5, 0.5]}
    for tag, per_task in scores.items():
        path = layout.result(tag, None if tag == "base" else 0)
        value = {"value": sum(per_task) / 4, "metric": "turn_accuracy", "n": 4, "ci95": [0, 1]}
        path.write_text(json.dumps({"scores": {member: value}, "role": {member: "in_domain"}}))
        rows = [{"member": member, "task_id": f"t{i}", "reward": r} for i, r in enumerate(per_task)]
        layout.items(path).write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = ExperimentConfig(
        name="x", env="planning/gripper-gen-v0", rl_init="warmup", warmup_tasks=2, ablations=["placebo"]
    )
    summary = write_experiment_report(layout, config)
    report = layout.report.read_text()
    assert "from the warm-up model they start from" in report
    assert "- SFT − warm-up: +20.0 points" in report and "- PivotRL − warm-up: +7.5 points" in report
    assert "- PivotRL − placebo (shuffled advantages): +10.0 points" in report
    assert summary["differences"]["placebo-vs-warmup-in_domain"]["diff"] == pytest.approx(-0.025)
    assert "PivotRL 57.5 vs placebo 47.5 (paired over the seeds both ran: +10.0 points" in report


def test_claim_b_is_also_read_on_the_probability_of_a_credited_action(tmp_path):
    """With eval.likelihood the in-domain differences are also taken on p_credited (the likelihood member), a
    separate paired interval beside the greedy one, and p_legal is not mixed in."""
    import json

    from pivotgym.experiment import ExperimentConfig
    from pivotgym.experiment.layout import RunLayout
    from pivotgym.experiment.report import write_experiment_report

    layout = RunLayout(tmp_path)
    layout.make_dirs()
    member = "planning/gripper-gen-v0@test"
    greedy = {"base": [0.0] * 4, "warmup": [0.5] * 4, "sft": [0.5, 0.6, 0.5, 0.6], "pivot": [0.6, 0.5, 0.6, 0.6]}
    credited = {
        "base": [0.0] * 4,
        "warmup": [0.4] * 4,
        "sft": [0.40, 0.42, 0.41, 0.43],
        "pivot": [0.5, 0.51, 0.5, 0.52],
    }
    for tag in greedy:
        path = layout.result(tag, None if tag == "base" else 0)
        scores, roles, rows = {}, {}, []
        for key, role, metric, per_task in (
            (member, "in_domain", "turn_accuracy", greedy[tag]),
            (f"{member}:p_credited", "likelihood", "p_credited", credited[tag]),
            (f"{member}:p_legal", "likelihood", "p_legal", [1.0] * 4),
        ):
            scores[key] = {"value": sum(per_task) / 4, "metric": metric, "n": 4, "ci95": [0, 1]}
            roles[key] = role
            rows += [{"member": key, "task_id": f"t{i}", "reward": r, "metric": metric} for i, r in enumerate(per_task)]
        path.write_text(json.dumps({"scores": scores, "role": roles}))
        layout.items(path).write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = ExperimentConfig(name="x", env="planning/gripper-gen-v0", rl_init="warmup", warmup_tasks=2)
    summary = write_experiment_report(layout, config)
    likely = summary["differences"]["pivot-vs-sft-p_credited"]
    assert likely["diff"] == pytest.approx(0.0925) and likely["items"] == 4 and likely["verdict"] == "reproduced"
    assert summary["differences"]["pivot-vs-sft-in_domain"]["diff"] == pytest.approx(0.025)
    assert summary["differences"]["sft-vs-warmup-p_credited"]["diff"] == pytest.approx(0.015)
    report = layout.report.read_text()
    assert "- PivotRL − warm-up, P(credited action): +10.7 points" in report
    assert "**In-domain PivotRL > SFT, by the probability of a credited action** " in report


def test_spend_table_keeps_a_fractional_mean_of_applied_steps(tmp_path):
    from pivotgym.experiment.accounting import accounting_table, write_accounting
    from pivotgym.experiment.layout import RunLayout

    layout = RunLayout(tmp_path)
    for seed, applied in ((0, 1), (1, 2)):
        path = layout.accounting("e2e", seed)
        path.parent.mkdir(parents=True)
        summary = {"steps": 4, "counters": {"optimizer_steps_applied": applied, "total_turns": 100}}
        write_accounting(path, method="e2e", start="base", data="episodes", summary=summary, optimizer_steps=4)
    table, data = accounting_table(layout, [0, 1])
    assert data["e2e"]["optimizer_steps_applied"] == 1.5
    assert "1.5 of 4" in table[0]  # not rounded to "2 of 4"


def test_run_time_sums_each_stages_runs_over_seeds_and_reads_folders_that_kept_stage_totals():
    from pivotgym.experiment.report import stage_seconds

    runs = {"pivot-s1": 2.0, "base": 1.0, "sft-more-s0": 3.0, "pivot-s0": 4.0, "sft-s0": 5.0}
    assert stage_seconds(runs) == {"base": 1.0, "sft": 5.0, "pivot": 6.0, "sft-more": 3.0}
    assert list(stage_seconds(runs)) == ["base", "sft", "pivot", "sft-more"]  # pipeline order
    assert stage_seconds({"pivot": 7.0, "ablation-s0": 1.0, "ablation": 2.0}) == {"pivot": 7.0, "ablation": 3.0}
