"""Selection rules, the uninformative-turn statistics, adaptive-K stopping rules, and the select command."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from pivotgym.jsonl import read_pivot_set, write_profiles
from pivotgym.pivot import AdaptiveK, SelectionRule, select_pivots, turn_stats
from pivotgym.types import TurnProfile


def profile(env: str, turn: int, rewards: list[float]) -> TurnProfile:
    mean = sum(rewards) / len(rewards)
    var = sum((r - mean) ** 2 for r in rewards) / len(rewards)
    return TurnProfile(
        trajectory_id=f"{env}:t",
        turn=turn,
        env_id=env,
        task_id="t",
        k=len(rewards),
        rewards=rewards,
        mean=mean,
        var=var,
        reasons=[""] * len(rewards),
        reference={},
        verifier={"name": "v", "version": "1"},
        key=f"{env}-{turn}",
    )


PROFILES = [
    profile("a/x-v0", 0, [0, 0, 0, 0]),  # all fail
    profile("a/x-v0", 1, [1, 1, 1, 1]),  # all pass
    profile("a/x-v0", 2, [0, 1, 0, 0]),  # pivot, mean .25
    profile("a/x-v0", 3, [1, 1, 1, 0]),  # mixed but too easy
    profile("b/y-v0", 0, [0, 1, 0, 1]),  # pivot, mean .5
    profile("b/y-v0", 1, [0, 0, 0, 0]),  # all fail
    profile("b/y-v0", 2, [0, 0, 0, 1]),  # pivot, mean .25
]


def test_default_rule_keeps_mixed_low_mean_turns() -> None:
    chosen = select_pivots(PROFILES)
    assert [(p.env_id, p.turn) for p in chosen.pivots] == [("a/x-v0", 2), ("b/y-v0", 0), ("b/y-v0", 2)]
    assert chosen.rule["max_mean"] == 0.6 and chosen.rule["min_var"] == 0.0


def test_uninformative_share_per_env() -> None:
    stats = turn_stats(PROFILES)
    assert stats["a/x-v0"]["all_fail"] == 1 and stats["a/x-v0"]["all_pass"] == 1
    assert stats["a/x-v0"]["share_uninformative"] == 0.5
    assert stats["b/y-v0"]["share_uninformative"] == round(1 / 3, 4)
    assert stats["all"]["turns"] == 7 and stats["all"]["uninformative"] == 3
    assert list(stats)[-1] == "all"


def test_top_n_and_per_env_quotas_take_the_hardest() -> None:
    top = select_pivots(PROFILES, SelectionRule(top_n=2))
    assert sorted(p.key for p in top.pivots) == ["a/x-v0-2", "b/y-v0-2"]
    quota = select_pivots(PROFILES, SelectionRule(per_env={"b/y-v0": 1}))
    assert [p.key for p in quota.pivots] == ["a/x-v0-2", "b/y-v0-2"]
    everyone = select_pivots(PROFILES, SelectionRule(per_env={"*": 0}))
    assert everyone.pivots == []
    assert everyone.stats["per_env"]["all"]["pivots"] == 0
    looser = select_pivots(PROFILES, SelectionRule(max_mean=0.8, min_mean=0.5))
    assert [p.key for p in looser.pivots] == ["a/x-v0-3", "b/y-v0-0"]


@pytest.mark.parametrize("k", [4, 8])
def test_adaptive_certain_rules_never_disagree_with_fixed_k(k: int) -> None:
    """Over every binary reward sequence, a stop by a 'certain' rule gives the fixed-K pivot decision."""
    rule = AdaptiveK(max_mean=0.6, min_unanimous=k + 1, block=1)  # unanimity rule off: only certain stops
    for seq in itertools.product([0.0, 1.0], repeat=k):
        full_mean = sum(seq) / k
        fixed_pivot = max(seq) > min(seq) and full_mean < 0.6
        for n in range(1, k + 1):
            reason = rule.stop_reason(seq[:n], k)
            if reason is not None:
                break
        partial = seq[:n]
        mean = sum(partial) / n
        adaptive_pivot = max(partial) > min(partial) and mean < 0.6
        assert adaptive_pivot == fixed_pivot, (seq, n, reason)


def test_adaptive_stop_reasons() -> None:
    rule = AdaptiveK(max_mean=0.6, min_unanimous=7)  # meets the default bound at K=8
    assert rule.stop_reason([0, 0, 0, 0, 0, 0], 8) is None
    assert rule.stop_reason([0] * 7, 8) == "unanimous"
    assert rule.stop_reason([1, 1, 1, 1, 1], 8) == "mean_settled_high"  # 5/8 >= 0.6 whatever follows
    assert rule.stop_reason([0, 1], 8) is None  # mixed, but 7/8 passes could still follow
    assert rule.stop_reason([0, 1, 0, 0, 0], 8) == "mixed"  # at most 4/8 = 0.5 < 0.6
    assert AdaptiveK(settle_mean=False).stop_reason([0, 1], 8) == "mixed"
    m = AdaptiveK.min_unanimous_for(0.25, 0.05)
    assert 0.75**m + 0.25**m <= 0.05 < 0.75 ** (m - 1) + 0.25 ** (m - 1)
    with pytest.raises(ValueError):
        AdaptiveK.min_unanimous_for(0.7, 0.1)


def test_the_old_four_unanimous_rule_is_refused_with_the_fix() -> None:
    """The issue's defect: 4 equal rewards at K=8 drop real low-pass-rate pivots; that rule breaks the bound."""
    from pivotgym.pivot import ProfileConfig
    from pivotgym.pivot.adaptive import miss_probability

    assert miss_probability(0.1, 4, 8, 0.6) > 0.2  # P(pivot) 0.57 fixed vs 0.34 with the old rule
    with pytest.raises(ValueError, match=r"min_unanimous=4 at K=8 .* use min_unanimous >= 7"):
        ProfileConfig(k=8, adaptive=AdaptiveK(min_unanimous=4))
    with pytest.raises(ValueError, match="too small"):
        ProfileConfig(k=4, adaptive=AdaptiveK(min_unanimous=3))
    assert AdaptiveK().unanimous_after(4) is None  # K too small: the rule is off, only the certain rules stop
    ProfileConfig(k=8, adaptive=AdaptiveK())  # the derived run is accepted


@pytest.mark.parametrize("k", [8, 16, 32])
def test_derived_unanimity_run_meets_its_bound_by_simulation(k: int) -> None:
    """The stated guarantee, checked by Monte Carlo on the real rule object: for pass rates >= p_min the
    share of fixed-K pivots the adaptive reading drops is <= delta (plus sampling noise)."""
    import random

    rule = AdaptiveK()  # p_min 0.1, delta 0.05
    m = rule.unanimous_after(k)
    assert m is not None and m < k and rule.miss_bound(m, k) <= rule.delta < rule.miss_bound(m - 1, k)
    rng = random.Random(k)
    trials = 4000
    for p in (0.1, 0.15, 0.3, 0.5, 0.7):
        missed = 0
        for _ in range(trials):
            seq = [float(rng.random() < p) for _ in range(k)]
            fixed = max(seq) > min(seq) and sum(seq) / k < 0.6
            n = 0
            while n < k:
                n = min(k, n + rule.block)
                if rule.stop_reason(seq[:n], k):
                    break
            part = seq[:n]
            missed += fixed and not (max(part) > min(part) and sum(part) / n < 0.6)
        assert missed / trials <= rule.delta + 3 * (rule.delta / trials) ** 0.5, (p, missed / trials)


def test_failed_verifications_never_make_a_pivot() -> None:
    """Undecided draws are not rewards: an all-pass state with a timed-out draw stays all-pass, a state with
    mostly undecided draws is not selected, and the undecided draws are counted."""
    from dataclasses import replace

    legacy = replace(profile("a/x-v0", 9, [1, 1, 1]), undecided=["verify_failed: timeout after 60s"])
    assert legacy.var == 0 and not SelectionRule(max_mean=1.01).admits(legacy)
    low = replace(profile("a/x-v0", 10, [1, 0, 0]), undecided=["verifier_error: boom"])
    assert SelectionRule().admits(low)  # still a pivot on its own merits
    mostly = replace(profile("a/x-v0", 11, [0, 1]), undecided=["x"] * 3)
    assert not SelectionRule().admits(mostly) and SelectionRule(max_failed_share=0.8).admits(mostly)
    chosen = select_pivots([legacy, low, mostly])
    assert [p.turn for p in chosen.pivots] == [10]
    assert chosen.stats["per_env"]["all"]["failed_verifications"] == 5


def test_select_command_prints_and_writes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from pivotgym.cli import main

    source = tmp_path / "profiles.jsonl"
    write_profiles(source, PROFILES)
    out = tmp_path / "pivots.jsonl"
    assert main(["select", str(source), "--out", str(out), "--per-env", "*=5", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["pivots"] == 3 and report["per_env"]["all"]["share_uninformative"] == round(3 / 7, 4)
    pivot_set = read_pivot_set(out)
    assert len(pivot_set.pivots) == 3 and pivot_set.rule["per_env"] == {"*": 5}
    assert main(["select", str(source)]) == 0
    table = capsys.readouterr().out
    assert "uninformative" in table and "50.0%" in table
    assert main(["select", str(source), "--per-env", "oops"]) == 1


def test_select_on_an_empty_profiles_file_fails_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pivotgym.cli import main

    source = tmp_path / "profiles.jsonl"
    source.write_text("")
    out = tmp_path / "pivots.jsonl"
    assert main(["select", str(source), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "no turn profiles" in err and "pivotgym profile" in err and len(err.strip().splitlines()) <= 2
    assert not out.exists()
