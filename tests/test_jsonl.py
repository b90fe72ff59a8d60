import json

import pytest

from pivotgym.jsonl import (
    JsonlAppender,
    JsonlError,
    read_jsonl,
    read_pivot_set,
    read_profiles,
    read_trajectories,
    write_jsonl,
    write_pivot_set,
    write_profiles,
    write_trajectories,
)
from pivotgym.types import PivotSet, ToolCall, Trajectory, TurnProfile, assistant_message, message


def _traj(i: int) -> Trajectory:
    return Trajectory(
        id=f"t{i}",
        env_id="arith/chain-v0",
        task_id=f"train-{i}",
        messages=[
            message("user", "q"),
            assistant_message("", [ToolCall("f", {"x": i})]),
            message("tool", "42", tool_call_id="c1"),
        ],
        reward=1.0,
        source="expert",
        metadata={"split": "train"},
    )


def _profile(i: int, rewards: list[float]) -> TurnProfile:
    mean = sum(rewards) / len(rewards)
    var = sum((r - mean) ** 2 for r in rewards) / len(rewards)
    return TurnProfile(
        f"t{i}",
        0,
        "arith/chain-v0",
        f"train-{i}",
        len(rewards),
        rewards,
        mean,
        var,
        ["r"] * len(rewards),
        {"model": "m", "revision": "r", "sampling": {}},
        {"name": "arith/value", "version": "1"},
        f"key{i}",
    )


def test_trajectories_round_trip(tmp_path):
    path = tmp_path / "t.jsonl"
    write_trajectories(path, [_traj(0), _traj(1)])
    assert read_trajectories(path) == [_traj(0), _traj(1)]


def test_torn_last_line_is_ignored_but_corrupt_middle_line_is_an_error(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text('{"a": 1}\n{"a": 2}\n{"a": 3, "b"')
    assert read_jsonl(path) == [{"a": 1}, {"a": 2}]
    path.write_text('{"a": 1}\nnot json\n{"a": 2}\n')
    with pytest.raises(JsonlError, match="x.jsonl:2"):
        read_jsonl(path)


def test_appender_repairs_a_torn_tail_before_appending(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"i": 0}\n{"i": 1, "x"')
    with JsonlAppender(path) as out:
        out.write({"i": 1})
    assert [r["i"] for r in read_jsonl(path)] == [0, 1]
    assert path.read_text().count("\n") == 2


def test_pivot_set_rows_carry_the_rule(tmp_path):
    path = tmp_path / "pivots.jsonl"
    rule = {"min_var": 0.0, "max_mean": 0.6}
    write_pivot_set(path, PivotSet(rule, [_profile(0, [1.0, 0.0]), _profile(1, [0.0, 0.0, 1.0])]))
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert all(r["selection"] == rule for r in rows)
    back = read_pivot_set(path)
    assert back.rule == rule and [p.trajectory_id for p in back.pivots] == ["t0", "t1"]


def test_every_format_loads_with_datasets(tmp_path):
    datasets = pytest.importorskip("datasets")
    write_trajectories(tmp_path / "t.jsonl", [_traj(0), _traj(1)])
    write_profiles(tmp_path / "p.jsonl", [_profile(0, [1.0, 0.0])])
    write_pivot_set(tmp_path / "s.jsonl", PivotSet({"max_mean": 0.6}, [_profile(0, [1.0, 0.0])]))
    for name, column in (("t", "messages"), ("p", "rewards"), ("s", "selection")):
        ds = datasets.load_dataset(
            "json", data_files=str(tmp_path / f"{name}.jsonl"), split="train", cache_dir=str(tmp_path / "hf-cache")
        )
        assert column in ds.column_names and len(ds) >= 1
    assert read_profiles(tmp_path / "p.jsonl")[0].rewards == [1.0, 0.0]


def test_rows_with_lone_surrogates_are_written_and_read_back_unchanged(tmp_path):
    path = tmp_path / "t.jsonl"
    rows = [{"text": "ok é"}, {"text": "bad \ud800 tail"}]
    write_jsonl(path, rows)
    assert read_jsonl(path) == rows
    assert "é" in path.read_text(encoding="utf-8")  # valid rows keep readable UTF-8
