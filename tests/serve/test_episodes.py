"""Episodes of every first-party domain through a real ``pivotgym serve`` subprocess and :class:`RemoteEnv`.

Each episode is played twice, remotely and with the same env in this process, and every step must agree:
observation, reward, flags and (JSON-safe) info. The expert's actions reach reward 1.
"""

from __future__ import annotations

import threading

import gymnasium as gym
import pytest
from core_helpers import expert_episode

from pivotgym.registry import make
from pivotgym.remote import RemoteEnv, RemoteError
from pivotgym.sandbox.bwrap import bwrap_available
from pivotgym.serve import jsonable
from pivotgym.spaces import Messages, TextAction

DOMAINS = [
    "planning/blocks-v0",
    "tooluse/bfcl-multi-turn-v0",
    "general/arithmetic-v0",  # a YAML env shipped in pivotgym/data/envs
    pytest.param(
        "swe/humanevalfix-v0",
        marks=pytest.mark.skipif(not bwrap_available(), reason="bubblewrap is not installed"),
    ),
]


def play_both(url: str, env_id: str) -> list[tuple]:
    """Play the expert episode remotely and locally; assert every step agrees; the remote steps."""
    task_id, actions = expert_episode(env_id)
    local = make(env_id)
    steps = []
    with RemoteEnv(url, env_id) as remote:
        assert isinstance(remote, gym.Env)
        assert remote.observation_space == Messages()
        assert remote.action_space == local.action_space == TextAction(max_length=local.action_space.max_length)
        obs, info = remote.reset(options={"task_id": task_id})
        local_obs, local_info = local.reset(options={"task_id": task_id})
        assert remote.observation_space.contains(obs)
        assert (obs, info) == (jsonable(local_obs), jsonable(local_info))
        assert remote.tool_schemas() == jsonable(local.tool_schemas())
        for action in actions:
            assert remote.action_space.contains(action)
            step = remote.step(action)
            expected = local.step(action)
            assert step[0] == jsonable(expected[0]) and step[1:4] == expected[1:4]
            assert step[4] == jsonable(expected[4])
            assert remote.observation_space.contains(step[0])
            assert type(step[1]) is float and type(step[2]) is bool and type(step[3]) is bool
            steps.append(step)
            if step[2] or step[3]:
                break
        assert remote.state()["done"] is True
    local.close()
    return steps


@pytest.mark.parametrize("env_id", DOMAINS)
def test_expert_episode_reaches_reward_1_and_matches_the_local_env(server, env_id):
    steps = play_both(server, env_id)
    assert steps[-1][1] == 1.0 and steps[-1][2] is True


def test_a_seeded_reset_picks_the_same_task_as_locally(server):
    local = make("planning/blocks-v0")
    with RemoteEnv(server, "planning/blocks-v0") as remote:
        for seed in (0, 7, 123):
            _, info = remote.reset(seed=seed, options={"split": "train"})
            assert info["task_id"] == local.reset(seed=seed, options={"split": "train"})[1]["task_id"]


def test_env_kwargs_reach_the_env_and_a_wrong_answer_scores_0(server):
    task_id, _ = expert_episode("general/arithmetic-v0")
    with RemoteEnv(server, "general/arithmetic-v0", max_turns=1) as remote:
        assert remote.max_turns == 1
        remote.reset(options={"task_id": task_id})
        obs, reward, terminated, truncated, _ = remote.step("not a number at all")
        assert reward == 0.0 and (terminated or truncated)


def test_a_step_after_the_episode_ended_is_refused_until_the_next_reset(server):
    task_id, _ = expert_episode("general/arithmetic-v0")
    with RemoteEnv(server, "general/arithmetic-v0", max_turns=1) as remote:
        remote.reset(options={"task_id": task_id})
        assert remote.step("not a number at all")[2:4] != (False, False)
        with pytest.raises(RemoteError) as info:
            remote.step("another answer")
        assert info.value.code == "episode_over" and "/reset" in (info.value.hint or "")
        remote.reset(options={"task_id": task_id})  # a new episode takes steps again
        assert remote.step("still not a number")[1] == 0.0


def test_the_turn_budget_a_task_sets_at_reset_reaches_the_client(server):
    local = make("planning/blocks-v0")
    with RemoteEnv(server, "planning/blocks-v0") as remote:
        created = remote.max_turns
        _, info = remote.reset(seed=3, options={"split": "train"})
        local.reset(options={"task_id": info["task_id"]})
        assert local.max_turns != created  # this task sets its own budget (3x its optimal plan)
        assert remote.max_turns == local.max_turns == remote.state()["max_turns"]
        assert remote.session_info["max_turns"] == local.max_turns


def test_listing_envs_and_tasks(server):
    import httpx

    envs = {e["id"]: e for e in httpx.get(f"{server}/envs").json()}
    assert {"planning/blocks-v0", "tooluse/bfcl-multi-turn-v0", "general/arithmetic-v0"} <= set(envs)
    assert envs["planning/blocks-v0"]["splits"] == ["train", "test", "ood"]
    listing = httpx.get(f"{server}/envs/planning/blocks-v0/tasks", params={"split": "ood"}).json()
    assert listing["split"] == "ood"
    assert [t["id"] for t in listing["tasks"]] == [t.id for t in make("planning/blocks-v0").tasks("ood")]
    assert httpx.get(f"{server}/health").json()["status"] == "ok"


def test_threads_play_sessions_of_different_domains_at_once(server):
    """Four threads, four sessions (three domains), released together: every episode still ends at reward 1
    and matches its local replay, and the server held all four sessions at the same time."""
    import httpx

    env_ids = ["planning/blocks-v0", "tooluse/bfcl-multi-turn-v0", "general/arithmetic-v0", "planning/blocks-v0"]
    plans = {env_id: expert_episode(env_id) for env_id in set(env_ids)}
    remotes = [RemoteEnv(server, env_id) for env_id in env_ids]
    barrier = threading.Barrier(len(remotes))
    results: dict[int, object] = {}
    open_during: list[int] = []

    def play(i: int) -> None:
        remote = remotes[i]
        task_id, actions = plans[remote.env_id]
        try:
            remote.reset(options={"task_id": task_id})
            barrier.wait(timeout=30)
            if i == 0:
                open_during.append(httpx.get(f"{server}/health").json()["sessions"])
            last = None
            for action in actions:
                last = remote.step(action)
                if last[2] or last[3]:
                    break
            results[i] = last
        except BaseException as exc:
            results[i] = exc

    threads = [threading.Thread(target=play, args=(i,)) for i in range(len(remotes))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    for r in remotes:
        r.close()
    assert all(isinstance(results.get(i), tuple) for i in range(len(remotes))), results
    assert all(results[i][1] == 1.0 and results[i][2] for i in range(len(remotes)))  # type: ignore[index]
    assert open_during and open_during[0] >= len(remotes)
