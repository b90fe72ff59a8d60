import random

from pivotgym import InvalidAction, StepOutcome, Task, Verdict, check_env
from pivotgym.types import message
from core_helpers import CounterEnv


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
    assert set(_status(report).values()) == {"pass"}


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
