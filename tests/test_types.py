import hashlib
import json

import pytest

from pivotgym.types import (
    Completion,
    ToolCall,
    Trajectory,
    TurnProfile,
    Verdict,
    assistant_message,
    content_hash,
    message,
    tool_calls_of,
)


def test_tool_call_round_trips_through_openai_form():
    call = ToolCall("get_weather", {"city": "Paris", "days": 2})
    d = call.to_dict()
    assert d["type"] == "function" and json.loads(d["function"]["arguments"]) == {"city": "Paris", "days": 2}
    assert ToolCall.from_dict(d).name == "get_weather"
    assert ToolCall.from_dict(d).arguments == {"city": "Paris", "days": 2}
    # the id is stable for the same call, so re-serialising is deterministic
    assert ToolCall("get_weather", {"days": 2, "city": "Paris"}).to_dict()["id"] == d["id"]


def test_assistant_message_with_tool_calls_decodes_back():
    msg = assistant_message("", [ToolCall("a", {"x": 1}), ToolCall("b")])
    assert [c.name for c in tool_calls_of(msg)] == ["a", "b"]
    assert tool_calls_of(message("assistant", "hi")) == []


def test_verdict_rejects_rewards_outside_unit_interval():
    with pytest.raises(ValueError, match="in \\[0, 1\\]"):
        Verdict(1.5, True, "x")
    assert Verdict.ok().reward == 1.0 and Verdict.fail("bad", layer="parse").components == {"layer": "parse"}


def test_trajectory_turns_split_at_assistant_messages():
    msgs = [
        message("system", "s"),
        message("user", "u1"),
        message("assistant", "a1"),
        message("user", "u2"),
        message("assistant", "a2"),
    ]
    traj = Trajectory("t", "x/y-v0", "task", msgs)
    turns = traj.turns()
    assert [t.turn for t in turns] == [0, 1]
    assert turns[1].prefix == msgs[:4] and turns[1].expert["content"] == "a2"
    assert Trajectory.from_dict({**traj.to_dict(), "unknown_field": 1}) == traj


def test_content_hash_is_order_independent_for_dict_keys():
    assert content_hash({"a": 1, "b": 2}, 3) == content_hash({"b": 2, "a": 1}, 3)
    assert content_hash({"a": 1}) != content_hash({"a": 2})


def test_records_survive_dict_round_trip():
    prof = TurnProfile(
        "t",
        0,
        "e/x-v0",
        "task",
        2,
        [1.0, 0.0],
        0.5,
        0.25,
        ["ok", "bad"],
        {"model": "m"},
        {"name": "v", "version": "1"},
        "k",
    )
    assert TurnProfile.from_dict(prof.to_dict()) == prof
    assert prof.informative
    comp = Completion("hi", [1, 2], [-0.1, -0.2], "stop", [5])
    assert Completion.from_dict(comp.to_dict()) == comp


def test_lone_surrogates_hash_and_get_call_ids_without_raising():
    hostile = ToolCall(name="f", arguments={"x": "\ud800"})
    assert hostile.to_dict()["id"].startswith("call_")
    assert content_hash("\ud800") != content_hash("\ud801")
    # valid text hashes exactly as before the surrogate-safe encoding
    assert content_hash("é") == hashlib.sha256(json.dumps(["é"], ensure_ascii=False).encode()).hexdigest()
