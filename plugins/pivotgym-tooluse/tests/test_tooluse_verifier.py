"""The functional verifier: credited equivalents, rejected near-misses, typed reasons, and a fuzz."""

from __future__ import annotations

import json
import random
import string

import pytest
from tooluse_helpers import context, expert, multi_env, single_env

from pivotgym.types import ToolCall
from pivotgym_tooluse.matching import match_call
from pivotgym_tooluse.verifier import REASON_CODES, ToolCallExactVerifier, ToolCallVerifier, reason_code

V = ToolCallVerifier()


def tc(name, **args):
    return f"<tool_call>{json.dumps({'name': name, 'arguments': args})}</tool_call>"


def single_ctx(env_id, task_id):
    env = single_env(env_id)
    return context(lambda: single_env(env_id), expert(env, task_id).turn(0))


@pytest.fixture(scope="module")
def mt():
    """Contexts for multi_turn_base_0: turn 0 (cd, mkdir, mv) and turn 1 (the closing message)."""
    traj = expert(multi_env(), "multi_turn_base_0")
    return [context(multi_env, turn) for turn in traj.turns()[:2]]


# ---------------------------------------------------------------------------- single turn
@pytest.mark.parametrize(
    "candidate",
    [
        tc("calculate_triangle_area", height=5, base=10),  # argument order, optional omitted
        tc("calculate_triangle_area", base=10.0, height=5, unit="units"),  # 10.0 for an integer, optional given
        tc("calculate_triangle_area", base=10, height=5, unit=" units "),  # surrounding whitespace
        "calculate_triangle_area(base=10, height=5)",  # python syntax
        '{"name": "calculate_triangle_area", "arguments": "{\\"base\\": 10, \\"height\\": 5}"}',  # OpenAI JSON
    ],
)
def test_single_turn_equivalents_are_credited(candidate):
    verdict = V.verify(single_ctx("tooluse/bfcl-simple-v0", "simple_python_0"), candidate)
    assert verdict.reward == 1.0 and verdict.equivalent, verdict.reason
    assert verdict.reason == "equivalent:structural" and verdict.components["decision"] is True


@pytest.mark.parametrize(
    "candidate,reason",
    [
        (tc("calculate_triangle_area", base=11, height=5), "argument_value"),
        (tc("calculate_triangle_area", base=10.5, height=5), "wrong_type"),
        (tc("calculate_triangle_area", base="10", height=5), "wrong_type"),
        (tc("calculate_triangle_area", base=10, height=5, unit="cm"), "argument_value"),
        ('<tool_call>{"name": "calculate_triangle_area", "arguments": {"base": 10, "height": 5}}', "parse_error"),
        (tc("calculate_triangle_area", base=10), "missing_argument"),
        (tc("calculate_triangle_area", base=10, height=5, color="red"), "unexpected_argument"),
        (tc("calculate_circle_area", base=10, height=5), "function_name"),
        (tc("calculate_triangle_area", base=10, height=5) * 2, "call_count"),
        ("The area is 25 square units.", "decision_mismatch"),
        ('<tool_call>{"name": calculate_triangle_area}</tool_call>', "parse_error"),
    ],
)
def test_single_turn_near_misses_are_rejected_with_a_typed_reason(candidate, reason):
    verdict = V.verify(single_ctx("tooluse/bfcl-simple-v0", "simple_python_0"), candidate)
    assert verdict.reward == 0.0 and not verdict.equivalent
    assert verdict.reason.split(":")[0] == reason


def test_parallel_calls_are_order_free():
    ctx = single_ctx("tooluse/bfcl-parallel-v0", "parallel_0")
    swapped = tc("spotify.play", artist="Maroon 5", duration=15) + tc(
        "spotify.play", artist="Taylor Swift", duration=20
    )
    assert V.verify(ctx, swapped).reward == 1.0
    crossed = tc("spotify.play", artist="Maroon 5", duration=20) + tc(
        "spotify.play", artist="Taylor Swift", duration=15
    )
    assert V.verify(ctx, crossed).reason.startswith("argument_value")


def test_defaults_explicit_or_omitted():
    ctx = single_ctx("tooluse/bfcl-multiple-v0", "multiple_0")
    base = {"side1": 5, "side2": 4, "side3": 3}
    assert V.verify(ctx, tc("triangle_properties.get", **base)).reward == 1.0
    assert V.verify(ctx, tc("triangle_properties.get", **base, get_area=True)).reward == 1.0
    assert V.verify(ctx, tc("triangle_properties.get", **base, get_area=False)).reward == 0.0
    assert V.verify(ctx, tc("circle_properties.get", radius=5)).reason.startswith("function_name")
    schema = {"properties": {"unit": {"type": "string", "default": "celsius"}, "city": {"type": "string"}}}
    assert match_call(ToolCall("w", {"city": "Paris"}), "w", {"city": ["Paris"], "unit": ["celsius"]}, schema).ok
    assert match_call(ToolCall("w", {"city": "Paris", "unit": "celsius"}), "w", {"city": ["Paris"]}, schema).ok
    assert not match_call(ToolCall("w", {"city": "Paris", "unit": "kelvin"}), "w", {"city": ["Paris"]}, schema).ok


def test_irrelevance_credits_a_real_message_only():
    env = single_env("tooluse/bfcl-irrelevance-v0")
    ctx = context(lambda: single_env("tooluse/bfcl-irrelevance-v0"), expert(env, env.tasks("train")[0].id).turn(0))
    assert V.verify(ctx, "Sorry, none of the tools can compute that.").reason == "equivalent:message"
    assert V.verify(ctx, "   ").reason.startswith("empty_message")
    name = env.tasks("train")[0].data["functions"][0]["name"]
    assert V.verify(ctx, tc(name)).reason.startswith("decision_mismatch")


# ---------------------------------------------------------------------------- multi turn
GOLD = [
    ("cd", {"folder": "document"}),
    ("mkdir", {"dir_name": "temp"}),
    ("mv", {"source": "final_report.pdf", "destination": "temp"}),
]


def calls(*pairs):
    return "\n".join(tc(n, **a) for n, a in pairs)


def test_multi_turn_structural_and_execution_equivalents(mt):
    ctx = mt[0]
    assert V.verify(ctx, ctx.expert_text).reason == "equivalent:structural"
    python = "[cd(folder='document'), mkdir(dir_name='temp'), mv(destination='temp', source='final_report.pdf')]"
    assert V.verify(ctx, python).reason == "equivalent:structural"
    # a different call sequence with the same effect: an extra look around before acting
    looked = calls(GOLD[0], ("ls", {}), GOLD[1], ("pwd", {}), GOLD[2])
    verdict = V.verify(ctx, looked)
    assert verdict.reward == 1.0 and verdict.reason == "equivalent:execution"
    assert verdict.components["structural"] is False and verdict.components["execution"] is True
    always = ToolCallVerifier(execute="always").verify(ctx, ctx.expert_text)
    assert always.reason == "equivalent:execution"


@pytest.mark.parametrize(
    "candidate,reason",
    [
        (
            calls(GOLD[0], GOLD[1], ("mv", {"source": "final_report.pdf", "destination": "tmp"})),
            "state_mismatch",
        ),  # wrong value
        (calls(GOLD[0], GOLD[1], ("touch", {"file_name": "temp"})), "state_mismatch"),  # wrong function
        (calls(*GOLD, ("touch", {"file_name": "notes.txt"})), "state_mismatch"),  # extra side effect
        (calls(GOLD[0], GOLD[1]), "state_mismatch"),  # a call missing
        (calls(("mkdir", {"dir_name": "temp"})), "state_mismatch"),
        (calls(("cd", {"folder": "document"}), ("ls", {})), "state_mismatch"),
        ("I moved the file.", "decision_mismatch"),
    ],
)
def test_multi_turn_near_misses_are_rejected(mt, candidate, reason):
    verdict = V.verify(mt[0], candidate)
    assert verdict.reward == 0.0 and verdict.reason.split(":")[0] == reason, verdict.reason


def test_wrong_read_only_function_is_a_result_mismatch():
    traj = expert(multi_env(), "multi_turn_base_1")  # turn 0: ls(a=True)
    ctx = context(multi_env, traj.turn(0))
    assert V.verify(ctx, "ls(a=True)").reward == 1.0
    verdict = V.verify(ctx, "pwd()")
    assert verdict.reward == 0.0 and verdict.reason.startswith("result_mismatch")


def test_closing_turn_wants_a_message(mt):
    assert V.verify(mt[1], "All done, the report is in temp.").reward == 1.0
    assert V.verify(mt[1], tc("ls")).reason.startswith("decision_mismatch")


def test_exact_verifier_is_strict(mt):
    exact = ToolCallExactVerifier()
    ctx = single_ctx("tooluse/bfcl-simple-v0", "simple_python_0")
    assert exact.verify(ctx, ctx.expert_text).reward == 1.0
    assert exact.verify(ctx, "calculate_triangle_area(base=10, height=5, unit='units')").reward == 1.0
    assert exact.verify(ctx, tc("calculate_triangle_area", base=10.0, height=5, unit="units")).reward == 0.0
    assert exact.verify(mt[0], calls(GOLD[0], ("ls", {}), GOLD[1], GOLD[2])).reward == 0.0


# ---------------------------------------------------------------------------- fuzz
def _fuzz_inputs(n, seed=0):
    rng = random.Random(seed)
    pieces = [
        "<tool_call>",
        "</tool_call>",
        "{",
        "}",
        "[",
        "]",
        '"name"',
        '"arguments"',
        ":",
        ",",
        '"cd"',
        '"folder"',
        '"document"',
        "(",
        ")",
        "=",
        "cd",
        "mv",
        "ls",
        "None",
        "1e999",
        "-0",
        "\x00",
        "\\u0000",
        "```json",
        " ",
        "\n",
        "null",
        "NaN",
        '"calculate_triangle_area"',
        '"base"',
        "10",
    ]
    for i in range(n):
        if i % 3 == 0:
            yield "".join(rng.choice(pieces) for _ in range(rng.randint(1, 25)))
        elif i % 3 == 1:
            yield "<tool_call>" + "".join(rng.choice(string.printable) for _ in range(rng.randint(0, 40)))
        else:
            good = tc("calculate_triangle_area", base=10, height=5)
            cut = rng.randint(0, len(good) - 2)
            yield good[:cut] + rng.choice(["", "}", "{", '"', "]]"]) + good[cut + 1 :]


def test_fuzz_malformed_inputs_get_zero_and_a_reason_never_an_exception(mt):
    ctxs = [single_ctx("tooluse/bfcl-simple-v0", "simple_python_0"), mt[0]]
    n = 0
    for i, text in enumerate(_fuzz_inputs(2100)):
        ctx = ctxs[i % 2]
        verdict = V.verify(ctx, text)  # not verify_safely: the verifier itself must not raise
        if text.strip() == ctx.expert_text.strip():
            continue
        assert verdict.reward in (0.0, 1.0) and verdict.reason and reason_code(verdict) in REASON_CODES
        if verdict.reward:  # only a candidate that still reads as the right call may be credited
            assert verdict.reason.startswith("equivalent"), (text, verdict)
        n += 1
    assert n >= 2000
    for bad in (None, 123, b"bytes"):
        assert V.verify(ctxs[0], bad).reward == 0.0  # type: ignore[arg-type]
