import random

import pytest
from core_helpers import CounterEnv

from pivotgym import StepOutcome, Task, Verdict, check_env
from pivotgym.types import message


class _GoodVerifier:
    name, version = "counter/same-effect", "1"

    def verify(self, context, candidate):
        env = context.env()
        before = env.value
        _obs, _r, _t, _tr, info = env.step(candidate)
        if "error" in info:
            return Verdict.fail("invalid")
        got = env.value
        env = context.env()
        env.step(context.expert_text)
        return Verdict.ok() if env.value == got != before else Verdict.fail("different_effect")


class _GullibleVerifier(_GoodVerifier):
    def verify(self, context, candidate):
        return Verdict.ok("anything goes")


class _RaisingEnv(CounterEnv):
    def apply_action(self, action):
        if not action.startswith("add"):
            raise ValueError("unparseable")  # a domain bug: not InvalidAction
        return super().apply_action(action)


class _RandomResetEnv(CounterEnv):
    def initial_messages(self, task):
        super().initial_messages(task)
        return [message("user", f"nonce {random.random()}")]


class _LeakyEnv(CounterEnv):
    def load_tasks(self, split):
        return [Task("shared", split, {"target": 3})]


class _NoTerminationEnv(CounterEnv):
    def apply_action(self, action):
        out = super().apply_action(action)
        return StepOutcome(out.observation, out.reward, terminated=False)


def _status(report):
    return {r.name: r.status for r in report.results}


def test_a_correct_env_and_verifier_pass_every_check():
    report = check_env(CounterEnv(), verifier=_GoodVerifier(), n_experts=2)
    assert report.ok, report.to_dict()
    assert set(_status(report).values()) == {"pass", "skip"} and _status(report)["verifier_wrong_action"] == "skip"


def test_a_verifier_that_credits_garbage_fails_the_probe_check():
    report = check_env(CounterEnv(), verifier=_GullibleVerifier())
    assert _status(report)["verifier"] == "fail" and "probe" in report.failures[0].detail


def test_domain_exceptions_on_malformed_actions_are_caught_but_flagged():
    report = check_env(_RaisingEnv(), verifier=_GoodVerifier())
    # the base class keeps the run alive (error observation), but the action ends the episode
    assert _status(report)["malformed_action"] == "pass"
    assert _status(report)["truncation"] == "fail"


def test_nondeterministic_reset_fails():
    assert _status(check_env(_RandomResetEnv()))["reset_determinism"] == "fail"


def test_a_task_in_two_splits_fails():
    report = check_env(_LeakyEnv())
    assert _status(report)["tasks"] == "fail" and "both" in report.failures[0].detail


def test_expert_that_never_terminates_fails_replay():
    assert _status(check_env(_NoTerminationEnv()))["expert_replay"] == "fail"


def test_check_by_id_uses_the_registered_functional_verifier(arith_registry):
    report = check_env("arith/chain-v0", n_experts=2)
    assert report.ok and "arith/value" in next(r for r in report.results if r.name == "verifier").detail


class _NamingEnv(CounterEnv):
    """CounterEnv that can name a legal but wrong action: an `add K` that overshoots or differs from the
    expert's (the optional `wrong_action` capability)."""

    def wrong_action(self, expert_action):
        for k in (1, 2, 3):
            if f"add {k}" != expert_action.strip():
                return f"add {k}"
        return None


class _ApplicableVerifier(_GoodVerifier):
    """Credits whatever the env accepts: passes the garbage probes, fails the wrong-action probe."""

    def verify(self, context, candidate):
        *_, info = context.env().step(candidate)
        return Verdict.fail("invalid") if "error" in info else Verdict.ok("accepted")


def test_wrong_action_probe_passes_a_correct_verifier_and_catches_one_that_credits_legal_actions():
    good = check_env(_NamingEnv(), verifier=_GoodVerifier(), n_experts=2)
    assert _status(good)["verifier_wrong_action"] == "pass", good.to_dict()
    bad = check_env(_NamingEnv(), verifier=_ApplicableVerifier(), n_experts=2)
    assert _status(bad)["verifier"] == "pass"  # the garbage probes alone do not catch it
    assert _status(bad)["verifier_wrong_action"] == "fail" and "legal but wrong" in bad.failures[0].detail


def test_an_env_without_the_capability_skips_the_wrong_action_probe():
    report = check_env(CounterEnv(), verifier=_GoodVerifier())
    assert _status(report)["verifier_wrong_action"] == "skip"
    row = next(r for r in report.to_dict()["results"] if r["name"] == "verifier_wrong_action")
    assert "wrong_action" in row["detail"]


class _BudgetVerifier(_GoodVerifier):
    def verify(self, context, candidate):
        return Verdict.undecided_because("budget_exhausted: too big", layer="search")


def test_a_verifier_that_could_not_judge_is_reported_as_undecided_not_as_a_rejection():
    report = check_env(CounterEnv(), verifier=_BudgetVerifier())
    assert _status(report)["verifier"] == "fail" and "could not judge" in report.failures[0].detail
    assert "budget_exhausted: too big" in report.failures[0].detail


def test_check_catches_a_third_party_verifier_that_credits_every_legal_planning_action(all_test_plugins):
    """The `hijack/credit-applicable` test plugin verifier on the real planning env: only the probe with the
    env's named wrong action (a legal, non-optimal action) exposes it."""
    report = check_env("planning/blocks-v0", verifier="hijack/credit-applicable")
    status = _status(report)
    assert status["verifier"] == "pass" and status["verifier_wrong_action"] == "fail", report.to_dict()
    # the calibration probe plays every applicable action out: the credited non-optimal ones fail
    assert status["calibration"] == "fail", report.to_dict()
    detail = next(r.detail for r in report.results if r.name == "calibration")
    assert "played out it fails" in detail and "the expert needed" in detail
    genuine = check_env("planning/blocks-v0")
    assert genuine.ok and _status(genuine)["verifier_wrong_action"] == "pass", genuine.to_dict()
    assert _status(genuine)["calibration"] == "pass" and "FP 0" in genuine.results[-1].detail


class _BrokenVerifier(_GoodVerifier):
    """Raises on every input: every verdict is undecided (``verifier_error``), never a rejection."""

    def verify(self, context, candidate):
        raise RuntimeError("broken verifier")


class _FloatVerifier(_GoodVerifier):
    """Returns a bare number instead of a Verdict."""

    def verify(self, context, candidate):
        return 0.0


@pytest.mark.parametrize("verifier", [_BrokenVerifier(), _FloatVerifier()])
def test_the_wrong_action_probe_fails_a_verifier_that_cannot_judge_anything(verifier):
    """An erroring verifier gives reward 0 everywhere; that is no rejection of the wrong action."""
    report = check_env(_NamingEnv(), verifier=verifier, n_experts=2)
    status = _status(report)
    assert status["verifier"] == "fail" and status["verifier_wrong_action"] == "fail", report.to_dict()
    detail = next(r.detail for r in report.results if r.name == "verifier_wrong_action")
    assert "could not judge" in detail and "verifier_error" in detail and "counter/same-effect" in detail


def test_a_verifier_that_errors_on_a_probe_fails_the_probe_check():
    """Garbage must be judged wrong: an undecided verdict on a probe would drop garbage samples from a
    state's statistics instead of scoring them 0."""

    class _FragileVerifier(_GoodVerifier):
        def verify(self, context, candidate):
            if not candidate.startswith("add"):
                raise ValueError("cannot parse")
            return super().verify(context, candidate)

    report = check_env(CounterEnv(), verifier=_FragileVerifier())
    assert _status(report)["verifier"] == "fail" and "could not judge the probe" in report.failures[0].detail
