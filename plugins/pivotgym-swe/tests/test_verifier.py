"""The functional and name-only verifiers against the expert trajectory of a tiny task."""

from __future__ import annotations

import json

import pytest

from pivotgym.sandbox.bwrap import bwrap_available
from pivotgym.verify import VerifyContext
from pivotgym_swe.verifier import FunctionalVerifier, NameVerifier, _pytest_targets

pytestmark = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap is not installed")


def call(name: str, **arguments) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


@pytest.fixture()
def turns(env):
    traj = next(env.expert_trajectories("train"))
    factory = lambda: env.__deepcopy__({})  # noqa: E731
    return {t.expert["tool_calls"][0]["function"]["name"]: (t, factory) for t in traj.turns()}


def ctx(turns, name):
    turn, factory = turns[name]
    return VerifyContext(turn, env_factory=factory)


def test_view_and_search_targets(turns):
    v = FunctionalVerifier()
    assert v.verify(ctx(turns, "view"), call("view", path="./solution.py", start=10, end=30)).equivalent
    assert not v.verify(ctx(turns, "view"), call("view", path="test_solution.py")).equivalent
    assert v.verify(ctx(turns, "search"), call("search", pattern="has_close_elements")).equivalent
    bad = v.verify(ctx(turns, "search"), call("search", pattern="zzz_nothing"))
    assert bad.reward == 0 and "no hits" in bad.reason
    assert v.verify(ctx(turns, "search"), call("view", path="solution.py")).reason == "tool_category"


def test_edit_equivalence_by_ast_and_by_tests(turns):
    v = FunctionalVerifier()
    c = ctx(turns, "edit")
    expert = c.turn.expert["tool_calls"][0]["function"]
    args = json.loads(expert["arguments"])
    # the same fix written with different spacing and a comment: equal normalised ASTs
    respaced = args["new"].replace(" != ", "  !=  ").rstrip("\n") + "  # fixed\n"
    verdict = v.verify(c, call("edit", path="solution.py", old=args["old"], new=respaced))
    assert verdict.equivalent and verdict.reason == "ast_equivalent"
    # a different but correct fix: `not (a == b)` instead of `a != b` (other AST, same behaviour)
    flipped = args["new"].replace("idx != idx2", "not (idx == idx2)")
    assert flipped != args["new"]
    verdict = v.verify(c, call("edit", path="solution.py", old=args["old"], new=flipped))
    assert verdict.equivalent and verdict.reason == "same_tests_pass", verdict
    # an edit that leaves the bug in place
    verdict = v.verify(c, call("edit", path="solution.py", old=args["old"], new=args["old"] + "\n"))
    assert not verdict.equivalent


def test_run_selection_and_submit(turns):
    v = FunctionalVerifier()
    assert v.verify(ctx(turns, "run"), call("run", command="pytest test_solution.py")).equivalent
    assert v.verify(ctx(turns, "run"), call("run", command="python -m pytest")).equivalent
    assert not v.verify(ctx(turns, "run"), call("run", command="pytest other_test.py")).equivalent
    assert v.verify(ctx(turns, "submit"), call("submit")).equivalent
    # submitting before the fix (state at the edit turn) is not credited
    edit_turn, factory = turns["edit"]
    early = VerifyContext(edit_turn, env_factory=factory)
    from pivotgym_swe.verifier import FunctionalVerifier as F

    assert F()._submit(early, {}, {}).reward == 0.0


def test_name_verifier_is_coarse(turns):
    assert NameVerifier().verify(ctx(turns, "view"), call("view", path="anything.py")).equivalent
    assert not NameVerifier().verify(ctx(turns, "view"), call("run", command="ls")).equivalent
    assert NameVerifier().verify(ctx(turns, "view"), "garbage").reward == 0


def test_pytest_target_parsing():
    assert _pytest_targets("python -m pytest -q -k foo tests/test_a.py::t") == {"tests/test_a.py::t"}
    assert _pytest_targets("ls -la") is None


def test_an_edit_that_passes_the_tests_but_not_the_differential_is_not_credited(env):
    # truncate_number: the expert reverts `number // 1.0` to `number % 1.0`; rounding the result to 3 places
    # passes the problem's checks (3.5, 1.33, 123.456) but not other positive numbers (1.83 -> 0.83)
    traj = next(env.expert_trajectories("test"))
    turn = next(t for t in traj.turns() if t.expert["tool_calls"][0]["function"]["name"] == "edit")
    context = VerifyContext(turn, env_factory=lambda: env.__deepcopy__({}))
    args = json.loads(turn.expert["tool_calls"][0]["function"]["arguments"])
    assert "number % 1.0" in args["new"]
    rounded = args["new"].replace("number % 1.0", "round(number % 1.0, 3)")
    verdict = FunctionalVerifier().verify(context, call("edit", path="solution.py", old=args["old"], new=rounded))
    assert not verdict.equivalent
    assert "differs from the reference" in verdict.reason, verdict
    # the same repair written another way agrees on every generated input: credited
    other = args["new"].replace("number % 1.0", "number - (number // 1.0)")
    verdict = FunctionalVerifier().verify(context, call("edit", path="solution.py", old=args["old"], new=other))
    assert verdict.equivalent and verdict.reason == "same_tests_pass", verdict


def test_a_judge_that_cannot_run_is_a_verification_failure_not_a_wrong_action(turns, monkeypatch):
    """No runtime to judge in (an infrastructure failure): the verdict says so, so it is masked, never scored 0."""
    from pivotgym_swe import testing
    from pivotgym_swe.runtime import RuntimeBuildError

    def broken(source):
        raise RuntimeBuildError("pytest is missing on this host")

    monkeypatch.setattr(testing, "runtime_for", broken)
    verdict = FunctionalVerifier().verify(ctx(turns, "submit"), call("submit"))
    assert verdict.reason.startswith("judge_failed: ") and "pytest is missing" in verdict.undecided


def test_a_coding_declaration_cannot_hide_code_from_the_ast_comparison(turns):
    """`# coding: utf-7` makes Python decode `+AAo-` in a comment as a newline: the comment becomes a statement.
    Read as UTF-8 the candidate's file is the expert's fix plus comments (equal normalised ASTs, credited without
    a test run); read as Python reads it, it runs code the expert's does not."""
    v = FunctionalVerifier()
    c = ctx(turns, "edit")
    args = json.loads(c.turn.expert["tool_calls"][0]["function"]["arguments"])
    c.env()  # the state at the edit turn
    text = (c.env().workdir / "solution.py").read_text()
    assert "+" not in text  # (UTF-7 would read a '+' as the start of an encoded run)
    head = text[: text.index(args["old"]) + len(args["old"])]
    fixed_head = head.replace(args["old"], args["new"])
    hidden = "# coding: utf-7\n" + fixed_head.rstrip("\n") + "  # ok +AAo-                has_close_elements = None\n"
    assert "has_close_elements = None" not in normalized_view(hidden)
    verdict = v.verify(c, call("edit", path="solution.py", old=head, new=hidden))
    assert verdict.reward == 0.0 and verdict.reason != "ast_equivalent", verdict


def normalized_view(text: str) -> str:
    """What a UTF-8 reader sees as code: the source without its comments (the hidden statement is in one)."""
    import io
    import tokenize

    tokens = tokenize.generate_tokens(io.StringIO(text).readline)
    return tokenize.untokenize((t.type, t.string) for t in tokens if t.type != tokenize.COMMENT)
