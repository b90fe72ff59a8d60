import time

import gymnasium as gym
import pytest
from core_helpers import CounterEnv


def test_reset_is_seed_deterministic_and_task_id_selects():
    env = CounterEnv()
    assert env.reset(seed=3) == env.reset(seed=3)
    obs, info = env.reset(options={"task_id": "test-101"})
    assert info["task_id"] == "test-101" and info["split"] == "test"
    assert env.observation_space.contains(obs)
    with pytest.raises(KeyError, match="no task"):
        env.reset(options={"task_id": "nope"})


def test_malformed_and_non_text_actions_give_error_observations():
    env = CounterEnv()
    env.reset(seed=0)
    for bad in ("jump", 42, None, b"add 1"):
        obs, reward, term, trunc, info = env.step(bad)
        assert reward == 0 and not term and "error" in info
        assert obs[0]["content"].startswith("Error:")
    assert env.turn == 4  # every attempt counts as a turn


def test_truncates_exactly_at_max_turns_then_reports_episode_over():
    env = CounterEnv(max_turns=3)
    env.reset(seed=0)
    results = [env.step("jump") for _ in range(3)]
    assert [r[3] for r in results] == [False, False, True]
    _obs, _r, _t, truncated, info = env.step("add 1")
    assert info["error"] == "episode_over" and not truncated


def test_step_deadline_and_domain_exceptions_end_the_episode_without_raising():
    env = CounterEnv(step_timeout=0.2)
    env.reset(seed=0)
    t0 = time.perf_counter()
    _obs, reward, _term, truncated, info = env.step("sleep")
    assert time.perf_counter() - t0 < 2 and truncated and info["error"] == "step_timeout" and reward == 0
    env.reset(seed=0)
    _obs, _r, _t, truncated, info = env.step("crash")
    assert truncated and info["error"] == "env_exception" and "domain bug" in info["traceback"]


def test_expert_trajectories_replay_and_goto_restores_state():
    env = CounterEnv()
    trajs = list(env.expert_trajectories("train", limit=2))
    assert len(trajs) == 2 and all(t.reward == 1.0 and t.source == "expert" for t in trajs)
    traj = trajs[1]  # target 4: add 3, add 1
    turn = traj.turn(1)
    env.goto(traj.task_id, turn.prefix)
    assert env.value == 3 and env.turn == 1
    snap = env.snapshot()
    env.step("add 1")
    assert env.done
    env.restore(snap)
    assert env.value == 3 and not env.done and env.turn == 1


def test_prompt_messages_render_assistant_turns_as_text():
    env = CounterEnv()
    traj = next(env.expert_trajectories("train", limit=1))
    prompt = env.prompt_messages(traj.messages)
    assert [m["role"] for m in prompt] == [m["role"] for m in traj.messages]
    assert all(set(m) == {"role", "content"} for m in prompt)


def test_gymnasium_checker_accepts_agent_env():
    from gymnasium.utils.env_checker import check_env

    check_env(CounterEnv(), skip_render_check=True)


def test_render_ansi_shows_the_transcript():
    env = CounterEnv(render_mode="ansi")
    env.reset(seed=0)
    env.step("add 1")
    assert "[assistant] add 1" in env.render()
    with pytest.raises(ValueError, match="render_mode"):
        CounterEnv(render_mode="human")


def test_step_before_reset_raises_reset_needed():
    with pytest.raises(gym.error.ResetNeeded):
        CounterEnv().step("add 1")


def test_active_task_is_the_episode_task_and_refuses_before_reset():
    env = CounterEnv()
    with pytest.raises(gym.error.ResetNeeded, match="call reset"):
        _ = env.active_task
    env.reset(seed=0)
    assert env.active_task is env.task and env.active_task.id
