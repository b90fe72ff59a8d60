"""The judge service of the verify layer: one undecided rule that profiling, selection, training and the
checker all apply, ``verify_safely`` naming what a broken verifier did, and the verifier/context caches."""

from dataclasses import replace

import pytest
from core_helpers import CounterEnv

from pivotgym import check_env
from pivotgym.pivot.profile import verification_failure
from pivotgym.pivot.select import SelectionRule, judged
from pivotgym.train.states import PivotState, StateScorer
from pivotgym.types import Turn, TurnProfile, Verdict
from pivotgym.verify import (
    Judge,
    VerifyContext,
    is_undecided,
    is_undecided_reason,
    undecided_reason,
    verify_safely,
)

TURN = Turn(
    trajectory_id="t",
    env_id="counter-v0",
    task_id="task-0",
    turn=0,
    prefix=[{"role": "user", "content": "reach 3"}],
    expert={"role": "assistant", "content": "add 3"},
)

UNDECIDED = {
    "verifier raised": Verdict.fail("verifier_error: verifier 'x' raised KeyError: 'a'"),
    "timed out": Verdict.fail("verify_failed: timeout: task did not finish within 60s"),
    "no sample": Verdict.fail("sampling_error: no completion returned"),
    "flagged": Verdict.fail("search", verification_failed="solver timeout"),
    "flagged True": Verdict.fail("search gave up", verification_failed=True),
    "budget only": Verdict.fail("budget_exhausted: h* unknown", budget_exhausted=True),
    "budget reason": Verdict.fail("budget_exhausted: too big"),
}
DECIDED = {
    "wrong": Verdict.fail("wrong_answer"),
    "right": Verdict.ok("equivalent"),
    "partial": Verdict(0.5, False, "partial_credit"),
    "flag false": Verdict.fail("wrong_answer", verification_failed=False, budget_exhausted=0),
}


class _Returns:
    """A verifier that returns (or raises) whatever it was given."""

    name, version = "test/returns", "1"

    def __init__(self, result):
        self.result = result

    def verify(self, context, candidate):
        if isinstance(self.result, BaseException):
            raise self.result
        return self.result


@pytest.mark.parametrize("name", list(UNDECIDED))
def test_every_undecided_verdict_is_undecided_for_every_caller(name):
    verdict = UNDECIDED[name]
    reason = undecided_reason(verdict)
    assert reason and is_undecided(verdict) and is_undecided_reason(reason)
    assert verification_failure(verdict) == reason  # profiling
    legacy = TurnProfile(
        "t", 0, "a/x-v0", "task", 2, [1.0, 0.0], 0.5, 0.25, ["ok", reason], reference={}, verifier={}, key="k"
    )  # a row written before failures left the rewards
    assert judged(legacy).rewards == [1.0] and judged(legacy).metadata["failed"] == 1  # selection
    assert not SelectionRule(max_mean=1.01).admits(legacy)  # one judged sample: no mixed rewards
    scorer = StateScorer(judge=Judge(lambda _name: _Returns(verdict)))
    state = PivotState(0, TURN, [1, 2], "test/returns")
    assert scorer.score_judged(state, ["add 3"]) == [None]  # training drops the sample
    assert scorer.score(state, ["add 3"]) == [0.0]  # evaluation scores it 0
    report = check_env(CounterEnv(), verifier=_Returns(verdict))  # the checker fails it as undecided
    assert next(r for r in report.results if r.name == "verifier").status == "fail"
    assert "could not judge" in report.failures[0].detail


@pytest.mark.parametrize("name", list(DECIDED))
def test_a_judgement_is_decided_for_every_caller(name):
    verdict = DECIDED[name]
    assert undecided_reason(verdict) is None and verification_failure(verdict) is None
    scorer = StateScorer(judge=Judge(lambda _name: _Returns(verdict)))
    assert scorer.score_judged(PivotState(0, TURN, [1], "test/returns"), ["x"]) == [verdict.reward]


def test_a_verifier_flag_gives_its_own_text_as_the_reason():
    assert undecided_reason(UNDECIDED["flagged"]) == "verification_failed: solver timeout"
    assert undecided_reason(UNDECIDED["flagged True"]) == "verification_failed: search gave up"
    assert undecided_reason(UNDECIDED["budget only"]) == "verification_failed: budget_exhausted: h* unknown"
    assert len(undecided_reason(Verdict.fail("verifier_error: " + "x" * 1000))) == 300


@pytest.mark.parametrize("returned,shown", [(0.5, "float 0.5"), (None, "NoneType None"), ({"reward": 1}, "dict")])
def test_a_verifier_returning_no_verdict_is_told_a_verdict_was_expected(returned, shown):
    verdict = verify_safely(_Returns(returned), VerifyContext(TURN), "add 3")
    assert verdict.reward == 0.0 and is_undecided(verdict)
    assert verdict.reason.startswith("verifier_error: verifier 'test/returns' (_Returns) returned " + shown)
    assert "a Verdict was expected" in verdict.reason


def test_a_raising_verifier_is_named_with_the_exception():
    verdict = verify_safely(_Returns(KeyError("a")), VerifyContext(TURN), "add 3")
    assert verdict.reason == "verifier_error: verifier 'test/returns' (_Returns) raised KeyError: 'a'"
    assert "Traceback" in verdict.components["traceback"] and is_undecided(verdict)


def test_the_judge_makes_each_verifier_once_and_keeps_recent_contexts():
    made, contexts = [], []

    def make_verifier(name):
        made.append(name)
        return _Returns(Verdict.ok())

    def make_context(key):
        def make():
            contexts.append(key)
            return VerifyContext(replace(TURN, trajectory_id=key))

        return make

    judge = Judge(make_verifier, max_contexts=2)
    for key in ("a", "a", "b", "a", "c", "b", "a"):  # c evicts b (a was used more recently), b evicts a...
        assert judge.reward("v", key, make_context(key), "x") == 1.0
    assert made == ["v"]
    assert contexts == ["a", "b", "c", "b", "a"]
    assert judge.context("b", make_context("b")).turn.trajectory_id == "b" and len(contexts) == 5  # kept
    unbounded = Judge(make_verifier, max_contexts=None)
    for key in "abcdefgh":
        unbounded.context(key, make_context(key))
    assert all(unbounded.context(key, make_context("never")) for key in "abcdefgh") and "never" not in contexts


def test_the_profiler_worker_judges_through_the_one_rule(monkeypatch):
    from pivotgym.pivot import profile

    monkeypatch.setattr(profile, "_JUDGE", [Judge(lambda _name: _Returns(UNDECIDED["budget only"]))])
    out = profile.verify_candidate(profile.VerifyTask("test/returns", "k", TURN, "add 3"))
    assert out == {
        "reward": 0.0,
        "reason": "budget_exhausted: h* unknown",
        "failed": "verification_failed: budget_exhausted: h* unknown",
    }
