"""NeMo-Gym pivot rows both ways, validated against NeMo-Gym 0.7's own pydantic row models.

NeMo-Gym needs Python >= 3.13 and pivotgym runs on 3.11, so the validation runs ``nemo_gym_rows_check.py`` in
a subprocess with NeMo-Gym's interpreter: ``$PIVOTGYM_NEMO_GYM_PYTHON``, or the venv that
``examples/integrations/nemo_gym_venv.sh`` builds under the pivotgym cache. Without one those tests skip and
say so; the shape tests here run everywhere.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from core_helpers import mixed_profiles, nemo_gym_python

from pivotgym.pivot.formats import export_nemo_rows, import_nemo_rows
from pivotgym.types import Trajectory

HERE = Path(__file__).parent
CHECK = HERE / "nemo_gym_rows_check.py"
#: one env per expected-action type NeMo-Gym knows: parallel calls, multi-turn calls with tool outputs in
#: the input, a single call, and a text message
ENVS = ("tooluse/bfcl-parallel-v0", "tooluse/bfcl-multi-turn-v0", "tooluse/bfcl-simple-v0", "general/arithmetic-v0")


def validate(rows: list[dict[str, Any]], tmp_path: Path) -> list[dict[str, Any]]:
    """NeMo-Gym's verdict on each row (``{"ok": bool, "error": ...}``), from its own models."""
    python = nemo_gym_python()
    if python is None:
        pytest.skip("no NeMo-Gym 0.7 interpreter: run examples/integrations/nemo_gym_venv.sh")
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    done = subprocess.run(
        [str(python), str(CHECK), str(path)], capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path
    )  # in tmp_path: whatever NeMo-Gym writes into its working directory stays out of the checkout
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines()]


def exported_rows() -> tuple[list[Trajectory], list[dict[str, Any]]]:
    from pivotgym.registry import make

    trajectories = []
    for env_id in ENVS:
        env = make(env_id)
        trajectories += list(env.expert_trajectories(next(iter(env.splits)), limit=1))
    rows = json.loads(json.dumps(export_nemo_rows(mixed_profiles(trajectories), trajectories)))
    return trajectories, rows


FOREIGN_BATCH = {
    "trajectory_id": 3,
    "responses_create_params": {
        "input": [
            {"role": "system", "content": "Use the tools.", "type": "message"},
            {"role": "user", "content": "Weather in Paris and Rome?", "type": "message"},
        ],
        "tools": [
            {
                "type": "function",
                "name": "get_weather",
                "description": "weather of one city",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                    "additionalProperties": False,
                },
                "strict": True,
            }
        ],
    },
    "expected_action": {
        "type": "function_call_batch",
        "calls": [
            {"type": "function_call", "name": "get_weather", "arguments": '{"city": "Paris"}'},
            {"type": "function_call", "name": "get_weather", "arguments": '{"city": "Rome"}'},
        ],
    },
}


def test_every_action_type_is_exported_in_nemo_gyms_shape() -> None:
    trajectories, rows = exported_rows()
    kinds = {r["expected_action"]["type"] for r in rows}
    assert kinds == {"function_call_batch", "function_call", "message"}
    for row in rows:
        action = row["expected_action"]
        if action["type"] == "function_call_batch":
            assert len(action["calls"]) >= 2 and all(c["type"] == "function_call" for c in action["calls"])
            assert all(isinstance(c["arguments"], str) for c in action["calls"])
        for tool in row["responses_create_params"]["tools"]:
            assert tool["type"] == "function" and "strict" in tool and "function" not in tool
    # and back: every state comes home with its expert message and its tools
    back = import_nemo_rows(rows)
    for row, trajectory in zip(rows, back):
        ours = row["metadata"]["pivotgym"]
        original = next(t for t in trajectories if t.id == ours["trajectory_id"]).turn(ours["turn"])
        assert trajectory.turns()[-1].expert == original.expert
        assert trajectory.turns()[-1].prefix == original.prefix
        assert bool(trajectory.metadata.get("tools")) == bool(row["responses_create_params"]["tools"])


def test_a_foreign_batch_row_without_ref_message_round_trips() -> None:
    [trajectory] = import_nemo_rows([FOREIGN_BATCH], env_id="tooluse/bfcl-parallel-v0")
    expert = trajectory.turns()[-1].expert
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in expert["tool_calls"]] == [
        ("get_weather", {"city": "Paris"}),
        ("get_weather", {"city": "Rome"}),
    ]
    [row] = export_nemo_rows(mixed_profiles([trajectory]), [trajectory])
    assert row["responses_create_params"]["tools"] == FOREIGN_BATCH["responses_create_params"]["tools"]
    assert [(c["name"], c["arguments"]) for c in row["expected_action"]["calls"]] == [
        (c["name"], c["arguments"]) for c in FOREIGN_BATCH["expected_action"]["calls"]
    ]


@pytest.mark.nemo_gym
def test_exported_rows_validate_against_nemo_gyms_own_models(tmp_path: Path) -> None:
    _, rows = exported_rows()
    [trajectory] = import_nemo_rows([FOREIGN_BATCH], env_id="tooluse/bfcl-parallel-v0")
    rows += export_nemo_rows(mixed_profiles([trajectory]), [trajectory])
    verdicts = validate(rows, tmp_path)
    assert len(verdicts) == len(rows)
    bad = [(r["expected_action"]["type"], v["error"][:400]) for r, v in zip(rows, verdicts) if not v["ok"]]
    assert not bad, bad


@pytest.mark.nemo_gym
def test_nemo_gyms_models_reject_the_old_shapes(tmp_path: Path) -> None:
    """The validator can fail: the bare list parallel calls used to be exported as, and a tool without
    ``strict``, are both rejected by NeMo-Gym's models."""
    _, rows = exported_rows()
    batch = next(r for r in rows if r["expected_action"]["type"] == "function_call_batch")
    bare_list = {**batch, "expected_action": batch["expected_action"]["calls"]}
    params = batch["responses_create_params"]
    no_strict = {
        **batch,
        "responses_create_params": {
            **params,
            "tools": [{k: v for k, v in t.items() if k != "strict"} for t in params["tools"]],
        },
    }
    verdicts = validate([batch, bare_list, no_strict], tmp_path)
    assert [v["ok"] for v in verdicts] == [True, False, False]
    assert "expected_action" in verdicts[1]["error"] and "strict" in verdicts[2]["error"]
