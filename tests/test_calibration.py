"""Calibration (:mod:`pivotgym.calibration`, ``pivotgym calibrate``): verdicts against played-out outcomes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pivotgym.calibration import (
    CalibrationError,
    Confusion,
    calibrate,
    continue_episode,
    env_candidates,
    format_calibration,
    paraphrases,
)
from pivotgym.registry import make, verifier_for
from pivotgym.types import Verdict
from pivotgym.verify import VerifyContext

PIVOTGYM = Path(sys.executable).with_name("pivotgym")


class CreditsEverything:
    """A deliberately lenient verifier: every candidate is "equivalent"."""

    name = "test/lenient"
    version = "1"

    def verify(self, context: VerifyContext, candidate: str) -> Verdict:
        return Verdict.ok("lenient")


def _run(env_id: str, continuation: str, n: int = 1, split: str = "test", **verifiers: object):
    env = make(env_id)
    trajectories = list(env.expert_trajectories(split, limit=n))
    judges = verifiers or {"functional": verifier_for(env_id), "exact": verifier_for(env_id, "exact")}
    return calibrate(env_id, trajectories, judges, continuation=continuation, split=split)


def test_optimal_continuation_credits_equivalent_actions_the_exact_verifier_misses():
    result = _run("planning/gripper-v0", "optimal")
    functional, exact = result.confusion("functional"), result.confusion("exact")
    # gripper's balls and grippers are interchangeable: many actions at a state are optimal
    assert functional.tp > exact.tp > 0 and exact.fn > 0
    assert (functional.fp, functional.fn) == (0, 0)  # the functional verifier is h*-exact on this domain
    assert exact.fp == 0
    assert {"expert", "paraphrase", "env", "wrong_action"} <= set(result.sources)
    # every row names a state of the trajectory and an outcome that says why
    assert all(r.outcome.detail for r in result.rows)


def test_expert_continuation_cannot_see_equivalence_by_another_route():
    """Documented property: another optimal action breaks the expert's own remaining plan, so under the
    expert continuation the functional verifier's correct credits show up as false positives."""
    result = _run("planning/gripper-v0", "expert")
    functional = result.confusion("functional")
    assert functional.fp > 0 and functional.fn == 0
    assert result.confusion("exact").fp == 0


def test_a_lenient_verifier_shows_false_positives():
    result = _run("planning/blocks-v0", "optimal", lenient=CreditsEverything())
    lenient = result.confusion("lenient")
    assert lenient.fp > 0 and lenient.fn == 0 and lenient.tn == 0
    assert lenient.rates()["false_positive_rate"]["value"] == 1.0
    worst = result.disagreements("lenient")[0]
    assert worst.verdicts["lenient"]["credited"] and worst.outcome.success is False


def test_outcomes_count_refused_candidates_and_the_turn_budget():
    env = make("planning/blocks-v0")
    trajectory = next(env.expert_trajectories("test", limit=1))
    context = VerifyContext.from_trajectory(trajectory, 0, env_factory=lambda: make("planning/blocks-v0"))
    budget = len(trajectory.assistant_turns())
    refused = continue_episode(context.env(), "(fly to the moon)", None, budget)
    assert refused.success is False and "refused the candidate" in refused.detail
    expert = continue_episode(context.env(), context.expert_text, None, budget)
    assert expert.success is True and expert.turns == budget
    wrong = context.env().wrong_action(context.expert_text)
    assert wrong is not None
    late = continue_episode(context.env(), wrong, None, budget)  # reaches the goal, but in more turns
    assert late.success is False and "the expert needed" in late.detail


def test_paraphrases_of_tool_calls_and_of_text():
    env = make("tooluse/bfcl-multi-turn-v0")
    expert = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "cd", "arguments": '{"folder": "x", "b": 1}'}},
            {"id": "b", "type": "function", "function": {"name": "ls", "arguments": "{}"}},
        ],
    }
    texts = paraphrases(env, expert)
    own = env.render_action(expert)
    assert own not in texts
    assert any('{"b": 1, "folder": "x"}' in t for t in texts)  # arguments reordered
    assert any(t.index('"ls"') < t.index('"cd"') for t in texts if "<tool_call>" in t)  # calls reordered
    assert "[cd(folder='x', b=1), ls()]" in texts
    plain = make("general/arithmetic-v0")
    assert paraphrases(plain, {"role": "assistant", "content": "42"}) == ["  42\n"]


def test_env_candidates_are_distinct_and_start_with_the_expert():
    env = make("planning/gripper-v0")
    trajectory = next(env.expert_trajectories("test", limit=1))
    context = VerifyContext.from_trajectory(trajectory, 0, env_factory=lambda: make("planning/gripper-v0"))
    found = env_candidates(context.env(), trajectory.turn(0).expert)
    texts = [c.text for c in found]
    assert found[0].source == "expert" and len(texts) == len(set(texts))
    assert sum(c.source == "env" for c in found) >= 4  # every applicable action the expert's text is not


def test_confusion_rates_and_undecided():
    matrix = Confusion()
    for credited, success in [(True, True), (True, False), (False, True), (False, False), (None, True), (True, None)]:
        matrix.add(credited, success)
    assert (matrix.tp, matrix.fp, matrix.fn, matrix.tn, matrix.undecided, matrix.undetermined) == (1, 1, 1, 1, 1, 1)
    rates = matrix.rates()
    assert rates["agreement"]["value"] == 0.5 and rates["agreement"]["n"] == 4
    low, high = rates["precision"]["ci95"]
    assert low < 0.5 < high
    assert Confusion().rates()["agreement"]["value"] is None


def test_a_third_party_plugin_is_calibrated_without_extra_code(arith_registry):
    env = arith_registry.make("arith/chain-v0")
    split = env.splits[-1]
    trajectories = list(env.expert_trajectories(split, limit=3))
    verifiers = {"functional": arith_registry.make_verifier(arith_registry.verifier_name_for("arith/chain-v0"))}
    result = calibrate(
        "arith/chain-v0",
        trajectories,
        verifiers,
        env_factory=lambda: arith_registry.make("arith/chain-v0"),
        split=split,
    )
    matrix = result.confusion("functional")
    assert matrix.n > 0 and matrix.tp > 0
    with pytest.raises(CalibrationError, match="no optimal continuation"):
        calibrate(
            "arith/chain-v0",
            trajectories,
            verifiers,
            continuation="optimal",
            env_factory=lambda: arith_registry.make("arith/chain-v0"),
        )


@pytest.mark.slow  # ≥ 5 s on 2 cores (make test-fast leaves it out)
def test_model_candidates_are_k_per_state_and_reproducible(tiny_sampler):
    env = make("planning/blocks-v0")
    trajectories = list(env.expert_trajectories("test", limit=1))
    verifiers = {"functional": verifier_for("planning/blocks-v0")}
    runs = [
        calibrate("planning/blocks-v0", trajectories, verifiers, continuation="optimal", sampler=tiny_sampler, k=2)
        for _ in range(2)
    ]
    states = len(trajectories[0].assistant_turns())
    assert len(runs[0].rows) == 2 * states and {r.candidate.source for r in runs[0].rows} == {"model"}
    assert [r.candidate.text for r in runs[0].rows] == [r.candidate.text for r in runs[1].rows]
    assert runs[0].candidates == str(tiny_sampler.describe()["model"])  # the report names what sampled


def test_format_lists_the_matrix_and_disagreements():
    text = format_calibration(_run("planning/gripper-v0", "optimal"), examples=2)
    assert "| functional (planning/optimal" in text and "Disagreements of exact" in text
    assert "different_action" in text


def test_cli_json_and_errors(tmp_path):
    out = tmp_path / "cal.json"
    done = subprocess.run(
        [str(PIVOTGYM), "calibrate", "planning/blocks-v0", "--limit", "1", "--json", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["continuation"] == "optimal" and set(data["verifiers"]) == {"functional", "exact"}
    assert len(json.loads(out.read_text())["all_rows"]) == data["rows"]
    bad = subprocess.run(
        [str(PIVOTGYM), "calibrate", "general/arithmetic-v0", "--continuation", "optimal"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert bad.returncode == 1 and "no optimal continuation" in bad.stderr and "--continuation expert" in bad.stderr
