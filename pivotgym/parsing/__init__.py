"""Action codecs: reading what a policy wrote, hardened once against hostile text for every domain.

* :mod:`pivotgym.parsing.tool_calls` - the ``<tool_call>`` codec (:func:`parse_action`, :func:`render_calls`,
  :class:`ToolCallCodec` for a domain's narrower language), with bounded JSON decoding (:func:`load_json`).
"""

from pivotgym.parsing.tool_calls import (
    DEFAULT_CODEC,
    FORMAT_HINT,
    MAX_NESTING,
    MAX_PYTHON_CHARS,
    TOOL_CALL_RE,
    ParsedAction,
    ParseError,
    PositionalNames,
    ToolCallCodec,
    load_json,
    nesting_depth,
    parse_action,
    python_call,
    render_calls,
    render_message,
)

__all__ = [
    "DEFAULT_CODEC",
    "FORMAT_HINT",
    "MAX_NESTING",
    "MAX_PYTHON_CHARS",
    "TOOL_CALL_RE",
    "ParseError",
    "ParsedAction",
    "PositionalNames",
    "ToolCallCodec",
    "load_json",
    "nesting_depth",
    "parse_action",
    "python_call",
    "render_calls",
    "render_message",
]
