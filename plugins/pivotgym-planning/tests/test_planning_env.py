"""PlanningEnv: splits, the episode loop, errors, truncation, snapshot/restore, VAL on expert plans."""

import pytest

import pivotgym
from pivotgym_planning.catalog import MAX_PLAN_LENGTH, OOD_FAMILIES, TRAIN_FAMILIES, manifest
from pivotgym_planning.plugin import env_id
from pivotgym_planning.val import validate

ALL_ENVS = [env_id(n) for n in (*TRAIN_FAMILIES, *OOD_FAMILIES)]


@pytest.mark.parametrize("eid", ALL_ENVS)
def test_check_passes(registry, eid):
    pivotgym.check_env(eid).raise_for_failures()


def test_continuation_is_an_optimal_plan_from_any_state_and_candidates_are_the_applicable_actions(registry):
    env = pivotgym.make("planning/gripper-v0")
    env.reset(options={"task_id": "gripper/prob01"})
    expert = [m["content"] for m in env.expert_actions(env.task)]
    assert len(env.continuation_actions()) == len(expert)
    env.step("(move rooma roomb)")  # wasted: the plan from here is the whole expert plan plus the way back
    plan = env.continuation_actions()
    assert len(plan) == len(expert) + 1 and plan[0] == "(move roomb rooma)"
    assert "(move roomb rooma)" in env.calibration_candidates("(pick ball1 rooma left)")
    assert set(env.calibration_candidates("")) == {a.text for a in env.problem.applicable(env.state)}
    for action in plan:
        *_, terminated, _truncated, info = env.step(action)
        assert "error" not in info
    assert terminated and env.continuation_actions() == []


@pytest.mark.parametrize("name", list(TRAIN_FAMILIES))
def test_splits_are_disjoint_and_come_from_the_right_folders(registry, name):
    env = pivotgym.make(env_id(name))
    family = TRAIN_FAMILIES[name]
    train, test, ood = (env.tasks(s) for s in ("train", "test", "ood"))
    assert train and test and ood
    assert all(t.data["folder"] == family for t in train)
    # test comes from NAME_test, or (for families whose NAME_test problems are all too large) from
    # problems of NAME held out of train
    assert all(t.data["folder"] == f"{family}_test" or t.metadata["held_out"] for t in test)
    assert not {t.id for t in train} & {t.id for t in test}
    assert not any(t.id.startswith(f"{family}_test/") for t in train)
    assert all(t.data["family"] in OOD_FAMILIES.values() for t in ood)
    assert all(t.metadata["optimal_length"] <= MAX_PLAN_LENGTH for t in train + test)


def test_filtered_problems_are_recorded_with_a_reason():
    statuses = {e["status"] for e in manifest()["problems"].values()}
    assert "solved" in statuses and statuses <= {"solved", "budget", "too_long", "error", "unsolvable"}
    assert manifest()["criteria"]["max_expansions"] > 0


def test_episode_observations_errors_and_success(registry):
    env = pivotgym.make("planning/blocks-v0")
    obs, info = env.reset(options={"task_id": "blocks/problem1"})
    intro = obs[-1]["content"]
    for part in (
        "Actions: (pick-up",
        "Objects: a b c d - block; robot - robot",
        "State: (clear a)",
        "Goal: (on b a) (on c b) (on d c)",
    ):
        assert part in intro
    assert len(intro) < 800  # short enough for a small model
    obs, reward, term, trunc, info = env.step("(unstack a b robot)")
    assert reward == 0 and not term and info["error"] == "precondition"
    assert "(on a b) is false" in obs[0]["content"] and obs[0]["content"].startswith("Error:")
    obs, reward, term, trunc, info = env.step("blah")
    assert info["error"] == "unknown_action"
    obs, reward, term, trunc, info = env.step("pick-up(b)")
    assert info["action"] == "(pick-up b robot)" and "(holding b)" in obs[0]["content"]
    for step in ["(stack b a robot)", "(pick-up c robot)", "(stack c b robot)", "(pick-up d robot)"]:
        env.step(step)
    obs, reward, term, trunc, info = env.step("(stack d c robot)")
    assert term and reward == 1.0 and info["plan_valid"] and info["validator"] == "val"
    assert "VAL accepts" in obs[0]["content"]


def test_step_limit_is_a_multiple_of_the_optimal_length(registry):
    env = pivotgym.make("planning/hanoi-v0")
    env.reset(options={"task_id": "hanoi/problem1"})  # optimal length 15
    assert env.max_turns == 45
    fixed = pivotgym.make("planning/hanoi-v0", max_turns=7)
    fixed.reset(options={"task_id": "hanoi/problem1"})
    assert fixed.max_turns == 7


def test_snapshot_restore_returns_to_the_exact_state(registry):
    env = pivotgym.make("planning/gripper-v0")
    env.reset(options={"task_id": "gripper/prob01"})
    env.step("(pick ball1 rooma left)")
    snap = env.snapshot()
    state, history = env.state, list(env.messages)
    env.step("(move rooma roomb)")
    env.restore(snap)
    assert env.state == state and env.messages == history and env.plan == ["(pick ball1 rooma left)"]


@pytest.mark.parametrize("name", list(TRAIN_FAMILIES))
def test_expert_plans_validate_with_val(registry, name):
    env = pivotgym.make(env_id(name))
    trajs = list(env.expert_trajectories("test", limit=2))
    assert trajs
    for traj in trajs:
        assert traj.reward == 1.0 and traj.source == "expert"
        problem = env.problem_for(env.get_task(traj.task_id))
        plan = [m["content"] for m in traj.messages if m["role"] == "assistant"]
        assert len(plan) == env.get_task(traj.task_id).metadata["optimal_length"]
        result = validate(problem.domain_text, problem.problem_text, plan)
        assert result.valid, result.output[-500:]
        broken = validate(problem.domain_text, problem.problem_text, plan[1:])
        assert not broken.valid


def test_gymnasium_make(registry):
    import gymnasium

    env = gymnasium.make("pivotgym:planning/miconic-v0")
    obs, _ = env.reset(seed=0)
    assert "Goal:" in obs[-1]["content"]


@pytest.mark.parametrize("name,task_id", [("gripper", "gripper_test/prob06"), ("logistics", "manylogistics/problem30")])
def test_problems_shipped_by_the_exact_table_have_optimal_expert_plans_that_val_accepts(registry, name, task_id):
    """Shipped because the exact h* table was built (A* ran out of budget): the expert plan comes from the
    table, has the optimal length recorded in the manifest, and VAL accepts it."""
    from pivotgym_planning.env import solve

    env = pivotgym.make(env_id(name))
    task = env.get_task(task_id)
    problem = env.problem_for(task)
    plan, method = solve(problem)
    assert method == "exact" and len(plan) == task.metadata["optimal_length"]
    assert validate(problem.domain_text, problem.problem_text, plan).valid
