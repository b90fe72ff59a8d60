"""Action codecs: reading what a policy wrote, hardened once against hostile text for every domain.

* :mod:`pivotgym.parsing.tool_calls` - the ``<tool_call>`` codec (:func:`parse_action`, :func:`render_calls`,
  :class:`ToolCallCodec` for a domain's narrower language), with bounded JSON decoding (:func:`load_json`);
* :mod:`pivotgym.parsing.answers` - final answers: multiple-choice letters (:func:`read_choice`), loose text
  identity (:func:`normalize_answer`), whether a plain message is one (:func:`message_problem`), fenced
  code (:func:`extract_code`) and a bounded compile check (:func:`python_problem`);
* :mod:`pivotgym.parsing.fences` - fenced blocks, found by a linear scan.

Agent text reaches these in the step's thread, where a backtracking regex would hold the GIL past any
deadline; so everything here is linear in the text (no nested quantifiers; tokenising scanners instead), and
envs cap an action's length before parsing it (:attr:`pivotgym.env.AgentEnv.max_action_chars`).
"""

from pivotgym.parsing.answers import MAX_MESSAGE_CHARS, message_problem, normalize_answer
from pivotgym.parsing.tool_calls import (
    DEFAULT_CODEC,
    FORMAT_HINT,
    MAX_ACTION_CHARS,
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
    "MAX_MESSAGE_CHARS",
    "message_problem",
    "DEFAULT_CODEC",
    "FORMAT_HINT",
    "MAX_ACTION_CHARS",
    "MAX_NESTING",
    "MAX_PYTHON_CHARS",
    "TOOL_CALL_RE",
    "ParseError",
    "ParsedAction",
    "PositionalNames",
    "ToolCallCodec",
    "load_json",
    "nesting_depth",
    "normalize_answer",
    "parse_action",
    "python_call",
    "render_calls",
    "render_message",
]
