"""PlanningEnv: splits, the episode loop, errors, truncation, snapshot/restore, VAL on expert plans."""

import itertools

import pytest

import pivotgym
from pivotgym_planning.catalog import MAX_PLAN_LENGTH, OOD_FAMILIES, TRAIN_FAMILIES, manifest
from pivotgym_planning.plugin import env_id
from pivotgym_planning.val import validate

ALL_ENVS = [env_id(n) for n in (*TRAIN_FAMILIES, *OOD_FAMILIES)]


@pytest.mark.parametrize(
    "eid",  # logistics takes 13 s on 2 cores (make test-fast leaves it out)
    [pytest.param(e, marks=pytest.mark.slow) if e.endswith("/logistics-v0") else e for e in ALL_ENVS],
)
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


# ---------------------------------------------------------------------------- generated envs
SMALL = {"n_train": 12, "n_test": 6, "n_warmup": 3}  # prefixes of the registered 400/200 splits (same task ids)


@pytest.fixture(autouse=True, scope="module")
def _generated_cache(tmp_path_factory):
    """Generated splits are cached under a temporary $PIVOTGYM_CACHE, never the user's."""
    from pivotgym_planning.generators import generated_split

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PIVOTGYM_CACHE", str(tmp_path_factory.mktemp("pivotgym-cache")))
        generated_split.cache_clear()
        yield
    generated_split.cache_clear()


@pytest.mark.parametrize("name", ["blocks", "gripper"])
def test_generated_env_passes_check_and_serves_disjoint_splits_with_optimal_lengths(registry, name):
    eid = env_id(f"{name}-gen")
    pivotgym.check_env(eid, env_kwargs=SMALL).raise_for_failures()
    env = pivotgym.make(eid, **SMALL)
    train, test = env.tasks("train"), env.tasks("test")
    warmup = env.tasks("warmup")
    assert len(train) == 12 and len(test) == 6 and len(warmup) == 3 and env.tasks("ood")
    hashes = [{t.metadata["canonical"] for t in tasks} for tasks in (train, test, warmup)]
    assert sum(map(len, hashes)) == len(set().union(*hashes)) == 21
    for traj in env.expert_trajectories("test", limit=3):
        task = env.get_task(traj.task_id)
        plan = [m["content"] for m in traj.messages if m["role"] == "assistant"]
        assert traj.reward == 1.0  # the goal is reached and VAL accepts the plan
        assert len(plan) == task.metadata["optimal_length"] == task.metadata["difficulty"] >= 2
        problem = env.problem_for(task)
        assert problem.domain_name == {"blocks": "blocks", "gripper": "gripper-strips"}[name]
    limited = pivotgym.make(eid, min_length=6, max_length=8, **SMALL)
    assert all(6 <= t.metadata["optimal_length"] <= 8 for t in limited.tasks("train"))
    assert len(limited.tasks("train")) < len(train)


def _accepted(env, action):
    """Whether the env executes ``action`` in its current state (then restored)."""
    snap = env.snapshot()
    *_, info = env.step(action)
    env.restore(snap)
    return "error" not in info


@pytest.mark.parametrize("eid,kwargs", [("planning/blocks-v0", {}), ("planning/gripper-gen-v0", SMALL)])
def test_legal_actions_are_exactly_what_the_env_accepts_in_canonical_text(registry, eid, kwargs):
    env = pivotgym.make(eid, **kwargs)
    assert env.legal_actions() is None  # before a reset
    task = env.tasks("test")[0]
    env.reset(options={"task_id": task.id})
    problem = env.problem
    every = [  # every well-typed ground action of the problem
        problem.ground(s.name, args).text
        for s in problem.schemas.values()
        for args in itertools.product(
            *[[o for o in sorted(problem.objects) if problem.is_a(o, types)] for _v, types in s.params]
        )
    ]
    for n, expert in enumerate(m["content"] for m in env.expert_actions(task)):
        legal = env.legal_actions()
        assert legal and len(set(legal)) == len(legal) and expert in legal
        assert all(problem.parse(a, env.state).text == a for a in legal)  # canonical: the parser's own text
        if n < 4:  # the env accepts every legal action and no other well-typed one
            assert set(legal) == {a for a in every if _accepted(env, a)}
        env.step(expert)
    assert env.done and env.legal_actions() == []


def test_progress_is_one_minus_relative_cost_to_go(registry):
    env = pivotgym.make("planning/gripper-gen-v0", **SMALL)
    assert env.progress() is None
    task = next(t for t in env.tasks("test") if t.metadata["optimal_length"] >= 4)
    length = task.metadata["optimal_length"]
    env.reset(options={"task_id": task.id})
    assert env.progress() == 0.0
    plan = [m["content"] for m in env.expert_actions(task)]
    env.step(plan[0])
    assert env.progress() == pytest.approx(1 - (length - 1) / length)
    from pivotgym_planning.env import _oracle  # h* of every successor: optimal ones progress, others do not

    oracle = _oracle(env.problem)
    seen = set()
    for action in env.legal_actions():
        snap = env.snapshot()
        env.step(action)
        h = oracle(env.state)
        expected = 1.0 if env.problem.goal_reached(env.state) else min(1.0, max(0.0, 1 - h / length))
        assert env.progress() == pytest.approx(expected)
        seen.add(h)
        env.restore(snap)
    assert len(seen) >= 2  # both optimal (h* - 1) and wasteful successors were checked
    for action in plan[1:]:
        env.step(action)
    assert env.done and env.progress() == 1.0


def test_generated_suite_lists_the_generated_envs_in_domain(registry):
    suite = registry.suite("planning-gen")
    assert suite.members[env_id("blocks-gen")] == suite.members[env_id("gripper-gen")] == "in_domain"
    assert {e for e, role in suite.members.items() if role == "ood"} == {env_id(n) for n in OOD_FAMILIES}
    assert all(e in registry.envs for e in suite.members)
