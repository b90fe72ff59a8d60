"""The summary: claims read from a hand-made summary alone (no run folder), and the versioned, atomic file."""

from __future__ import annotations

import json

import pytest

from pivotgym.errors import ConfigError
from pivotgym.experiment.summary import SUMMARY_VERSION, claims, comparison_label, read_summary, write_summary


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

    line = next(c for c in claims(_ood_summary(sft_minus_base, pivot_minus_sft)) if "OOD retained" in c)
    assert f"SFT regresses**: {verdict}" in line
    assert f"SFT − base on OOD {100 * sft_minus_base[0]:+.1f} points" in line and f"({side});" in line


def test_ood_claim_is_read_against_the_model_both_arms_start_from():
    """The study's OOD verdict compared SFT with base while both arms started from the warm-up model, whose own
    OOD gain then passed for SFT's: against the warm-up, an SFT change whose interval includes 0 leaves nothing
    to retain, so the claim is not measurable (not contradicted)."""

    summary = _ood_summary((0.095, 0.05, 0.14), (0.006, -0.013, 0.025))  # SFT - base: the warm-up's gain
    summary["rl_start"] = "warmup"
    summary["differences"]["sft-vs-warmup-ood"] = {
        "diff": -0.008,
        "low": -0.03,
        "high": 0.014,
        "items": 200,
        "seeds": 5,
        "verdict": "not measurable at this scale",
    }
    line = next(c for c in claims(summary) if "OOD retained" in c)
    assert "SFT regresses**: not measurable at this scale: SFT does not measurably change OOD from the warm-up" in line
    assert "SFT − warm-up on OOD -0.8 points" in line and "contradicted" not in line


def test_the_primary_comparison_comes_first_and_an_unmade_one_says_so():

    summary = _ood_summary((-0.10, -0.18, -0.02), (0.09, 0.02, 0.16))
    summary["primary"] = "pivot-vs-sft-ood"
    lines = claims(summary)
    assert lines[0].startswith("- **Primary comparison** (named in the config before the run), PivotRL − SFT, OOD:")
    assert "secondary" in lines[1]
    summary["primary"] = "pivot-vs-sft-p_credited"
    assert "not measurable at this scale (the run has no item scores of both models)" in claims(summary)[0]
    label = comparison_label("e2e-expert-states-vs-warmup-in_domain")
    assert label == "E2E RL, from expert states − warm-up, in-domain"


def test_matched_budget_claims_print_why_they_could_not_be_made():

    summary = _ood_summary((-0.10, -0.18, -0.02), (0.09, 0.02, 0.16))
    summary["budget"] = {
        "seconds": {"verdict": "not measurable at this scale", "reason": "no curve point ...: reference in seed #0"}
    }
    line = next(c for c in claims(summary) if "matched wall-clock" in c)
    assert line.endswith("not measurable at this scale (no curve point ...: reference in seed #0).")


@pytest.mark.parametrize("bad", ["pivot-vs-sft", "pivot-vs-nobody-in_domain", "pivot-sft-in_domain"])
def test_a_primary_that_names_no_comparison_fails_at_load(tmp_path, bad):
    from pivotgym.errors import ConfigError
    from pivotgym.experiment.config import load_experiment

    path = tmp_path / "x.yaml"
    path.write_text(f"name: x\nenv: planning/gripper-gen-v0\nprimary: {bad}\n")
    with pytest.raises(ConfigError, match="primary"):
        load_experiment(path)
    path.write_text("name: x\nenv: planning/gripper-gen-v0\nprimary: pivot-vs-sft-p_credited\n")
    with pytest.raises(ConfigError, match="needs eval.likelihood"):
        load_experiment(path)


def test_the_summary_file_is_versioned_and_another_version_is_refused_with_the_fix(tmp_path):
    path = tmp_path / "summary.json"
    write_summary(path, {"name": "x", "methods": {}})
    assert json.loads(path.read_text())["version"] == SUMMARY_VERSION
    assert read_summary(path)["name"] == "x" and not list(tmp_path.glob("*.tmp*"))
    path.write_text(json.dumps({"name": "old", "methods": {}}))  # written before summaries had a version
    with pytest.raises(ConfigError, match="--stages report"):
        read_summary(path)


def test_the_placebo_claim_says_when_non_pivot_states_were_not_measured():
    summary = _ood_summary((-0.01, -0.08, 0.06), (0.01, -0.05, 0.07))
    summary["ablation"] = {"pivot": {"in_domain": 0.1}, "placebo": {"in_domain": 0.1}}
    line = next(c for c in claims(summary) if "placebo changes less" in c)
    assert line.endswith("; not measured on non-pivot training states (`pivot.non_pivot_eval: 0`).")
    assert "(point estimate, no interval)" in line  # no paired difference in this summary
    summary["harm"] = {"pivot": {"delta": -0.05}, "placebo": {"delta": 0.0}}
    line = next(c for c in claims(summary) if "placebo changes less" in c)
    assert line.endswith(
        "; on non-pivot training states PivotRL -5.0 points, placebo (shuffled advantages) +0.0 points."
    )
    summary["differences"]["pivot-vs-placebo-in_domain"] = {
        "diff": 0.02,
        "low": -0.01,
        "high": 0.05,
        "items": 12,
        "seeds": 5,
        "verdict": "not measurable at this scale",
    }
    line = next(c for c in claims(summary) if "placebo changes less" in c)
    assert "no interval" not in line and "paired over the seeds both ran: +2.0 points" in line
