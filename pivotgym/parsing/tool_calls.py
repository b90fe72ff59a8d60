"""The ``<tool_call>`` codec: reading tool calls out of raw assistant text, and writing them back.

A policy may answer in any of three common shapes; all are read leniently:

* ``<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>`` - one block per call (the canonical form
  :func:`render_calls` writes, so expert texts round-trip);
* OpenAI-style JSON: ``{"name": ..., "arguments": ...}``, a list of those, ``{"tool_calls": [...]}`` with
  ``{"function": {"name", "arguments"}}`` items (``arguments`` may be a JSON string), BFCL's
  ``{"function": "f", "parameters": {...}}``; optionally inside a fenced code block;
* Python call syntax: ``f(a=1)``, ``[f(a=1), g(b="x")]``, dotted names ``math.factorial(number=5)``.

Anything else is a plain message (:attr:`ParsedAction.is_message`); whether a message is a valid action is
the env's decision. Text that clearly tries to call a tool but cannot be read raises
:class:`~pivotgym.errors.ParseError` with a message that says how to write the call; so does every hostile
or broken input (a ``<tool_call>`` without its ``</tool_call>``, nesting deeper than :data:`MAX_NESTING`,
integers beyond Python's digit limit, lone surrogates). The parser never raises anything else: a leading
byte-order mark is dropped, and JSON nesting is measured before it is decoded, so no input reaches a
recursion limit.

Every step is linear in the length of the text (the parser runs in the step's thread, and a regex engine
that backtracks holds the GIL, so the step deadline could not fire): the regexes left have no nested
quantifiers, fences are found by :mod:`pivotgym.parsing.fences`, and replies over :data:`MAX_ACTION_CHARS`
(:attr:`ToolCallCodec.max_chars`) are refused before any of it.

A domain that reads a narrower language makes its own :class:`ToolCallCodec` (no python syntax, fenced JSON
inside prose, NaN refused, its own fix-it hint) and checks the calls against its tools afterwards.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pivotgym.errors import ParseError
from pivotgym.parsing.fences import json_fences, unfence
from pivotgym.types import Message, ToolCall, tool_calls_of

__all__ = [
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
    "parse_action",
    "python_call",
    "render_calls",
    "render_message",
]

TOOL_CALL_RE = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)
#: the deepest bracket nesting a call may have (BFCL's deepest argument is a handful of levels)
MAX_NESTING = 64
#: python-syntax calls longer than this are not parsed (``ast`` work grows with the text)
MAX_PYTHON_CHARS = 20_000
#: the longest reply a codec reads by default (:attr:`ToolCallCodec.max_chars`); also the default of
#: :attr:`pivotgym.env.AgentEnv.max_action_chars`, the cap every env applies before it parses an action
MAX_ACTION_CHARS = 100_000
FORMAT_HINT = (
    'Write each call as <tool_call>{"name": "function_name", "arguments": {"param": value}}</tool_call>, '
    "one block per call, or reply with a plain message."
)

_BOM = "\ufeff"
_CALL_START_RE = re.compile(r"^\[?\s*[A-Za-z_][\w.]*\(")
_NAME_RE = re.compile(r"^[A-Za-z_][\w.\-]*$")
_PY_LITERAL_NAMES = {"true": True, "false": False, "null": None, "none": None}

#: maps a function name to its parameter names in order, so positional python-syntax arguments get names
PositionalNames = Callable[[str], Sequence[str] | None]


@dataclass
class ParsedAction:
    """The reading of one assistant text: tool calls (possibly none) and the prose around them."""

    calls: list[ToolCall] = field(default_factory=list)
    content: str = ""
    format: str = "message"  # "tool_call" | "json" | "python" | "message"

    @property
    def is_message(self) -> bool:
        return not self.calls


def nesting_depth(text: str) -> int:
    """The deepest ``[``/``{``/``(`` nesting of ``text`` outside JSON/python string literals (linear, no
    recursion), so that deep input is refused before a recursive decoder sees it."""
    depth = deepest = 0
    quote = ""
    escaped = False
    for ch in text:
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch in "[{(":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]})":
            depth = max(0, depth - 1)
    return deepest


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


@dataclass(frozen=True)
class ToolCallCodec:
    """How one domain reads and writes tool calls. The defaults read every shape in the module docstring.

    ``hint`` ends every :class:`ParseError` message (say how to write a call in your domain); ``python``
    reads python call syntax; ``fences_in_prose`` reads fenced JSON blocks inside prose as calls (by default
    only a reply that is one fenced block); ``json_constants`` accepts ``NaN``/``Infinity``;
    ``require_closing_tag`` refuses a ``<tool_call>`` without its ``</tool_call>`` (off: the block runs to
    the end of the text, e.g. a reply cut by a stop string); ``max_chars`` refuses longer replies before any
    parsing (None: no cap; every step of parsing is linear in the text, but a verifier that reads a
    candidate directly, outside an env's step, should still not spend a second on a megabyte)."""

    hint: str = FORMAT_HINT
    python: bool = True
    fences_in_prose: bool = False
    json_constants: bool = True
    require_closing_tag: bool = True
    max_chars: int | None = MAX_ACTION_CHARS

    # ------------------------------------------------------------------------------ reading
    def parse(self, text: Any, positional: PositionalNames | None = None) -> ParsedAction:
        """Read ``text`` as tool calls or a plain message. Raises :class:`ParseError` for unreadable calls."""
        if not isinstance(text, str):
            raise ParseError(f"an action must be text, got {type(text).__name__}. {self.hint}")
        if self.max_chars is not None and len(text) > self.max_chars:
            raise ParseError(f"the reply has {len(text)} characters; at most {self.max_chars} are read. {self.hint}")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise ParseError(f"the reply contains a lone surrogate (not valid Unicode text). {self.hint}") from None
        stripped = text.lstrip(_BOM).strip()
        if "<tool_call>" in stripped:
            return self._checked(self._parse_tagged(stripped))
        body = unfence(stripped).lstrip(_BOM)
        if body.startswith(("{", "[")):
            try:
                data = self.load_json(body, "the reply")
            except ParseError:
                if self.python and body.startswith("[") and nesting_depth(body) <= MAX_NESTING:
                    calls = self._try_python(body, positional)
                    if calls is not None:
                        return self._checked(ParsedAction(calls, "", "python"))
                raise
            return self._checked(ParsedAction(self._calls_from_json(data), "", "json"))
        if self.fences_in_prose:
            blocks = json_fences(stripped)
            if blocks:
                calls = [
                    c
                    for i, (_start, _end, b) in enumerate(blocks)
                    for c in self._calls_from_json(self.load_json(b, f"fenced block #{i + 1}"))
                ]
                prose = _cut(stripped, [(start, end) for start, end, _body in blocks]).strip()
                return self._checked(ParsedAction(calls, prose, "json"))
        if not self.python:
            return ParsedAction([], stripped, "message")
        if _CALL_START_RE.match(body) and body.endswith((")", "]")):
            depth = nesting_depth(body)
            if depth > MAX_NESTING:
                raise ParseError(
                    f"the call is nested {depth} levels deep; at most {MAX_NESTING} are allowed. {self.hint}"
                )
            if len(body) > MAX_PYTHON_CHARS:
                raise ParseError(f"a python-style call longer than {MAX_PYTHON_CHARS} characters. {self.hint}")
        calls = self._try_python(body, positional) if body.endswith(")") else None
        if calls is not None:
            return self._checked(ParsedAction(calls, "", "python"))
        return ParsedAction([], stripped, "message")

    def load_json(self, text: str, where: str) -> Any:
        """``json.loads`` for untrusted text: a leading BOM dropped, nesting bounded by :data:`MAX_NESTING`,
        and every failure (syntax, recursion, integer digit limit, memory, a refused ``NaN``) a
        :class:`ParseError` naming ``where``."""
        text = text.lstrip(_BOM)
        depth = nesting_depth(text)
        if depth > MAX_NESTING:
            raise ParseError(f"{where} is nested {depth} levels deep; at most {MAX_NESTING} are allowed. {self.hint}")
        try:
            if self.json_constants:
                return json.loads(text)
            return json.loads(text, parse_constant=_no_constant)
        except (ValueError, RecursionError, MemoryError) as exc:
            raise ParseError(f"{where} looks like JSON but does not parse ({str(exc)[:200]}). {self.hint}") from None

    def _checked(self, parsed: ParsedAction) -> ParsedAction:
        """Refuse calls that cannot be written back as UTF-8 JSON (lone surrogates) or nest too deeply."""
        for i, call in enumerate(parsed.calls):
            try:
                encoded = json.dumps([call.name, call.arguments], ensure_ascii=False).encode("utf-8")
            except UnicodeEncodeError:
                raise ParseError(
                    f"tool call #{i + 1} contains a lone surrogate (not valid Unicode text). {self.hint}"
                ) from None
            except (TypeError, ValueError, RecursionError) as exc:
                raise ParseError(
                    f"tool call #{i + 1} has a value that is not JSON ({str(exc)[:120]}). {self.hint}"
                ) from None
            if nesting_depth(encoded.decode("utf-8")) > MAX_NESTING:
                raise ParseError(f"tool call #{i + 1} is nested more than {MAX_NESTING} levels deep. {self.hint}")
        return parsed

    def _parse_tagged(self, text: str) -> ParsedAction:
        calls: list[ToolCall] = []
        opened, closed = text.count("<tool_call>"), text.count("</tool_call>")
        if closed < opened and (self.require_closing_tag or opened - closed > 1):
            raise ParseError(
                f"{opened - closed} <tool_call> block(s) without a closing </tool_call>; close every block. {self.hint}"
            )
        for i, match in enumerate(TOOL_CALL_RE.finditer(text)):
            raw = unfence(match.group(1).strip())
            data = self.load_json(raw, f"tool call #{i + 1}")
            if isinstance(data, list):
                calls.extend(self._calls_from_json(data))
            else:
                calls.append(self._call_from_obj(data, i))
        prose = TOOL_CALL_RE.sub("", text).replace("</tool_call>", "").strip()
        if not calls:
            raise ParseError(f"an empty <tool_call> block. {self.hint}")
        return ParsedAction(calls, prose, "tool_call")

    def _calls_from_json(self, data: Any) -> list[ToolCall]:
        if isinstance(data, dict) and "tool_calls" in data:
            data = data["tool_calls"]
        items = data if isinstance(data, list) else [data]
        if not items:
            raise ParseError(f"an empty list of tool calls. {self.hint}")
        return [self._call_from_obj(item, i) for i, item in enumerate(items)]

    def _call_from_obj(self, obj: Any, index: int) -> ToolCall:
        where = f"tool call #{index + 1}"
        if not isinstance(obj, dict):
            raise ParseError(f"{where} must be a JSON object, got {type(obj).__name__}. {self.hint}")
        fn = obj.get("function")
        if isinstance(fn, dict):  # OpenAI: {"type": "function", "function": {"name", "arguments"}}
            name, args = fn.get("name"), fn.get("arguments", fn.get("parameters", {}))
        elif isinstance(fn, str):  # BFCL json format: {"function": "f", "parameters": {...}}
            name, args = fn, obj.get("parameters", obj.get("arguments", {}))
        else:
            name, args = obj.get("name"), obj.get("arguments", obj.get("parameters", {}))
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise ParseError(f'{where} has no valid "name" (got {_short(name)}). {self.hint}')
        if isinstance(args, str):
            args = self.load_json(args, f'{where}: "arguments" (a string)') if args.strip() else {}
        if args is None:
            args = {}
        if not isinstance(args, dict):
            raise ParseError(f'{where}: "arguments" must be an object of named parameters. {self.hint}')
        return ToolCall(name=name, arguments=dict(args))

    # ------------------------------------------------------------------------------ python syntax
    def _try_python(self, text: str, positional: PositionalNames | None) -> list[ToolCall] | None:
        """Calls written as python (``f(a=1)`` or a list of them); None when the text is not call syntax.
        Raises ParseError when it is call syntax with unreadable arguments."""
        if len(text) > MAX_PYTHON_CHARS:
            return None
        try:
            tree = ast.parse(text.strip(), mode="eval").body
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return None
        nodes = list(tree.elts) if isinstance(tree, (ast.List, ast.Tuple)) else [tree]
        if not nodes or not all(isinstance(n, ast.Call) for n in nodes):
            return None
        return [self._call_from_ast(n, positional) for n in nodes if isinstance(n, ast.Call)]

    def _call_from_ast(self, node: ast.Call, positional: PositionalNames | None) -> ToolCall:
        name = _dotted(node.func)
        if not name:
            raise ParseError(f"cannot read the function name in a python-style call. {self.hint}")
        args: dict[str, Any] = {}
        try:
            if node.args:
                names = list(positional(name) or []) if positional else []
                if len(node.args) > len(names):
                    raise ParseError(
                        f"{name}: positional arguments need parameter names; write {name}(param=value). {self.hint}"
                    )
                for pname, value in zip(names, node.args):
                    args[pname] = _literal(value)
            for kw in node.keywords:
                if kw.arg is None:
                    raise ParseError(f"{name}: **kwargs is not allowed in a call. {self.hint}")
                args[kw.arg] = _literal(kw.value)
        except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError) as exc:
            if isinstance(exc, ParseError):
                raise
            raise ParseError(f"{name}: argument values must be literals ({exc}). {self.hint}") from None
        return ToolCall(name=name, arguments=args)


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _cut(text: str, spans: Sequence[tuple[int, int]]) -> str:
    """``text`` without the (ordered, disjoint) ``spans``."""
    kept, pos = [], 0
    for start, end in spans:
        kept.append(text[pos:start])
        pos = end
    kept.append(text[pos:])
    return "".join(kept)


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def _literal(node: ast.AST) -> Any:
    if isinstance(node, ast.Name) and node.id.lower() in _PY_LITERAL_NAMES:
        return _PY_LITERAL_NAMES[node.id.lower()]
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return [_literal(e) for e in node.elts]
    if isinstance(node, ast.Dict):
        return {_literal(k) if k is not None else None: _literal(v) for k, v in zip(node.keys, node.values)}
    return ast.literal_eval(node)


#: the codec with every shape enabled (what :func:`parse_action` and :func:`load_json` use)
DEFAULT_CODEC = ToolCallCodec()


def parse_action(text: Any, positional: PositionalNames | None = None) -> ParsedAction:
    """Read ``text`` as tool calls or a plain message with the default codec (see the module docstring)."""
    return DEFAULT_CODEC.parse(text, positional)


def load_json(text: str, where: str) -> Any:
    """:meth:`ToolCallCodec.load_json` of the default codec: bounded, and every failure a :class:`ParseError`."""
    return DEFAULT_CODEC.load_json(text, where)


# ------------------------------------------------------------------------------------------ writing
def render_calls(calls: Sequence[ToolCall], content: str = "") -> str:
    """The canonical text of tool calls: optional prose, then one ``<tool_call>`` block per call."""
    blocks = [
        "<tool_call>" + json.dumps({"name": c.name, "arguments": c.arguments}, ensure_ascii=False) + "</tool_call>"
        for c in calls
    ]
    return "\n".join([content.strip()] * bool(content.strip()) + blocks)


def render_message(msg: Message) -> str:
    """The text a policy emits for an assistant message: its prose plus its ``tool_calls`` rendered."""
    calls = tool_calls_of(msg)
    return render_calls(calls, msg.get("content") or "") if calls else (msg.get("content") or "")


def python_call(call: ToolCall) -> str:
    """The call in python syntax (how BFCL writes ground truth), e.g. ``cd(folder='temp')``."""
    return f"{call.name}(" + ", ".join(f"{k}={v!r}" for k, v in call.arguments.items()) + ")"
