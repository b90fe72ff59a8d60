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


@pytest.mark.parametrize(
    "candidate,reason",
    [
        ("(drop ball1 rooma left)", "precondition"),
        ("(move roomb rooma)", "precondition"),
        ("hello", "unknown_action"),
        ("", "unparseable"),
        ("(pick ball9 rooma left)", "bad_arguments"),
    ],
)
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


def test_budget_exhaustion_is_a_typed_verdict_not_a_wrong_action(ctx):
    """No table (cap 1 state) and one A* expansion: h* is unknown, and the verdict says so explicitly."""
    verdict = OptimalActionVerifier(table_limit=1, max_expansions=1).verify(ctx, "(move rooma roomb)")
    assert verdict.reward == 0.0 and verdict.reason.startswith("budget_exhausted")
    assert verdict.undecided == verdict.reason and verdict.components["layer"] == "optimal_cost"
    # with the default budget the same candidate is judged
    judged = OptimalActionVerifier().verify(ctx, "(move rooma roomb)")
    assert judged.reason.startswith("suboptimal") and judged.decided


@pytest.mark.parametrize(
    "reply", ["(pick ball1 rooma left) (pick ball2 rooma right)", "pick(ball1, rooma, left)\nthen (move rooma roomb)"]
)
def test_a_reply_with_several_different_actions_is_rejected_by_env_and_both_verifiers(registry, ctx, reply):
    exact = pivotgym.verifier_for("planning/gripper-v0", kind="exact")
    for verifier in (OptimalActionVerifier(), exact):
        verdict = verifier.verify(ctx, reply)
        assert verdict.reward == 0.0 and verdict.reason.startswith("multiple_actions"), verifier.name
    env = ctx.env()
    *_, info = env.step(reply)
    assert info["error"] == "multiple_actions"


def test_repeating_one_action_or_naming_facts_is_still_one_action(ctx):
    verifier = OptimalActionVerifier()
    expert = ctx.expert_text
    assert verifier.verify(ctx, f"```\n{expert}\n```\nSo: {expert}").reward == 1.0
    assert verifier.verify(ctx, f"(at-robby rooma) holds, so {expert}").reward == 1.0


def test_optimal_and_exact_read_a_short_form_alike(registry, ctx):
    """Left-out trailing arguments: both accept when exactly one applicable completion fits, both reject
    when several do."""
    exact = pivotgym.verifier_for("planning/gripper-v0", kind="exact")
    optimal = OptimalActionVerifier()
    expert = ctx.expert_text  # (pick ballN rooma left)
    short = expert.rsplit(" ", 1)[0] + ")"  # (pick ballN rooma): left and right both fit
    for verifier in (optimal, exact):
        verdict = verifier.verify(ctx, short)
        assert verdict.reward == 0.0 and verdict.reason.startswith("bad_arguments"), verifier.name
    env = ctx.env()
    env.step(expert)
    turn1 = VerifyContext(next(t for t in _gripper_turns(registry) if t.turn == 1))
    unique = turn1.expert_text  # the second pick: only the other gripper is free
    if unique.startswith("(pick "):
        short = unique.rsplit(" ", 1)[0] + ")"
        assert optimal.verify(turn1, short).reward == exact.verify(turn1, short).reward == 1.0


def _gripper_turns(registry):
    env = pivotgym.make("planning/gripper-v0")
    traj = next(t for t in env.expert_trajectories("train") if t.task_id == "gripper/prob01")
    return list(traj.turns())


def test_wrong_action_names_a_legal_action_the_verifier_rejects(ctx):
    env = ctx.env()
    wrong = env.wrong_action(ctx.expert_text)
    assert wrong is not None
    *_, info = ctx.env().step(wrong)
    assert "error" not in info
    verdict = OptimalActionVerifier().verify(ctx, wrong)
    assert verdict.reward == 0.0 and verdict.reason.startswith("suboptimal")


def test_large_gripper_problem_verifies_without_budget(registry):
    """gripper_test/prob06 (14 balls, ~2M reachable states): every applicable action at the first turns is
    judged (none undecided), exactly the optimal ones credited, within seconds."""
    import time

    from pivotgym.types import Trajectory, message
    from pivotgym_planning.env import PlanningEnv

    env = PlanningEnv("gripper")
    task = (
        next(t for t in env.tasks("test") if t.id == "gripper_test/prob06")
        if any(t.id == "gripper_test/prob06" for t in env.tasks("test"))
        else None
    )
    if task is None:
        pytest.skip("gripper_test/prob06 is not shipped")
    problem = env.problem_for(task)
    table = problem.search_task().exact_table(problem.init, 1_000_000)
    verifier = OptimalActionVerifier()
    start = time.perf_counter()
    plan = table.plan(problem.init)[:4]
    messages = env.reset(options={"task_id": task.id})[0]
    for i in range(4):
        traj = Trajectory(
            id="t",
            env_id="planning/gripper-v0",
            task_id=task.id,
            messages=[*messages, message("assistant", plan[i])],
            reward=0.0,
        )
        turn_ctx = VerifyContext(traj.turn(i))
        state = turn_ctx.env().state
        h = table.lookup(state)
        for action in problem.applicable(state):
            verdict = verifier.verify(turn_ctx, action.text)
            assert verdict.decided, verdict.reason
            expected = table.lookup(problem.apply(state, action)) == h - 1
            assert (verdict.reward == 1.0) == expected, action.text
        _obs = env.step(plan[i])[0]
        messages = [*messages, message("assistant", plan[i]), *_obs]
    assert time.perf_counter() - start < 30
