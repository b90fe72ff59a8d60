"""NeMo-Gym pivot rows (import/export round trip) and the HF dataset export for TRL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pivotgym.jsonl import read_trajectories, write_jsonl, write_pivot_set, write_trajectories
from pivotgym.pivot.formats import (
    export_nemo_rows,
    import_nemo_rows,
    to_hf_dataset,
    tools_from_responses,
    tools_to_responses,
    turn_from_state,
)
from pivotgym.types import PivotSet, ToolCall, Trajectory, TurnProfile, assistant_message, message


def _profiles_for(trajectories: list[Trajectory]) -> list[TurnProfile]:
    out = []
    for t in trajectories:
        for turn in t.turns():
            out.append(
                TurnProfile(
                    trajectory_id=t.id,
                    turn=turn.turn,
                    env_id=t.env_id,
                    task_id=t.task_id,
                    k=4,
                    rewards=[0, 1, 0, 0],
                    mean=0.25,
                    var=0.1875,
                    reasons=["x"] * 4,
                    reference={"model": "m"},
                    verifier={"name": "v", "version": "1"},
                    key=f"{t.id}-{turn.turn}",
                )
            )
    return out


def test_nemo_round_trip_on_a_real_env(pivot_registry: object) -> None:
    from pivotgym.registry import make

    trajectories = list(make("arith/chain-v0").expert_trajectories("train", limit=2))
    pivots = PivotSet(rule={}, pivots=_profiles_for(trajectories))
    rows = json.loads(json.dumps(export_nemo_rows(pivots, trajectories)))
    assert len(rows) == len(pivots.pivots)
    first = rows[0]
    assert first["responses_create_params"]["input"][0]["role"] == "system"
    assert first["expected_action"] == {
        "type": "message",
        "role": "assistant",
        "content": trajectories[0].turn(0).expert["content"],
    }
    assert first["pass_rate"] == 0.25 and first["pass_rate_total"] == 4 and first["pass_rate_passed"] == 1

    imported = import_nemo_rows(rows)
    for profile, trajectory in zip(pivots.pivots, imported):
        original = next(t for t in trajectories if t.id == profile.trajectory_id).turn(profile.turn)
        state = trajectory.turns()[-1]
        assert (state.trajectory_id, state.env_id, state.task_id, state.turn) == (
            original.trajectory_id,
            original.env_id,
            original.task_id,
            original.turn,
        )
        assert state.prefix == original.prefix and state.expert == original.expert
    # export -> import -> export is the identity
    again = export_nemo_rows(PivotSet(rule={}, pivots=pivots.pivots), imported)
    assert again == rows


def test_import_nemotron_rows_with_tools_and_responses_items() -> None:
    tools = [
        {
            "type": "function",
            "name": "get_weather",
            "description": "weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        }
    ]
    row = {
        "trajectory_id": 12610,
        "info": {"turn": 1, "step": 2},
        "responses_create_params": {
            "input": [
                {"role": "developer", "content": "You are an agent."},
                {"role": "user", "content": [{"type": "input_text", "text": "Weather in Paris and Rome?"}]},
                {"type": "function_call", "name": "get_weather", "arguments": '{"city": "Paris"}', "call_id": "c1"},
                {"type": "function_call", "name": "get_weather", "arguments": '{"city": "Rome"}', "call_id": "c2"},
                {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
                {"type": "function_call_output", "call_id": "c2", "output": "rain"},
            ],
            "tools": tools,
        },
        "expected_action": {"type": "function_call", "name": "get_weather", "arguments": '{"city": "Oslo"}'},
        "agent_ref": {"name": "weather_agent"},
        "metadata": {"instance_id": "w-1"},
        "pass_rate": 0.375,
        "pass_rate_total": 8,
        "pass_rate_passed": 3,
    }
    with pytest.raises(ValueError, match="env_id"):
        import_nemo_rows([row])
    [trajectory] = import_nemo_rows([row], env_id="tooluse/weather-v0")
    roles = [m["role"] for m in trajectory.messages]
    assert roles == ["system", "user", "assistant", "tool", "tool", "assistant"]
    assert trajectory.messages[1]["content"] == "Weather in Paris and Rome?"
    assert [c["function"]["name"] for c in trajectory.messages[2]["tool_calls"]] == ["get_weather"] * 2
    state = trajectory.turns()[-1]
    assert state.turn == 1 and state.task_id == "w-1"
    assert state.expert["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": '{"city": "Oslo"}'}
    assert trajectory.metadata["tools"] == tools_from_responses(tools)
    # back to the Responses form; a tool that does not say whether it is strict is written as not strict
    assert tools_to_responses(trajectory.metadata["tools"]) == [{**t, "strict": False} for t in tools]
    assert trajectory.metadata["nemo"]["pass_rate"] == 0.375


def test_tool_call_expert_exports_function_calls() -> None:
    expert = assistant_message("", [ToolCall("a", {"x": 1}, id="c1"), ToolCall("b", {}, id="c2")])
    trajectory = Trajectory(
        id="t",
        env_id="x/y-v0",
        task_id="1",
        messages=[message("user", "go"), expert, message("tool", "ok", tool_call_id="c1")],
    )
    profile = _profiles_for([trajectory])[0]
    [row] = export_nemo_rows([profile], [trajectory], with_tools=False)
    action = row["expected_action"]
    assert action["type"] == "function_call_batch"  # NeMo-Gym 0.7's parallel-call action, not a bare list
    assert [(c["type"], c["name"], json.loads(c["arguments"])) for c in action["calls"]] == [
        ("function_call", "a", {"x": 1}),
        ("function_call", "b", {}),
    ]
    [back] = import_nemo_rows([row])
    assert back.turns()[-1].expert == expert
    # without ref_message the expert's message is rebuilt from the batch's calls, not left empty
    bare = {k: v for k, v in row.items() if k != "ref_message"}
    [rebuilt] = import_nemo_rows([bare])
    assert rebuilt.turns()[-1].expert == expert
    # files written before the batch type held parallel calls as a bare list: still read
    legacy = {**bare, "expected_action": action["calls"]}
    assert import_nemo_rows([legacy])[0].turns()[-1].expert == expert


@pytest.mark.parametrize(
    "action",
    [
        {"type": "function_call_batch", "calls": []},
        {"type": "function_call_batch"},
        {"type": "function_call_batch", "calls": [{"type": "message", "content": "hi"}]},
        {"type": "tool_use", "name": "a"},
        {"type": "function_call", "arguments": "{}"},
        ["not an object"],
    ],
)
def test_an_unreadable_expected_action_without_ref_message_fails_loudly(action: object) -> None:
    row = {
        "responses_create_params": {"input": [{"role": "user", "content": "go"}]},
        "expected_action": action,
    }
    with pytest.raises(ValueError, match="row 0: cannot rebuild the expert's message"):
        import_nemo_rows([row], env_id="x/y-v0")


def test_imported_tools_survive_export_and_the_hf_dataset(pivot_registry: object) -> None:
    """A foreign row's tools are kept on re-export and in the HF dataset's ``tools_json`` column."""
    from pivotgym.pivot.formats import tools_of_row

    tools = [{"type": "function", "name": "f", "parameters": {"type": "object", "properties": {}}}]
    row = {
        "trajectory_id": 7,
        "responses_create_params": {"input": [{"role": "user", "content": "2+2?"}], "tools": tools},
        "expected_action": {"type": "message", "role": "assistant", "content": "4"},
    }
    [trajectory] = import_nemo_rows([row], env_id="arith/chain-v0")
    profile = _profiles_for([trajectory])[0]
    [again] = export_nemo_rows([profile], [trajectory])
    assert again["responses_create_params"]["tools"] == [{**tools[0], "strict": False}]
    dataset = to_hf_dataset([profile], [trajectory])
    assert tools_of_row(dataset[0]["tools_json"]) == tools_from_responses(tools)


def test_hf_dataset_for_trl(pivot_registry: object, tmp_path: Path) -> None:
    from pivotgym.registry import make

    trajectories = list(make("arith/chain-v0").expert_trajectories("train", limit=1))
    profiles = _profiles_for(trajectories)
    dataset = to_hf_dataset(PivotSet(rule={}, pivots=profiles), trajectories)
    assert len(dataset) == len(profiles)
    assert {"prompt", "env_id", "task_id", "expert", "state", "mean"} <= set(dataset.column_names)
    row = dataset[1]
    assert row["prompt"][0]["role"] == "system" and row["prompt"][-1]["role"] == "user"
    assert row["prompt"][2] == {"role": "assistant", "content": trajectories[0].turn(0).expert["content"]}
    assert turn_from_state(row["state"]) == trajectories[0].turn(1)
    assert row["tools_json"] == ""  # arith offers no functions


def test_import_and_export_commands(pivot_registry: object, tmp_path: Path) -> None:
    from pivotgym.cli import main
    from pivotgym.registry import make

    trajectories = list(make("arith/chain-v0").expert_trajectories("train", limit=1))
    traj_file, pivots_file = tmp_path / "t.jsonl", tmp_path / "p.jsonl"
    write_trajectories(traj_file, trajectories)
    write_pivot_set(pivots_file, PivotSet(rule={"max_mean": 0.6}, pivots=_profiles_for(trajectories)))
    rows_file = tmp_path / "nemo.jsonl"
    assert main(["pivots", "export", str(pivots_file), "-t", str(traj_file), "-o", str(rows_file)]) == 0
    back = tmp_path / "back.jsonl"
    assert main(["pivots", "import", str(rows_file), "-o", str(back)]) == 0
    assert [t.turns()[-1] for t in read_trajectories(back)] == trajectories[0].turns()
    assert (
        main(["pivots", "export", str(pivots_file), "-t", str(traj_file), "-o", str(tmp_path / "ds"), "--to", "hf"])
        == 0
    )
    from datasets import load_from_disk

    assert len(load_from_disk(str(tmp_path / "ds"))) == len(trajectories[0].turns())
    write_jsonl(tmp_path / "bad.jsonl", [{"nothing": 1}])
    assert main(["pivots", "import", str(tmp_path / "bad.jsonl"), "-o", str(back)]) == 1
