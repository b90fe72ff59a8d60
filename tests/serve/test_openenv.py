"""OpenEnv's protocol on ``pivotgym serve`` (pivotgym/serve/openenv.py): the WebSocket session and the stateless
routes, with a plain WebSocket and HTTP client everywhere, and with OpenEnv 0.10's own ``GenericEnvClient`` in
its venv (``make openenv``; those tests skip without it)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import httpx
import pytest
from core_helpers import expert_episode, openenv_python

from pivotgym.registry import make


def ws_frames(url: str, frames: list[dict]) -> list[dict]:
    """Send ``frames`` over one WebSocket connection to ``url`` and read one answer each (``close`` has none)."""
    from websockets.sync.client import connect

    answers = []
    with connect(url) as ws:
        for frame in frames:
            ws.send(json.dumps(frame))
            if frame.get("type") != "close":
                answers.append(json.loads(ws.recv(timeout=60)))
    return answers


def test_an_expert_episode_over_the_websocket_reaches_reward_1_and_matches_the_local_env(server):
    env_id = "planning/blocks-v0"
    task_id, actions = expert_episode(env_id)
    base = server.replace("http://", "ws://") + f"/openenv/{env_id}/ws"
    frames = [{"type": "reset", "data": {"task_id": task_id}}]
    frames += [{"type": "step", "data": {"message": a}} for a in actions] + [{"type": "state"}, {"type": "close"}]
    answers = ws_frames(base, frames)
    local = make(env_id)
    obs, _ = local.reset(options={"task_id": task_id})
    assert answers[0] == {
        "type": "observation",
        "data": {
            "observation": {"messages": obs, "info": answers[0]["data"]["observation"]["info"], "metadata": {}},
            "reward": None,
            "done": False,
            "metadata": {"terminated": False, "truncated": False},
        },
    }
    for action, answer in zip(actions, answers[1:-1]):
        _, reward, terminated, truncated, _ = local.step(action)
        assert answer["type"] == "observation"
        assert (answer["data"]["reward"], answer["data"]["done"]) == (reward, terminated or truncated)
    assert answers[-2]["data"]["reward"] == 1.0 and answers[-2]["data"]["done"] is True
    state = answers[-1]
    assert state["type"] == "state" and state["data"]["step_count"] == len(actions)
    assert state["data"]["task_id"] == task_id and state["data"]["done"] is True


def test_errors_in_a_frame_answer_an_error_frame_and_keep_the_connection(server):
    base = server.replace("http://", "ws://") + "/openenv/general/arithmetic-v0/ws"
    answers = ws_frames(
        base,
        [
            {"type": "step", "data": {"message": "3"}},  # before any reset
            {"type": "dance"},
            {"type": "reset", "data": {"seed": "x"}},
            {"type": "reset", "data": {}},
            {"type": "step", "data": {"text": "3"}},  # not the action's field
            {"type": "close"},
        ],
    )
    assert [a["type"] for a in answers] == ["error", "error", "error", "observation", "error"]
    assert answers[0]["data"]["pivotgym_code"] == "reset_needed"
    assert answers[1]["data"]["code"] == "UNKNOWN_TYPE"
    assert "seed" in answers[2]["data"]["message"] and "message" in answers[4]["data"]["message"]
    from websockets.sync.client import connect  # an unknown env: one error frame, then the server closes

    with connect(server.replace("http://", "ws://") + "/openenv/planning/nope-v0/ws") as ws:
        refused = json.loads(ws.recv(timeout=30))
    assert refused["type"] == "error" and refused["data"]["code"] == "FACTORY_ERROR"


def test_the_stateless_routes_answer_as_openenv_servers_do(server):
    base = f"{server}/openenv/planning/blocks-v0"
    first = httpx.post(f"{base}/reset", json={"seed": 3}).json()
    assert first["done"] is False and first["reward"] is None and first["observation"]["messages"]
    step = httpx.post(f"{base}/step", json={"action": {"message": "(pick-up a)"}})
    assert step.status_code == 409 and "/ws" in step.json()["hint"]
    schema = httpx.get(f"{base}/schema").json()
    assert schema["action"]["required"] == ["message"] and set(schema) == {"action", "observation", "state"}
    assert httpx.get(f"{base}/metadata").json()["name"] == "planning/blocks-v0"
    assert httpx.get(f"{base}/state").json()["step_count"] == 0
    assert httpx.get(f"{base}/health").json() == {"status": "healthy"}
    assert httpx.get(f"{server}/openenv/planning/nope-v0/schema").status_code == 404
    sessions = httpx.get(f"{server}/sessions").json()
    assert not [s for s in sessions if s["env_id"] == "planning/blocks-v0" and s["steps"] == 0 and s["task_id"]]


@pytest.mark.openenv
def test_openenvs_own_client_plays_episodes_to_reward_1(server):
    python = openenv_python()
    if python is None:
        pytest.skip("no OpenEnv 0.10 client: `make openenv` builds one")
    episodes = {}
    for env_id in ("planning/blocks-v0", "tooluse/bfcl-multi-turn-v0"):
        task_id, actions = expert_episode(env_id)
        episodes[env_id] = {"task_id": task_id, "actions": actions}
    for env_id, episode in episodes.items():
        job = {"base": f"{server}/openenv/{env_id}", "episodes": [episode], "unknown": f"{server}/openenv/x/nope-v0"}
        script = Path(__file__).with_name("openenv_client_check.py")
        done = subprocess.run(
            [str(python), str(script)], input=json.dumps(job), capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr[-3000:]
        out = json.loads(done.stdout.splitlines()[-1])
        [played] = out["episodes"]
        assert played["first_messages"] > 0 and played["first_done"] is False, (env_id, played)
        assert played["steps"][-1]["reward"] == 1.0 and played["steps"][-1]["done"] is True, (env_id, played)
        assert len(played["steps"]) == len(episode["actions"])
        assert played["state"]["task_id"] == episode["task_id"] and played["state"]["done"] is True
        assert "message" in out["bad_action"] and out["bad_action"] != "accepted", out
        assert out["unknown_env"] != "accepted", out


@pytest.mark.openenv
def test_the_documented_openenv_snippet_runs(server):
    """docs/serve.md's OpenEnv block, pointed at this server, in the OpenEnv venv."""
    python = openenv_python()
    if python is None:
        pytest.skip("no OpenEnv 0.10 client: `make openenv` builds one")
    page = (Path(__file__).parents[2] / "docs" / "serve.md").read_text()
    start = page.index("```python\nfrom openenv")
    block = page[start + len("```python\n") : page.index("```", start + 3)]
    code = block.replace("http://127.0.0.1:8100", server)
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    reward, finished, turn = done.stdout.splitlines()[-1].split()
    assert (float(reward), finished, int(turn)) == (0.0, "False", 1), done.stdout
