"""Verification over HTTP on the ``pivotgym serve`` subprocess: ``POST /verify/turn`` (through
:func:`pivotgym.remote.verify`) and NeMo-Gym's ``POST /verify``, whose body is the row the agent ran plus the
model's Responses API ``response`` and whose answer is that body with a ``reward``."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import httpx
import pytest
from core_helpers import nemo_gym_python

from pivotgym.pivot.formats import nemo_row
from pivotgym.registry import make
from pivotgym.remote import RemoteError, verify
from pivotgym.types import ExpertState

MULTI_TURN = "tooluse/bfcl-multi-turn-v0"


def expert_turn(env_id: str, n: int):
    """Turn ``n`` of the first expert trajectory of ``env_id``'s test split, and the task's tools."""
    env = make(env_id)
    trajectory = next(env.expert_trajectories("test", limit=1))
    env.reset(options={"task_id": trajectory.task_id})
    return env, trajectory.turn(n), env.tool_schemas()


def response(*items: dict) -> dict:
    """A Responses API object as a model server returns it (reasoning first, then the action's items)."""
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 0,
        "model": "policy",
        "status": "completed",
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "output": [
            {"id": "rs_1", "type": "reasoning", "summary": [{"type": "summary_text", "text": "thinking"}]},
            *items,
        ],
    }


def call(name: str, arguments: dict, call_id: str = "call_1") -> dict:
    return {
        "id": f"fc_{call_id}",
        "type": "function_call",
        "name": name,
        "arguments": json.dumps(arguments),
        "call_id": call_id,
        "status": "completed",
    }


def text(content: str) -> dict:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": content, "annotations": []}],
    }


# ------------------------------------------------------------------------------------------------ /verify/turn
def test_verify_a_turn_credits_the_expert_and_not_a_wrong_action(server):
    env, turn, _ = expert_turn("planning/blocks-v0", 1)
    expert = env.render_action(turn.expert)
    state = {"messages": turn.prefix, "expert": turn.expert, "task_id": turn.task_id}
    good, wrong, junk = verify(server, "planning/blocks-v0", state, [expert, "(pick-up zz)", "hello"])
    assert (good["reward"], good["undecided"], good["candidate"]) == (1.0, None, expert)
    assert wrong["reward"] == 0.0 and wrong["undecided"] is None and wrong["reason"]
    assert junk["reward"] == 0.0 and junk["code"]
    assert good["verifier"]["name"] == "planning/optimal"


def test_verify_an_adhoc_tool_turn_with_its_tools(server):
    env, turn, tools = expert_turn(MULTI_TURN, 2)
    state = {"messages": turn.prefix, "expert": turn.expert, "tools": tools}  # no task id: judged from the turn
    good, wrong = verify(
        server,
        MULTI_TURN,
        state,
        [
            env.render_action(turn.expert),
            '<tool_call>{"name": "sort", "arguments": {"file_name": "x.txt"}}</tool_call>',
        ],
    )
    assert good["reward"] == 1.0 and wrong["reward"] == 0.0


def test_verify_turn_errors(server):
    with pytest.raises(RemoteError) as exc:
        verify(server, "planning/blocks-v0", {"messages": [], "expert": "(x)", "task_id": "nope"}, ["(x)"])
    assert exc.value.status == 404 and exc.value.code == "unknown_task"
    with pytest.raises(RemoteError) as exc:
        verify(server, "planning/blocks-v0", {"messages": "hi", "expert": "(x)"}, ["(x)"])
    assert exc.value.status == 422 and exc.value.code == "bad_turn" and "messages" in str(exc.value)
    with pytest.raises(RemoteError) as exc:
        verify(server, "planning/nope-v0", {"messages": [], "expert": "(x)"}, ["(x)"])
    assert exc.value.code == "unknown_env"
    with pytest.raises(RemoteError) as exc:
        verify(server, "planning/blocks-v0", {"messages": [], "expert": "(x)"}, ["(x)"], verifier="nope")
    assert exc.value.code == "unknown_verifier"


# ------------------------------------------------------------------------------------------------ NeMo-Gym
def test_nemo_verify_scores_the_expert_call_1_and_wrong_ones_0(server):
    _, turn, tools = expert_turn(MULTI_TURN, 2)
    row = nemo_row(ExpertState(turn), tools=tools)  # a row as `pivotgym pivots export --to nemo` writes it
    [expert_call] = turn.expert["tool_calls"]
    fn = expert_call["function"]
    right = call(fn["name"], json.loads(fn["arguments"]))
    cases = {
        "expert": (response(right), 1.0),
        "wrong argument": (response(call(fn["name"], {"file_name": "missing.txt"})), 0.0),
        "text instead of a call": (response(text("I sorted it.")), 0.0),
        "no output": (response(), 0.0),
    }
    for name, (model_response, reward) in cases.items():
        body = {**row, "response": model_response}
        answer = httpx.post(f"{server}/verify", json=body)
        assert answer.status_code == 200, (name, answer.text)
        result = answer.json()
        assert result["reward"] == reward, (name, result["pivotgym"])
        assert result["mask_sample"] is False and result["failure_kind"] is None, name
        # NeMo-Gym's answer is the request body with the reward added
        assert {k: result[k] for k in body} == json.loads(json.dumps(body)), name


def responses_items(messages: list) -> list[dict]:
    """Chat messages as Responses API input items (how NeMo-Gym rows hold a conversation)."""
    items: list[dict] = []
    for m in messages:
        if m["role"] == "tool":
            items.append({"type": "function_call_output", "call_id": m.get("tool_call_id", ""), "output": m["content"]})
            continue
        for c in m.get("tool_calls") or []:
            items.append(call(c["function"]["name"], json.loads(c["function"]["arguments"]), c["id"]))
        if m.get("content") or not m.get("tool_calls"):
            role = "developer" if m["role"] == "system" else m["role"]
            if role == "assistant":  # an earlier reply, as an easy input message (an output message needs an id)
                items.append({"type": "message", "role": role, "content": m["content"]})
            else:
                items.append(
                    {"type": "message", "role": role, "content": [{"type": "input_text", "text": m["content"]}]}
                )
    return items


def test_nemo_verify_reads_a_foreign_row_of_responses_items(server):
    """A row NeMo-Gym wrote (no pivotgym metadata, so no task): input as Responses items, tools in the flat
    Responses form, the env named by the row; judged from the row alone."""
    _, turn, tools = expert_turn(MULTI_TURN, 2)
    [expert_call] = turn.expert["tool_calls"]
    fn = expert_call["function"]
    row = {
        "responses_create_params": {
            "input": responses_items(turn.prefix),
            "tools": [{"type": "function", **t["function"]} for t in tools],
        },
        "expected_action": call(fn["name"], json.loads(fn["arguments"])),
        "env_id": MULTI_TURN,
    }
    right = response(call(fn["name"], json.loads(fn["arguments"]), "call_9"))
    good = httpx.post(f"{server}/verify", json={**row, "response": right}).json()
    bad = httpx.post(f"{server}/verify", json={**row, "response": response(text("done"))}).json()
    assert (good["reward"], bad["reward"]) == (1.0, 0.0), (good["pivotgym"], bad["pivotgym"])
    assert good["pivotgym"]["env_id"] == MULTI_TURN and good["mask_sample"] is False

    no_env = {k: v for k, v in row.items() if k != "env_id"}
    answer = httpx.post(f"{server}/verify", json={**no_env, "response": right})
    assert answer.status_code == 422 and answer.json()["error"] == "no_env" and "--nemo-env" in answer.json()["hint"]


def test_nemo_verify_masks_a_row_the_verifier_cannot_judge(server):
    """Planning judges from the task's state: a foreign row without a task is undecided, so NeMo-Gym is told
    the reward is no measurement (mask_sample) and why, instead of a silent 0."""
    env, turn, _ = expert_turn("planning/blocks-v0", 2)
    expert = env.render_action(turn.expert)
    row = {
        "responses_create_params": {"input": responses_items(turn.prefix)},
        "expected_action": {"type": "message", "role": "assistant", "content": expert},
        "env_id": "planning/blocks-v0",
    }
    result = httpx.post(f"{server}/verify", json={**row, "response": response(text(expert))}).json()
    assert result["reward"] == 0.0 and result["mask_sample"] is True
    assert result["failure_kind"] == "pivotgym:undecided" and "task" in result["failure_reason"]
    exported = nemo_row(ExpertState(turn))  # the same state exported by pivotgym carries its task: judged, reward 1
    judged = httpx.post(f"{server}/verify", json={**exported, "response": response(text(expert))}).json()
    assert judged["reward"] == 1.0 and judged["mask_sample"] is False


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"response": {"output": []}}, "bad_request"),
        ({"responses_create_params": {"input": []}, "env_id": "planning/blocks-v0"}, "bad_response"),
        (
            {"responses_create_params": {"input": []}, "env_id": "planning/blocks-v0", "response": {"output": [1]}},
            "bad_response",
        ),
        (
            {"responses_create_params": {"input": []}, "env_id": "planning/blocks-v0", "response": {"output": []}},
            "bad_row",
        ),
    ],
)
def test_nemo_verify_errors(server, body, code):
    answer = httpx.post(f"{server}/verify", json=body)
    assert answer.status_code == 422 and answer.json()["error"] == code, answer.text
    assert answer.json()["hint"] is not None or code == "bad_response"


def test_seed_session_is_accepted(server):
    assert httpx.post(f"{server}/seed_session", json={}).json() == {}


# ------------------------------------------------------------------------- NeMo-Gym's resources-server API
def test_the_session_routes_confirm_both_seed_bodies_and_every_close(server):
    episode, task = {"rollout_id": "ro-7", "attempt": 0}, {"taskset": "pivotgym:planning", "task_id": "t"}
    typed = {"resources_session_id": "rs-7", "episode_id": episode, "task_id": task, "task_data": {}}
    assert httpx.post(f"{server}/seed_session", json=typed).json() == {"resources_session_id": "rs-7"}
    assert httpx.post(f"{server}/seed_session", json={"responses_create_params": {"input": []}}).json() == {}
    assert httpx.post(f"{server}/seed_session").json() == {}  # an agent may seed with no body
    closing = {"resources_session_id": "never-seeded", "episode_id": episode}
    assert httpx.post(f"{server}/close_session", json=closing).json() == {"resources_session_id": "never-seeded"}
    bad = httpx.post(f"{server}/close_session", json={"episode_id": episode})
    assert bad.status_code == 422 and "resources_session_id" in bad.json()["message"]
    assert httpx.get(f"{server}/reverify_mode").json() == "stateless"


def test_aggregate_metrics_averages_measured_rollouts_and_counts_masked_ones(server):
    answers = [
        {"_ng_task_index": 0, "reward": 1.0, "mask_sample": False},
        {"_ng_task_index": 0, "reward": 0.0, "mask_sample": False},
        {"_ng_task_index": 1, "reward": 1.0, "mask_sample": False},
        {"_ng_task_index": 2, "reward": 0.0, "mask_sample": True},  # undecided: not a measurement
    ]
    metrics = httpx.post(f"{server}/aggregate_metrics", json={"verify_responses": answers}).json()
    agent = metrics["agent_metrics"]
    assert agent["mean/reward"] == pytest.approx(2 / 3) and agent["max/reward"] == 1.0
    assert (agent["coverage/measured_rollouts"], agent["coverage/masked_rollouts"]) == (3, 1)
    assert (agent["coverage/measured_tasks"], agent["coverage/fully_masked_tasks"]) == (2, 1)
    assert [g["mean/reward"] for g in metrics["group_level_metrics"][:2]] == [0.5, 1.0]
    assert "mean/reward" not in metrics["group_level_metrics"][2]
    assert metrics["key_metrics"]["mean/reward"] == agent["mean/reward"]
    empty = httpx.post(f"{server}/aggregate_metrics", json={"verify_responses": []}).json()
    assert empty["agent_metrics"] == {}
    bad = httpx.post(f"{server}/aggregate_metrics", json={"verify_responses": [{"reward": "high"}]})
    assert bad.status_code == 422


@pytest.mark.nemo_gym
def test_nemo_gyms_own_client_models_and_session_contract_accept_the_server(server, tmp_path):
    """NeMo-Gym 0.7, in its own interpreter, reaches the running server as a resources server named in its
    config (its ``ServerClient``), validates every answer with its response models, computes the same headline
    metrics with its own aggregation, and runs its session conformance check (tests/serve/nemo_gym_server_check.py)."""
    python = nemo_gym_python()
    if python is None:
        pytest.skip("no NeMo-Gym 0.7 interpreter: `make nemo-gym` builds one")
    _, turn, tools = expert_turn(MULTI_TURN, 2)
    row = nemo_row(ExpertState(turn), tools=tools)
    [expert_call] = turn.expert["tool_calls"]
    fn = expert_call["function"]
    right, wrong = call(fn["name"], json.loads(fn["arguments"])), call(fn["name"], {"file_name": "missing.txt"})
    env, planning_turn, _ = expert_turn("planning/blocks-v0", 2)
    expert = env.render_action(planning_turn.expert)
    taskless = {  # a row planning cannot judge without its task: masked
        "responses_create_params": {"input": responses_items(planning_turn.prefix)},
        "expected_action": {"type": "message", "role": "assistant", "content": expert},
        "env_id": "planning/blocks-v0",
        "response": response(text(expert)),
    }
    rows = [[0, {**row, "response": response(right)}], [0, {**row, "response": response(wrong)}], [1, taskless]]
    host, port = server.removeprefix("http://").rsplit(":", 1)
    job = json.dumps({"host": host, "port": int(port), "rows": rows})
    script = Path(__file__).with_name("nemo_gym_server_check.py")
    # in tmp_path: NeMo-Gym's global config writes Hydra's outputs/<date>/ into the working directory
    done = subprocess.run(
        [str(python), str(script)], input=job, capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.splitlines()[-1])
    failed = {name: r for name, r in results.items() if not r["ok"]}
    assert not failed, failed
    assert set(results) == {"sessions", "verify", "aggregate_metrics", "reverify_mode", "session_contract"}
    assert results["verify"]["rewards"] == [1.0, 0.0, 0.0] and results["verify"]["masked"] == [False, False, True]
    assert results["aggregate_metrics"]["key_metrics"]["mean/reward"] == 0.5
