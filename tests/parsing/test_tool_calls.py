"""The core ``<tool_call>`` codec: the shapes it reads, a domain's narrower codec, and hostile input answered
with a ParseError (never another exception, never slowly) whatever the options."""

import json
import random
import string
import time

import pytest

from pivotgym.errors import ParseError, PivotgymError
from pivotgym.parsing import (
    FORMAT_HINT,
    MAX_NESTING,
    ToolCallCodec,
    load_json,
    parse_action,
    python_call,
    render_calls,
    render_message,
)
from pivotgym.types import ToolCall, assistant_message

CALL = '{"name": "view", "arguments": {"path": "a.py", "start": 2}}'
NARROW = ToolCallCodec(
    hint="Write one <tool_call> block.",
    python=False,
    fences_in_prose=True,
    json_constants=False,
    require_closing_tag=False,
)
DEEP = 50_000
HOSTILE = [
    "[" * DEEP,
    '{"a":' * DEEP,
    "<tool_call>" + "[" * DEEP + "</tool_call>",
    "f(a=" + "[" * DEEP + ")",
    "(A)" * 10_000,
    "\ud800 hi",
    '<tool_call>{"name": "f", "arguments": {"a": "\\ud800"}}</tool_call>',
    '{"name": "f", "arguments": {"a": ' + "9" * 5000 + "}}",
    "```json\n" + "[" * DEEP + "\n```",
    "prose\n```json\n" + "{" * DEEP + "}\n```",
    '<tool_call>{"name": "f\x00", "arguments": {}}</tool_call>',
    json.dumps({"name": "f", "arguments": "[" * DEEP}),
    "\x00" * 100,
]


def _read(codec, text):
    return [(c.name, c.arguments) for c in codec.parse(text).calls]


def test_the_default_codec_reads_every_shape_and_round_trips():
    want = [("view", {"path": "a.py", "start": 2})]
    for text in (
        f"<tool_call>{CALL}</tool_call>",
        CALL,
        f"[{CALL}]",
        f"```json\n{CALL}\n```",
        '{"tool_calls": [{"function": {"name": "view", "arguments": "{\\"path\\": \\"a.py\\", \\"start\\": 2}"}}]}',
        "view(path='a.py', start=2)",
    ):
        assert _read(ToolCallCodec(), text) == want, text
    calls = [ToolCall("view", {"path": "a.py", "start": 2}), ToolCall("g", {"s": "ü"})]
    text = render_message(assistant_message("Looking.", calls))
    assert text == render_calls(calls, "Looking.") and parse_action(text).content == "Looking."
    assert [(c.name, c.arguments) for c in parse_action(text).calls] == [(c.name, c.arguments) for c in calls]
    assert python_call(calls[0]) == "view(path='a.py', start=2)"


def test_a_narrow_codec_reads_its_domains_language_only():
    assert NARROW.parse("view(path='a.py')").is_message  # no python syntax
    assert _read(NARROW, f"I will look first.\n```json\n{CALL}\n```\nthen edit.") == [
        ("view", {"path": "a.py", "start": 2})
    ]
    assert NARROW.parse(f"I will look first.\n```json\n{CALL}\n```").content == "I will look first."
    assert ToolCallCodec().parse(f"I will look first.\n```json\n{CALL}\n```").is_message  # the default: prose
    assert _read(NARROW, f"<tool_call>{CALL}") == [("view", {"path": "a.py", "start": 2})]  # cut by a stop string
    with pytest.raises(ParseError, match="without a closing"):
        ToolCallCodec().parse(f"<tool_call>{CALL}")
    with pytest.raises(ParseError, match="NaN is not a JSON number") as info:
        NARROW.parse('{"name": "view", "arguments": {"start": NaN}}')
    assert str(info.value).endswith("Write one <tool_call> block.")  # the domain's own fix-it hint
    assert ToolCallCodec().parse('{"name": "view", "arguments": {"start": NaN}}').calls[0].name == "view"


@pytest.mark.parametrize("codec", [ToolCallCodec(), NARROW], ids=["default", "narrow"])
def test_hostile_text_gets_a_parse_error_or_a_reading(codec):
    for text in HOSTILE:
        start = time.perf_counter()
        try:
            parsed = codec.parse(text)
        except ParseError as exc:
            assert "<tool_call>" in str(exc)
        else:
            for call in parsed.calls:
                json.dumps(call.arguments).encode("utf-8")
        assert time.perf_counter() - start < 2.0, text[:40]


@pytest.mark.parametrize("codec", [ToolCallCodec(), NARROW], ids=["default", "narrow"])
def test_fuzz_raises_nothing_but_parse_error(codec):
    rng = random.Random(1)
    pieces = [
        "<tool_call>",
        "</tool_call>",
        "{",
        "}",
        "[",
        "]",
        "(",
        ")",
        '"name"',
        '"arguments"',
        ":",
        ",",
        "f",
        "=",
        "1",
        "'x'",
        "\\",
        "\x00",
        "```",
        "json",
        " ",
        "\n",
        "null",
        "NaN",
        "a.b",
        "**k",
    ]
    for i in range(1500):
        pool = pieces if i % 2 else list(string.printable)
        text = "".join(rng.choice(pool) for _ in range(rng.randint(0, 40)))
        try:
            parsed = codec.parse(text)
        except ParseError:
            continue
        for call in parsed.calls:  # what is read is plain JSON data, whatever the text was
            json.dumps(call.arguments)


def test_load_json_bounds_nesting_and_names_where():
    nested = "[" * (MAX_NESTING - 1) + "]" * (MAX_NESTING - 1)
    assert load_json(nested, "x")
    with pytest.raises(ParseError, match=r"^the file is nested 80 levels deep") as info:
        load_json("[" * 80, "the file")
    assert isinstance(info.value, PivotgymError) and isinstance(info.value, ValueError)
    assert str(info.value).endswith(FORMAT_HINT)


def test_both_plugins_read_through_the_core_codec():
    tooluse = pytest.importorskip("pivotgym_tooluse.parsing")
    swe = pytest.importorskip("pivotgym_swe.tools")
    assert tooluse.parse_action is parse_action and tooluse.ParseError is ParseError
    assert isinstance(swe.CODEC, ToolCallCodec) and swe.CODEC.hint == swe.FORMAT_HINT
    call = swe.parse_tool_call(f"Let me look.\n```json\n{CALL}\n```")
    assert (call.name, call.arguments) == ("view", {"path": "a.py", "start": 2})
    msg = assistant_message("", [call])
    assert swe.render_tool_call(msg) == render_calls([call])
