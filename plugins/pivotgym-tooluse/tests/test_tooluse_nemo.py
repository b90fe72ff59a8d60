"""NeMo-Gym pivot rows are judged by the same layered tool-use verifier, through the public API."""

from __future__ import annotations

import json

from tooluse_helpers import expert, single_env

from pivotgym.pivot.formats import export_nemo_rows, nemo_context, verify_nemo_row
from pivotgym.types import TurnProfile
from pivotgym_tooluse.verifier import ToolCallVerifier, reason_code

TOOLS = [
    {
        "type": "function",
        "name": "book_room",
        "description": "Book a hotel room.",
        "parameters": {
            "type": "object",
            "required": ["city", "nights"],
            "properties": {
                "city": {"type": "string"},
                "nights": {"type": "integer"},
                "budget": {"type": "number"},
                "breakfast": {"type": "boolean", "default": False},
            },
        },
    }
]
ROW = {
    "trajectory_id": 7,
    "info": {"turn": 0},
    "responses_create_params": {
        "input": [{"role": "user", "content": "Two nights in Oslo, 150 a night max."}],
        "tools": TOOLS,
    },
    "expected_action": {
        "type": "function_call",
        "name": "book_room",
        "arguments": json.dumps({"city": "Oslo", "nights": 2, "budget": 150.0}),
    },
    "agent_ref": {"name": "hotel_agent"},
}


def tc(name, **args):
    return f"<tool_call>{json.dumps({'name': name, 'arguments': args})}</tool_call>"


def test_a_foreign_row_is_judged_from_its_expected_action_and_tools():
    ctx = nemo_context(ROW, env_id="tooluse/bfcl-simple-v0")
    assert ctx.tools and ctx.known_task() is None
    cases = [
        (tc("book_room", budget=150, nights=2, city="Oslo"), 1.0, "equivalent:structural"),
        (tc("book_room", city="Oslo", nights=2, budget=150.0, breakfast=False), 1.0, "equivalent:structural"),
        (tc("book_room", city="Oslo", nights="2", budget=150.0), 0.0, "wrong_type"),
        (tc("book_room", city="Oslo", nights=3, budget=150.0), 0.0, "argument_value"),
        (tc("book_room", city="Oslo", budget=150.0), 0.0, "missing_argument"),
        ("I booked it.", 0.0, "decision_mismatch"),
        ("[" * 50_000, 0.0, "parse_error"),
    ]
    for candidate, reward, code in cases:
        verdict = verify_nemo_row(ROW, candidate, env_id="tooluse/bfcl-simple-v0")
        assert (verdict.reward, reason_code(verdict)) == (reward, code), (candidate, verdict.reason)
        assert verdict.components["code"] == code


def test_an_exported_row_keeps_its_task_and_is_judged_like_the_env_turn():
    env = single_env()
    traj = expert(env, "simple_python_0")
    turn = traj.turn(0)
    profile = TurnProfile(
        trajectory_id=traj.id,
        turn=0,
        env_id=traj.env_id,
        task_id=traj.task_id,
        k=2,
        rewards=[1.0, 0.0],
        mean=0.5,
        var=0.25,
        reasons=["equivalent", "parse_error"],
        reference={},
        verifier={"name": "tooluse/functional"},
        key="k",
    )
    [row] = export_nemo_rows([profile], [traj], with_tools=False)
    text = env.render_action(turn.expert)
    verdict = verify_nemo_row(row, text, verifier=ToolCallVerifier())
    assert verdict.reward == 1.0 and verdict.components["layer"] == "answers"
    direct = ToolCallVerifier().verify(nemo_context(row), tc("calculate_triangle_area", base=10, height=5, unit="cm"))
    assert reason_code(direct) == "argument_value"


def test_imported_rows_are_profiled_and_trained_against_their_own_tools():
    """The profiler's and the trainers' verifier contexts carry the imported row's functions: without them an
    explicit ``breakfast=False`` (the schema's default) could not be told from an unexpected argument."""
    from pivotgym.pivot.formats import import_nemo_rows
    from pivotgym.pivot.profile import VerifyTask, verify_candidates
    from pivotgym.train.states import StateScorer, states_from_trajectories

    [traj] = import_nemo_rows([ROW], env_id="tooluse/bfcl-simple-v0")
    [state] = states_from_trajectories([traj], encode=lambda messages: [0])
    assert [t["function"]["name"] for t in state.tools] == ["book_room"]
    at_default = tc("book_room", city="Oslo", nights=2, budget=150.0, breakfast=False)
    wrong_type = tc("book_room", city="Oslo", nights="2", budget=150.0)
    assert StateScorer().score(state, [at_default, wrong_type]) == [1.0, 0.0]
    judged = verify_candidates(VerifyTask("tooluse/functional", state.state, (at_default, wrong_type)))
    assert [j["reward"] for j in judged] == [1.0, 0.0]
