"""verl: the parquet written from a pivot set reads back with pandas and pyarrow, and compute_score (verl's
reward-function signature) scores the expert's action 1 and a wrong one 0 from each row's own state; in
.venv-verl (``make verl``), verl 0.9.1's own reward manager does the same over a real batch."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from core_helpers import mixed_profiles

from pivotgym.integrations.verl import compute_score, write_verl_parquet
from pivotgym.jsonl import write_pivot_set, write_trajectories
from pivotgym.pivot.formats import import_nemo_rows
from pivotgym.types import PivotSet

FOREIGN = {  # a NeMo-Gym row from elsewhere: judged against its own tools
    "trajectory_id": 1,
    "responses_create_params": {
        "input": [{"role": "user", "content": "Book 2 nights in Oslo."}],
        "tools": [
            {
                "type": "function",
                "name": "book_room",
                "description": "book a hotel room",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}, "nights": {"type": "integer"}},
                    "required": ["city", "nights"],
                },
                "strict": False,
            }
        ],
    },
    "expected_action": {"type": "function_call", "name": "book_room", "arguments": '{"city": "Oslo", "nights": 2}'},
}


def test_parquet_round_trip_and_compute_score(tmp_path: Path) -> None:
    import pandas as pd
    import pyarrow.parquet as pq

    from pivotgym.registry import make

    trajectories = []
    for env_id in ("general/navigate-v0", "tooluse/bfcl-parallel-v0"):
        env = make(env_id)
        trajectories += list(env.expert_trajectories(next(iter(env.splits)), limit=1))
    trajectories += import_nemo_rows([FOREIGN], env_id="tooluse/bfcl-simple-v0")
    pivots, trajs = tmp_path / "pivots.jsonl", tmp_path / "trajectories.jsonl"
    write_pivot_set(pivots, PivotSet(rule={}, pivots=mixed_profiles(trajectories)))
    write_trajectories(trajs, trajectories)
    out = tmp_path / "verl" / "train.parquet"
    assert write_verl_parquet(out, pivots, trajs) == 3

    table = pq.read_table(out)
    assert {"data_source", "prompt", "ability", "reward_model", "extra_info"} <= set(table.column_names)
    frame = pd.read_parquet(out)
    assert list(frame["data_source"]) == [t.env_id for t in trajectories]
    wrong_answers = {"general/navigate-v0": None, "tooluse/bfcl-parallel-v0": "I cannot help with that."}
    for _, row in frame.iterrows():
        prompt = list(row["prompt"])
        assert prompt[-1]["role"] == "user" and all(set(m) == {"role", "content"} for m in prompt)
        assert row["reward_model"]["style"] == "rule"
        extra = dict(row["extra_info"])
        expert = row["reward_model"]["ground_truth"]
        right = compute_score(row["data_source"], expert, expert, extra)
        assert (right["score"], right["undecided"]) == (1.0, 0.0), right
        wrong = wrong_answers.get(row["data_source"]) or ("False" if expert.strip() == "True" else "True")
        if row["data_source"] == "tooluse/bfcl-simple-v0":  # the foreign row: an argument of the wrong type
            wrong = '<tool_call>{"name": "book_room", "arguments": {"city": "Oslo", "nights": "two"}}</tool_call>'
            assert json.loads(extra["tools_json"])[0]["function"]["name"] == "book_room"
        scored = compute_score(row["data_source"], wrong, expert, extra)
        assert (scored["score"], scored["undecided"]) == (0.0, 0.0), (wrong, scored)
        assert set(scored) == set(right) == {"score", "undecided", "reason"}


def test_a_row_without_our_state_is_an_error() -> None:
    with pytest.raises(ValueError, match="extra_info.state"):
        compute_score("openai/gsm8k", "42", "42", {"index": 0})


MULTI_TURN = "tooluse/bfcl-multi-turn-v0"


def verl_python() -> Path | None:
    """The interpreter of the verl venv: ``$PIVOTGYM_VERL_PYTHON``, or ``.venv-verl`` (``make verl``)."""
    explicit = os.environ.get("PIVOTGYM_VERL_PYTHON")
    if explicit:
        return Path(explicit)
    default = Path(__file__).parents[2] / ".venv-verl" / "bin" / "python"
    return default if default.exists() else None


@pytest.mark.verl
def test_verls_own_reward_manager_scores_a_real_batch_with_our_compute_score(tmp_path: Path) -> None:
    """verl's config composed from its own YAML with reward.custom_reward_function pointing at our module,
    load_reward_manager, a DataProto of chat-templated prompts and tokenised responses (each row's expert action
    and a wrong one), the naive manager's run_single per sample and assemble_rm_scores (verl_reward_check.py)."""
    python = verl_python()
    if python is None:
        pytest.skip("no verl venv: `make verl` builds .venv-verl")
    import pivotgym.integrations.verl as ours
    from pivotgym.registry import make
    from pivotgym.sampling.models import resolve_model

    trajectories = []
    for env_id in ("general/navigate-v0", MULTI_TURN):
        env = make(env_id)
        trajectories += list(env.expert_trajectories(next(iter(env.splits)), limit=1))
    pivots, trajs = tmp_path / "pivots.jsonl", tmp_path / "trajectories.jsonl"
    write_pivot_set(pivots, PivotSet(rule={}, pivots=mixed_profiles(trajectories)))
    write_trajectories(trajs, trajectories)
    parquet = tmp_path / "train.parquet"
    assert write_verl_parquet(parquet, pivots, trajs) >= 2
    import pandas as pd

    frame = pd.read_parquet(parquet)
    navigate, tools = (int(frame.index[frame["data_source"] == e][0]) for e in ("general/navigate-v0", MULTI_TURN))
    navigate_expert = frame.iloc[navigate]["reward_model"]["ground_truth"]
    responses = [
        [navigate, navigate_expert],
        [navigate, "False" if navigate_expert.strip() == "True" else "True"],
        [tools, frame.iloc[tools]["reward_model"]["ground_truth"]],  # a tool call, as the env renders it
        [tools, "I cannot help with that."],
    ]
    job = {"parquet": str(parquet), "model": resolve_model("smollm2-135m", progress=False), "responses": responses}
    job["score_path"] = str(Path(ours.__file__))
    script = Path(__file__).with_name("verl_reward_check.py")
    done = subprocess.run(
        [str(python), str(script)], input=json.dumps(job), capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["manager"] == "NaiveRewardManager"
    assert out["scores"] == [1.0, 0.0, 1.0, 0.0], out
    assert out["rm_scores_row_sums"] == out["scores"]  # one score per sample, at its last response token
    assert all(e["undecided"] == 0.0 for e in out["extra"]), out["extra"]
