"""Reading tool calls out of raw assistant text, and writing them back: the core's ``<tool_call>`` codec.

The codec and its hardening against hostile text live in :mod:`pivotgym.parsing` (every shape BFCL models
write: ``<tool_call>`` blocks, OpenAI/BFCL JSON, python call syntax); this module re-exports it under the
names the tool-use envs and verifiers have always used, with :func:`~pivotgym.parsing.message_problem`, which
decides whether a plain message is a deliberate answer or abstention.
"""

from __future__ import annotations

from pivotgym.parsing import (
    FORMAT_HINT,
    MAX_MESSAGE_CHARS,
    MAX_NESTING,
    MAX_PYTHON_CHARS,
    TOOL_CALL_RE,
    ParsedAction,
    ParseError,
    PositionalNames,
    load_json,
    message_problem,
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
