"""Pivots with a judged reward, end to end at small sizes: the ``judge`` verifier (the bundled SmolLM2 through
hf, three votes at temperature 1 so a reward can be graded) profiles BFCL expert states sampled
by a tiny policy, selection keeps the mixed ones, and PivotRL trains a step on them with the same judge. The
judge's calls, tokens and seconds reach the profile's stats and the trainer's counters."""

from __future__ import annotations

import json

import pytest

from pivotgym.jsonl import write_jsonl, write_pivot_set, write_trajectories
from pivotgym.pivot import profile as profile_module
from pivotgym.pivot.profile import ProfileConfig, Profiler
from pivotgym.pivot.select import SelectionRule, select_pivots
from pivotgym.registry import get_registry
from pivotgym.sampling.base import SamplingParams
from pivotgym.train import PivotConfig, PivotTrainer

ENV = "tooluse/bfcl-simple-v0"


@pytest.fixture()
def judged(monkeypatch):
    """``judge`` made from the environment in this process's worker judge: three votes per verdict."""
    monkeypatch.setenv("PIVOTGYM_JUDGE", json.dumps({"votes": 3}))
    monkeypatch.setattr(profile_module, "_JUDGE", [])


@pytest.mark.slow
def test_profiling_selection_and_pivotrl_on_a_judged_reward(judged, tiny_sampler, tmp_path):
    from pivotgym.sampling.testing import tiny_llama

    trajectories = list(get_registry().make(ENV).expert_trajectories("test", limit=3))
    config = ProfileConfig(k=4, verifier="judge", params=SamplingParams(temperature=1.0, max_new_tokens=8))
    result = Profiler(tiny_sampler, config, "serial").profile(
        trajectories, tmp_path / "p.jsonl", progress=False, limit=3
    )
    rows = result.profiles
    assert all(row.verifier["name"] == "judge" for row in rows)
    assert result.stats["verifier_cost"]["judge_calls"] >= sum(row.k for row in rows) > 0
    assert any(0 < r < 1 for row in rows for r in row.rewards)  # graded: a share of three votes
    pivots = select_pivots(rows, SelectionRule(max_mean=1.0, min_var=0.0))
    assert pivots.pivots, [row.rewards for row in rows]

    write_pivot_set(tmp_path / "pivots.jsonl", pivots)
    write_trajectories(tmp_path / "expert.jsonl", trajectories)
    model, tokenizer = tiny_llama(seed=1)
    trainer = PivotTrainer(
        PivotConfig(
            output_dir=str(tmp_path / "run"),
            pivots=str(tmp_path / "pivots.jsonl"),
            trajectories=str(tmp_path / "expert.jsonl"),
            verifier="judge",
            steps=1,
            group_size=4,
            pivots_per_step=1,
            max_new_tokens=8,
            eval_pivots=0,
            report_to=["none"],
            progress=False,
        ),
        model=model,
        tokenizer=tokenizer,
    )
    summary = trainer.fit()
    counters = summary["counters"]
    assert counters["judge_calls"] + counters.get("judge_cache_hits", 0) >= 4  # one group of 4 judged
    assert counters["judge_prompt_tokens"] > 0 and counters["judge_seconds"] > 0
    write_jsonl(tmp_path / "summary.jsonl", [summary["counters"]])  # the counters are JSON as written
