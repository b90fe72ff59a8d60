"""One expert-state record (pivotgym.states): made once, one key, carried from profiling to training and export."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pivotgym.jsonl import read_pivot_set, read_profiles, write_pivot_set, write_trajectories
from pivotgym.pivot import ProfileConfig, Profiler
from pivotgym.pivot.formats import export_nemo_rows, state_of_row, to_hf_dataset
from pivotgym.pivot.select import SelectionRule, select_pivots
from pivotgym.sampling.base import SamplingParams
from pivotgym.states import expert_state, expert_states, states_of
from pivotgym.train.states import load_pivot_states
from pivotgym.types import ExpertState, PivotSet, Trajectory, TurnProfile, content_hash, message

TOOLS = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {}}}}]


def trajectory(tools: list | None = None) -> Trajectory:
    messages = [message("user", "go"), message("assistant", "a"), message("user", "more"), message("assistant", "b")]
    return Trajectory("t1", "some/env-v0", "task-1", messages, metadata={"tools": tools} if tools else {})


def test_the_key_is_the_content_hash_every_cached_profile_row_was_keyed_by() -> None:
    """Profile caches and sampling streams derive from this key: the formula is a contract, not a detail."""
    plain, offered = expert_state(trajectory(), 1), expert_state(trajectory(TOOLS), 1)
    t = plain.turn
    base = ("pivotgym-state", t.trajectory_id, t.env_id, t.task_id, t.turn, t.prefix, t.expert)
    assert plain.key == content_hash(*base)
    assert offered.key == content_hash(*base, TOOLS)
    assert offered.tools == TOOLS and plain.tools is None


def test_a_state_read_back_has_its_key_and_an_edited_one_a_new_key() -> None:
    state = expert_state(trajectory(TOOLS), 1)
    row = json.loads(json.dumps(state.to_dict()))
    assert ExpertState.from_dict(row) == state and ExpertState.from_dict(row).key == state.key
    forged = {**row, "key": "0" * 64}  # a stored key is never trusted: it is recomputed from the content
    assert ExpertState.from_dict(forged).key == state.key
    edited = json.loads(json.dumps(row))
    edited["turn"]["expert"]["content"] = "c"
    assert ExpertState.from_dict(edited).key != state.key


def test_expert_states_are_every_assistant_turn_in_order() -> None:
    states = list(expert_states([trajectory(), trajectory(TOOLS)]))
    assert [(s.turn.turn, s.tools is None) for s in states] == [(0, True), (1, True), (0, False), (1, False)]
    assert len({s.key for s in states}) == 4


def _row(turn: int, state: ExpertState | None = None) -> TurnProfile:
    return TurnProfile("t1", turn, "some/env-v0", "task-1", 2, [0.0, 1.0], 0.5, 0.25, [], {}, {}, "k", state=state)


def test_rows_without_a_state_take_it_from_the_trajectories_or_say_what_to_pass() -> None:
    carried = expert_state(trajectory(), 0)
    assert states_of([_row(0, carried)]) == [carried]  # a row with its state needs nothing else
    assert states_of([_row(1)], [trajectory()]) == [expert_state(trajectory(), 1)]
    with pytest.raises(ValueError, match=r"row 0 \(trajectory 't1', turn 1\).*--trajectories"):
        states_of([_row(1)])


def test_a_profile_row_round_trips_its_state_and_a_bad_state_names_the_field() -> None:
    from pivotgym.errors import RecordError

    row = _row(1, expert_state(trajectory(TOOLS), 1))
    assert TurnProfile.from_dict(json.loads(json.dumps(row.to_dict()))) == row
    with pytest.raises(RecordError, match="state: missing required field"):
        TurnProfile.from_dict({**row.to_dict(), "state": {"tools": None}})


def test_a_pivot_set_is_one_input_from_profiling_to_training_and_export(
    pivot_registry: object, tiny_sampler: object, tmp_path: Path
) -> None:
    """Profile -> select -> train items, NeMo rows and a TRL dataset, without the trajectories file."""
    from pivotgym.registry import make

    trajectories = list(make("arith/chain-v0").expert_trajectories("train", limit=2))
    config = ProfileConfig(k=2, params=SamplingParams(temperature=1.0, max_new_tokens=4))
    profiles_file, pivots_file = tmp_path / "profiles.jsonl", tmp_path / "pivots.jsonl"
    Profiler(tiny_sampler, config, "serial").profile(trajectories, profiles_file, progress=False)
    profiles = read_profiles(profiles_file)
    assert [p.state for p in profiles] == list(expert_states(trajectories))
    write_pivot_set(pivots_file, select_pivots(profiles, SelectionRule(max_mean=1.01, min_var=-1.0)))

    pivot_set = read_pivot_set(pivots_file)
    assert pivot_set.pivots and all(p.state is not None for p in pivot_set.pivots)
    items = load_pivot_states(pivots_file, encode=lambda messages: [len(messages)])
    assert [i.state for i in items] == [p.state for p in pivot_set.pivots]
    rows = export_nemo_rows(pivot_set)
    assert [r["metadata"]["pivotgym"]["turn"] for r in rows] == [p.turn for p in pivot_set.pivots]
    dataset = to_hf_dataset(pivot_set)
    assert [state_of_row(s) for s in dataset["state"]] == [p.state for p in pivot_set.pivots]


def test_a_pivot_set_written_before_rows_carried_states_still_trains_with_its_trajectories(
    pivot_registry: object, tmp_path: Path
) -> None:
    from pivotgym.cli import main
    from pivotgym.registry import make

    trajectories = list(make("arith/chain-v0").expert_trajectories("train", limit=1))
    old_rows = [_row(n) for n in range(len(trajectories[0].turns()))]
    old_rows = [TurnProfile.from_dict({**r.to_dict(), "trajectory_id": trajectories[0].id}) for r in old_rows]
    traj_file, pivots_file = tmp_path / "t.jsonl", tmp_path / "p.jsonl"
    write_trajectories(traj_file, trajectories)
    write_pivot_set(pivots_file, PivotSet(rule={}, pivots=old_rows))
    with pytest.raises(ValueError, match="--trajectories"):
        load_pivot_states(pivots_file, encode=lambda messages: [0])
    items = load_pivot_states(pivots_file, encode=lambda messages: [0], trajectories=traj_file)
    assert [i.state for i in items] == list(expert_states(trajectories))
    out = tmp_path / "rows.jsonl"
    assert main(["pivots", "export", str(pivots_file), "-o", str(out)]) == 1  # says what to pass
    assert main(["pivots", "export", str(pivots_file), "-t", str(traj_file), "-o", str(out)]) == 0
