"""Reading tool calls out of raw assistant text, and writing them back: the core's ``<tool_call>`` codec.

The codec and its hardening against hostile text live in :mod:`pivotgym.parsing` (every shape BFCL models
write: ``<tool_call>`` blocks, OpenAI/BFCL JSON, python call syntax); this module re-exports it under the
names the tool-use envs and verifiers have always used, and adds what only tool use needs:
:func:`message_problem`, which decides whether a plain message is a deliberate answer or abstention.
"""

from __future__ import annotations

import re

from pivotgym.parsing import (
    FORMAT_HINT,
    MAX_NESTING,
    MAX_PYTHON_CHARS,
    TOOL_CALL_RE,
    ParsedAction,
    ParseError,
    PositionalNames,
    load_json,
    nesting_depth,
    parse_action,
    python_call,
    render_calls,
    render_message,
)

__all__ = [
    "FORMAT_HINT",
    "MAX_MESSAGE_CHARS",
    "MAX_NESTING",
    "MAX_PYTHON_CHARS",
    "TOOL_CALL_RE",
    "ParseError",
    "ParsedAction",
    "PositionalNames",
    "load_json",
    "message_problem",
    "nesting_depth",
    "parse_action",
    "python_call",
    "render_calls",
    "render_message",
]

_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07?")
_CONTROL_RE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_WORD_RE = re.compile(r"[^\W\d_]{2,}")
MAX_MESSAGE_CHARS = 4000


def message_problem(text: str) -> str | None:
    """Why ``text`` is not a real plain message (None when it is): a message must contain a word of two or
    more letters, must not be one character repeated, and must stay under ``MAX_MESSAGE_CHARS``. This keeps
    empty replies, terminal noise and padding from counting as a deliberate answer or abstention."""
    cleaned = _CONTROL_RE.sub("", _ANSI_RE.sub("", text or "")).strip()
    if not cleaned:
        return "the message is empty"
    if len(cleaned) > MAX_MESSAGE_CHARS:
        return f"the message is longer than {MAX_MESSAGE_CHARS} characters"
    if len(set(cleaned)) == 1 or not _WORD_RE.search(cleaned):
        return "the message has no words"
    return None
