"""The optimal-action verifier credits every optimal action, and only those; the exact one only the expert's."""

import pytest

import pivotgym
from pivotgym import VerifyContext
from pivotgym_planning.verifier import OptimalActionVerifier


@pytest.fixture(scope="module")
def gripper_turn(registry):
    env = pivotgym.make("planning/gripper-v0")
    traj = next(t for t in env.expert_trajectories("train") if t.task_id == "gripper/prob01")
    return traj.turn(0)


@pytest.fixture()
def ctx(gripper_turn):
    return VerifyContext(gripper_turn)


def test_expert_action_is_credited(ctx):
    verdict = OptimalActionVerifier().verify(ctx, ctx.expert_text)
    assert verdict.reward == 1.0 and verdict.reason == "expert_action"


def test_alternative_optimal_action_is_credited(ctx):
    expert = ctx.expert_text  # e.g. (pick ball1 rooma left)
    assert expert.startswith("(pick ")
    other = "(pick ball4 rooma right)" if "ball4" not in expert else "(pick ball3 rooma right)"
    assert other != expert
    verdict = OptimalActionVerifier().verify(ctx, other)
    assert verdict.reward == 1.0 and verdict.equivalent
    assert verdict.reason.startswith("optimal_action")
    assert verdict.components["h_star_after"] == verdict.components["h_star_before"] - 1


def test_legal_but_suboptimal_action_is_not_credited(ctx):
    verdict = OptimalActionVerifier().verify(ctx, "(move rooma roomb)")
    assert verdict.reward == 0.0 and verdict.reason.startswith("suboptimal")
    assert verdict.components["applicable"] is True
    assert verdict.components["h_star_after"] > verdict.components["h_star_before"] - 1


@pytest.mark.parametrize("candidate,reason", [
    ("(drop ball1 rooma left)", "precondition"), ("(move roomb rooma)", "precondition"),
    ("hello", "unknown_action"), ("", "unparseable"), ("(pick ball9 rooma left)", "bad_arguments"),
])
def test_inapplicable_or_garbage_gets_zero_with_a_reason(ctx, candidate, reason):
    verdict = OptimalActionVerifier().verify(ctx, candidate)
    assert verdict.reward == 0.0 and verdict.reason.startswith(reason) and len(verdict.reason) > len(reason)


def test_format_variants_of_an_optimal_action_are_credited(ctx):
    verifier = OptimalActionVerifier()
    for text in ["pick(ball2, rooma, left)", "PICK ball2 rooma left", "I will do (pick ball2 rooma left)."]:
        assert verifier.verify(ctx, text).reward == 1.0, text


def test_every_credited_action_is_optimal_across_a_trajectory(registry):
    """At each expert state of a blocks task: the credited actions are exactly those whose successor's h*
    is h*(s) - 1, computed independently with a fresh uncached oracle."""
    from pivotgym_planning.search import OptimalCost

    env = pivotgym.make("planning/blocks-v0")
    traj = next(iter(env.expert_trajectories("test", limit=1)))
    verifier = OptimalActionVerifier()
    for turn in traj.turns():
        ctx = VerifyContext(turn)
        state_env = ctx.env()
        problem, state = state_env.problem, state_env.state
        reference = OptimalCost(problem.search_task(), use_cache=False)
        h = reference(state)
        for action in problem.applicable(state):
            nxt = problem.apply(state, action)
            expected = reference(nxt) == h - 1
            assert (verifier.verify(ctx, action.text).reward == 1.0) == expected, (turn.turn, action.text)


def test_exact_verifier_is_registered_and_strict(registry, ctx):
    exact = pivotgym.verifier_for("planning/gripper-v0", kind="exact")
    assert exact.name == "planning/exact"
    assert exact.verify(ctx, ctx.expert_text.upper()).reward == 1.0
    other = "(pick ball4 rooma right)" if "ball4" not in ctx.expert_text else "(pick ball3 rooma right)"
    assert exact.verify(ctx, other).reward == 0.0
    assert pivotgym.verifier_for("planning/gripper-v0").name == "planning/optimal"


def test_cache_gives_the_same_verdicts(ctx):
    cached, uncached = OptimalActionVerifier(), OptimalActionVerifier(use_cache=False)
    for text in ["(pick ball2 rooma left)", "(move rooma roomb)", "(pick ball3 rooma right)"]:
        a, b = cached.verify(ctx, text), uncached.verify(ctx, text)
        assert (a.reward, a.reason) == (b.reward, b.reason)
