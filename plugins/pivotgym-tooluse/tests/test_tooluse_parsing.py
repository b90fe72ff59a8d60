"""The action parser: every supported call format, plain messages, malformed calls, and a fuzz."""

from __future__ import annotations

import pytest

from pivotgym.types import ToolCall, assistant_message
from pivotgym_tooluse.parsing import ParseError, message_problem, parse_action, render_calls, render_message

CALL = ToolCall("math.factorial", {"number": 5})


@pytest.mark.parametrize(
    "text",
    [
        '<tool_call>{"name": "math.factorial", "arguments": {"number": 5}}</tool_call>',
        'Sure.\n<tool_call>\n{"name": "math.factorial", "arguments": "{\\"number\\": 5}"}\n</tool_call>',
        '{"name": "math.factorial", "arguments": {"number": 5}}',
        '[{"name": "math.factorial", "parameters": {"number": 5}}]',
        '{"tool_calls": [{"type": "function", '
        '"function": {"name": "math.factorial", "arguments": "{\\"number\\": 5}"}}]}',
        '```json\n[{"function": "math.factorial", "parameters": {"number": 5}}]\n```',
        "math.factorial(number=5)",
        "[math.factorial(number=5)]",
    ],
)
def test_every_format_reads_the_same_call(text):
    parsed = parse_action(text)
    assert [(c.name, c.arguments) for c in parsed.calls] == [(CALL.name, CALL.arguments)]


def test_parallel_calls_and_prose_are_kept():
    text = (
        'Let me check.\n<tool_call>{"name": "a", "arguments": {}}</tool_call>\n'
        '<tool_call>{"name": "b", "arguments": {"x": [1, 2]}}</tool_call>'
    )
    parsed = parse_action(text)
    assert [c.name for c in parsed.calls] == ["a", "b"]
    assert parsed.content == "Let me check."
    py = parse_action("[a(), b(x=[1, 2], flag=true)]")
    assert py.calls[1].arguments == {"x": [1, 2], "flag": True}


def test_positional_arguments_need_names():
    assert parse_action("sort('f.txt')", positional={"sort": ["file_name"]}.get).calls[0].arguments == {
        "file_name": "f.txt"
    }
    with pytest.raises(ParseError, match="param=value"):
        parse_action("sort('f.txt')")


def test_plain_message_is_an_action():
    parsed = parse_action("I cannot help with that (no tool fits).")
    assert parsed.is_message and parsed.content.startswith("I cannot")


@pytest.mark.parametrize(
    "text",
    [
        "<tool_call>{not json</tool_call>",
        "<tool_call></tool_call>",
        '{"name": 3}',
        "[1, 2",
        '{"arguments": {"a": 1}}',
        '<tool_call>{"name": "f", "arguments": [1]}</tool_call>',
        "f(x=open('a'))",
    ],
)
def test_malformed_calls_raise_a_parse_error_with_a_hint(text):
    with pytest.raises(ParseError, match="tool_call"):
        parse_action(text)


def test_render_round_trips():
    msg = assistant_message("", [CALL, ToolCall("g", {"s": "ü", "n": None})])
    text = render_message(msg)
    assert text == render_calls([CALL, ToolCall("g", {"s": "ü", "n": None})])
    assert [(c.name, c.arguments) for c in parse_action(text).calls] == [
        ("math.factorial", {"number": 5}),
        ("g", {"s": "ü", "n": None}),
    ]


def test_message_problem():
    assert message_problem("Done.") is None
    assert message_problem("") and message_problem("\x00\x1b[2J\x07") and message_problem("a" * 10_000)
