"""Hostile and broken input: no tool-use env and no tool-use verifier raises or truncates on any string.

Deep nesting (``"[" * 50000`` used to raise RecursionError in JSON parsing), huge integers (a 400-digit
integer raised OverflowError in the verifier), lone surrogates, NUL, a BOM, an unterminated ``<tool_call>``:
each gets an error observation (or reward 0 with a typed reason) and the episode goes on.
"""

from __future__ import annotations

import json
import time

import pytest
from tooluse_helpers import context, expert, multi_env, single_env

from pivotgym.types import ToolCall
from pivotgym.verify import VerifyContext
from pivotgym_tooluse.parsing import MAX_NESTING, ParseError, parse_action
from pivotgym_tooluse.plugin import SINGLE_TURN
from pivotgym_tooluse.verifier import REASON_CODES, ToolCallExactVerifier, ToolCallVerifier, reason_code

DEEP = 50_000
HUGE = 10**400


def tc(name, **args):
    return f"<tool_call>{json.dumps({'name': name, 'arguments': args})}</tool_call>"


HOSTILE = {
    "deep_list": "[" * DEEP,
    "deep_object": '{"a":' * DEEP,
    "deep_in_tag": "<tool_call>" + "[" * DEEP + "</tool_call>",
    "deep_argument": '<tool_call>{"name": "f", "arguments": {"a": ' + "[" * DEEP + "1" + "]" * DEEP + "}}</tool_call>",
    "deep_string_arguments": json.dumps({"name": "f", "arguments": "[" * DEEP}),
    "deep_python": "f(a=" + "[" * DEEP + ")",
    "parens": "(A)" * 10_000,
    "lone_surrogate": "\ud800 hello there",
    "escaped_surrogate": '<tool_call>{"name": "f", "arguments": {"a": "\\ud800"}}</tool_call>',
    "nul": "\x00",
    "nul_in_call": '<tool_call>{"name": "f\x00", "arguments": {}}</tool_call>',
    "unterminated": '<tool_call>{"name": "f", "arguments": {}}',
    "digits_over_limit": '{"name": "f", "arguments": {"a": ' + "9" * 5000 + "}}",
    "nan_inf": '{"name": "f", "arguments": {"a": NaN, "b": Infinity, "c": -1e999}}',
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_parser_answers_hostile_text_with_a_parse_error_or_a_reading(name):
    start = time.perf_counter()
    try:
        parsed = parse_action(HOSTILE[name])
    except ParseError as exc:
        assert "tool_call" in str(exc)  # the message says how to write a call
    else:
        for call in parsed.calls:
            json.dumps(call.arguments).encode("utf-8")
    assert time.perf_counter() - start < 2.0


def test_nesting_limit_is_generous_for_real_calls():
    nested = "[" * (MAX_NESTING - 3) + "1" + "]" * (MAX_NESTING - 3)
    assert parse_action('{"name": "f", "arguments": {"a": ' + nested + "}}").calls
    with pytest.raises(ParseError, match="nested"):
        parse_action('{"name": "f", "arguments": {"a": ' + "[" * 80 + "]" * 80 + "}}")


def test_bom_prefixed_json_is_a_call_not_a_message():
    parsed = parse_action('\ufeff{"name": "math.factorial", "arguments": {"number": 5}}')
    assert parsed.format == "json" and parsed.calls[0].arguments == {"number": 5}
    assert parse_action('\ufeff<tool_call>{"name": "f", "arguments": {}}</tool_call>').calls[0].name == "f"


@pytest.mark.parametrize("env_id", [*SINGLE_TURN, "tooluse/bfcl-multi-turn-v0"])
def test_every_env_turns_hostile_actions_into_error_observations(env_id):
    env = multi_env() if env_id.endswith("multi-turn-v0") else single_env(env_id)
    task = env.tasks("train")[0]
    for name, text in HOSTILE.items():
        env.reset(options={"task_id": task.id})
        obs, reward, terminated, truncated, info = env.step(text)
        assert info.get("error") != "env_exception", (name, info.get("traceback"))
        # a reason either way: a parse error, a judgement, a failed user turn, or a tool's error result
        tool_error = bool(obs) and str(obs[0].get("content", "")).startswith("Error")
        assert reward == 0.0 and (info.get("error") or info.get("judgement") or "turn_ok" in info or tool_error), name
        if info.get("error"):
            assert obs[0]["content"] and not terminated, name  # an error observation; the episode goes on
            assert not env.done
    # after hostile input the env still takes the expert's action
    env.reset(options={"task_id": task.id})
    env.step(HOSTILE["deep_list"])
    first = env.expert_actions(task)[0]
    _, _, _, _, info = env.step(env.render_action(first))
    assert info.get("error") is None


def test_huge_integers_and_odd_numbers_get_zero_with_a_reason():
    ctx = context(lambda: single_env(), expert(single_env(), "simple_python_0").turn(0))
    for args in ({"base": HUGE, "height": 5}, {"base": 10, "height": 1e308}, {"base": -HUGE, "height": 5}):
        verdict = ToolCallVerifier().verify(ctx, tc("calculate_triangle_area", **args))
        assert verdict.reward == 0.0 and reason_code(verdict) in ("argument_value", "wrong_type")
    verdict = ToolCallVerifier().verify(
        ctx, '{"name": "calculate_triangle_area", "arguments": {"base": NaN, "height": 5}}'
    )
    assert verdict.reward == 0.0 and reason_code(verdict) in ("argument_value", "wrong_type")
    # from expert calls alone, a huge integer against a float expert value
    tools = [
        {
            "type": "function",
            "function": {
                "name": "f",
                "parameters": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]},
            },
        }
    ]
    adhoc = VerifyContext.from_turn(
        "tooluse/bfcl-simple-v0", [], [ToolCall("f", {"x": 1.5})], tools=tools, env_factory=single_env
    )
    assert reason_code(ToolCallVerifier().verify(adhoc, tc("f", x=HUGE))) == "argument_value"
    same = VerifyContext.from_turn(
        "tooluse/bfcl-simple-v0", [], [ToolCall("f", {"x": HUGE})], tools=tools, env_factory=single_env
    )
    assert ToolCallVerifier().verify(same, tc("f", x=HUGE)).reward == 1.0
    assert ToolCallVerifier().verify(same, tc("f", x=HUGE + 1)).reward == 0.0


@pytest.mark.parametrize("verifier", [ToolCallVerifier(), ToolCallExactVerifier()], ids=["functional", "exact"])
def test_verifiers_never_raise_on_hostile_candidates_or_experts(verifier):
    single = context(lambda: single_env(), expert(single_env(), "simple_python_0").turn(0))
    multi = context(multi_env, expert(multi_env(), "multi_turn_base_0").turn(0))
    for ctx in (single, multi):
        for name, text in HOSTILE.items():
            verdict = verifier.verify(ctx, text)
            assert verdict.reward == 0.0, name
            assert reason_code(verdict) in REASON_CODES, (name, verdict.reason)
    broken = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "[" * DEEP}}],
    }
    ctx = VerifyContext.from_turn("tooluse/bfcl-simple-v0", [], broken, env_factory=single_env)
    verdict = verifier.verify(ctx, tc("f"))
    assert verdict.reward == 0.0 and reason_code(verdict) == "bad_expert"
