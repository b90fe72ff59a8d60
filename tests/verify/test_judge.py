"""The judge service of the verify layer: an undecided verdict is a typed field (``Verdict.undecided``) that
profiling, selection, training and the checker all read, made by one constructor; ``verify_safely`` naming what
a broken verifier did, executor and sampler failures turned into undecided verdicts here only, and the
verifier/context caches."""

from dataclasses import replace

import pytest
from core_helpers import CounterEnv

from pivotgym import check_env
from pivotgym.pivot.select import SelectionRule
from pivotgym.train.states import PivotState, StateScorer
from pivotgym.types import MAX_UNDECIDED, ExpertState, Turn, TurnProfile, Verdict
from pivotgym.verify import Judge, VerifyContext, failed_sample, failed_verification, verify_safely

TURN = Turn(
    trajectory_id="t",
    env_id="counter-v0",
    task_id="task-0",
    turn=0,
    prefix=[{"role": "user", "content": "reach 3"}],
    expert={"role": "assistant", "content": "add 3"},
)

UNDECIDED = {
    "timed out": failed_verification("timeout: task did not finish within 60s"),
    "worker died": failed_verification("crashed: worker exited\nTraceback ..."),
    "no sample": failed_sample("no completion returned"),
    "verifier says so": Verdict.undecided_because("budget_exhausted: h* unknown", layer="optimal_cost"),
}
DECIDED = {
    "wrong": Verdict.fail("wrong_answer"),
    "right": Verdict.ok("equivalent"),
    "partial": Verdict(0.5, False, "partial_credit"),
    # once spellings of "undecided"; now a judgement like any other
    "old flag": Verdict.fail("search", verification_failed="solver timeout"),
    "old prefix": Verdict.fail("verify_failed: a reason that only looks undecided"),
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
    assert not verdict.decided and verdict.undecided == verdict.reason and verdict.reward == 0.0
    assert Verdict.from_dict(verdict.to_dict()) == verdict  # it survives a worker or the server
    row = TurnProfile(
        "t",
        0,
        "a/x-v0",
        "task",
        1,
        [1.0],
        1.0,
        0.0,
        ["ok"],
        reference={},
        verifier={},
        key="k",
        undecided=[verdict.undecided],
    )
    assert not SelectionRule(max_mean=1.01).admits(row)  # one judged sample: no mixed rewards
    scorer = StateScorer(judge=Judge(lambda _name: _Returns(verdict)))
    state = PivotState(0, ExpertState(TURN), [1, 2], "test/returns")
    assert scorer.score_judged(state, ["add 3"]) == [None]  # training drops the sample
    assert scorer.score(state, ["add 3"]) == [0.0]  # evaluation scores it 0
    report = check_env(CounterEnv(), verifier=_Returns(verdict))  # the checker fails it as undecided
    assert next(r for r in report.results if r.name == "verifier").status == "fail"
    assert "could not judge" in report.failures[0].detail


@pytest.mark.parametrize("name", list(DECIDED))
def test_a_judgement_is_decided_for_every_caller(name):
    verdict = DECIDED[name]
    assert verdict.decided and verdict.undecided is None
    scorer = StateScorer(judge=Judge(lambda _name: _Returns(verdict)))
    assert scorer.score_judged(PivotState(0, ExpertState(TURN), [1], "test/returns"), ["x"]) == [verdict.reward]


def test_an_undecided_verdict_has_one_constructor_and_no_reward():
    verdict = Verdict.undecided_because("  solver gave up  ", layer="search")
    assert (verdict.reward, verdict.equivalent, verdict.reason, verdict.undecided) == (
        0.0,
        False,
        *["solver gave up"] * 2,
    )
    assert verdict.components == {"layer": "search"}
    assert len(Verdict.undecided_because("x" * 1000).undecided) == MAX_UNDECIDED  # stored in every profile row
    with pytest.raises(ValueError, match="undecided_because"):
        Verdict(1.0, True, "forged", undecided="why")  # an undecided verdict never pays
    with pytest.raises(ValueError, match="undecided_because"):
        Verdict(0.0, False, "r", undecided="")  # nor comes without a reason
    assert (
        failed_verification("crashed: exit 9\nTraceback (most recent call last)").undecided
        == "verify_failed: crashed: exit 9"
    )
    assert failed_verification(None).undecided == "verify_failed: unknown"


def test_a_profile_row_of_format_3_reads_its_undecided_reasons():
    """Rows written before ``undecided`` was a field kept the reasons under ``metadata``: read, they move."""
    old = TurnProfile("t", 0, "a/x-v0", "task", 1, [1.0], 1.0, 0.0, ["ok"], {}, {}, "k").to_dict()
    del old["undecided"]
    old["metadata"] = {"k_max": 2, "failed": 1, "failed_reasons": ["verify_failed: timeout"]}
    row = TurnProfile.from_dict(old)
    assert row.undecided == ["verify_failed: timeout"] and row.metadata == {"k_max": 2}


@pytest.mark.parametrize("returned,shown", [(0.5, "float 0.5"), (None, "NoneType None"), ({"reward": 1}, "dict")])
def test_a_verifier_returning_no_verdict_is_told_a_verdict_was_expected(returned, shown):
    verdict = verify_safely(_Returns(returned), VerifyContext(TURN), "add 3")
    assert verdict.reward == 0.0 and not verdict.decided
    assert verdict.reason.startswith("verifier_error: verifier 'test/returns' (_Returns) returned " + shown)
    assert "a Verdict was expected" in verdict.reason


def test_a_raising_verifier_is_named_with_the_exception():
    verdict = verify_safely(_Returns(KeyError("a")), VerifyContext(TURN), "add 3")
    assert verdict.reason == "verifier_error: verifier 'test/returns' (_Returns) raised KeyError: 'a'"
    assert "Traceback" in verdict.components["traceback"] and not verdict.decided


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


def test_the_profiler_worker_passes_the_verdicts_undecided_reason(monkeypatch):
    from pivotgym.pivot import profile

    monkeypatch.setattr(profile, "_JUDGE", [Judge(lambda _name: _Returns(UNDECIDED["verifier says so"]))])
    out = profile.verify_candidates(profile.VerifyTask("test/returns", ExpertState(TURN), ("add 3",)))
    assert out == [
        {
            "reward": 0.0,
            "reason": "budget_exhausted: h* unknown",
            "undecided": "budget_exhausted: h* unknown",
            "cost": {},
        }
    ]
