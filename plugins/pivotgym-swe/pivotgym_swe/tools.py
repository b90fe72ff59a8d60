"""The SWE env's tools: parsing a tool call from assistant text, and the file tools themselves.

An action is one tool call, written as ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (a bare
JSON object or a fenced ``json`` block also parse). File tools resolve paths inside the working copy only:
a path (or symlink) leading outside it is refused, so the host process never reads or writes host files on
the agent's behalf.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from pivotgym import InvalidAction
from pivotgym.types import Message, ToolCall, tool_calls_of

VIEW_MAX_LINES = 120
SEARCH_MAX_HITS = 50
SEARCH_SUFFIXES = (".py", ".pyi", ".txt", ".rst", ".md", ".cfg", ".toml", ".ini")

TOOLS: dict[str, dict[str, Any]] = {
    "view": {
        "description": f"Show lines start..end (1-based, inclusive; at most {VIEW_MAX_LINES}) of a file, numbered.",
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string", "description": "file path relative to the repository root"},
            "start": {"type": "integer", "default": 1},
            "end": {"type": "integer", "description": "last line (default: start + 119)"}},
            "required": ["path"]},
    },
    "search": {
        "description": f"Search text files for a Python regular expression; prints path:line: text (at most {SEARCH_MAX_HITS} hits).",
        "parameters": {"type": "object", "properties": {
            "pattern": {"type": "string"},
            "path": {"type": "string", "description": "directory or file to search (default: the whole repository)", "default": "."}},
            "required": ["pattern"]},
    },
    "edit": {
        "description": "Replace the exact text `old` (which must occur exactly once in the file) with `new`.",
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string"}, "old": {"type": "string"}, "new": {"type": "string"}},
            "required": ["path", "old", "new"]},
    },
    "run": {
        "description": "Run a shell command in the repository (sandboxed: no network, time and memory limits).",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
    },
    "submit": {
        "description": "Finish: your repository state is judged by the hidden tests.",
        "parameters": {"type": "object", "properties": {}},
    },
}

FORMAT_HINT = ('Write exactly one tool call: <tool_call>{"name": "view", "arguments": {"path": "pkg/mod.py", '
               '"start": 1, "end": 40}}</tool_call>. Tools: ' + ", ".join(TOOLS) + ".")
_TAGGED = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.S)
_FENCED = re.compile(r"```(?:json)?\s*(\{.*?\})\s*```", re.S)


def tool_schemas() -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": n, **spec}} for n, spec in TOOLS.items()]


def parse_tool_call(text: Any) -> ToolCall:
    """The single tool call in ``text``; :class:`InvalidAction` with a fix-it message otherwise."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidAction(f"Empty action. {FORMAT_HINT}", code="parse_error")
    found = _TAGGED.findall(text) or _FENCED.findall(text)
    blobs = found if found else [text.strip()]
    if len(blobs) != 1:
        raise InvalidAction(f"Found {len(blobs)} tool calls; send one per turn. {FORMAT_HINT}", code="parse_error")
    try:
        data = json.loads(blobs[0])
    except json.JSONDecodeError as exc:
        raise InvalidAction(f"The tool call is not valid JSON ({exc.msg} at char {exc.pos}). {FORMAT_HINT}",
                            code="parse_error") from None
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        raise InvalidAction(f'A tool call is a JSON object with "name" and "arguments". {FORMAT_HINT}', code="parse_error")
    args = data.get("arguments", data.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError:
            raise InvalidAction('"arguments" must be a JSON object.', code="parse_error") from None
    if not isinstance(args, dict):
        raise InvalidAction('"arguments" must be a JSON object.', code="parse_error")
    name = data["name"]
    if name not in TOOLS:
        raise InvalidAction(f"Unknown tool {name!r}; the tools are {', '.join(TOOLS)}.", code="unknown_tool")
    params = TOOLS[name]["parameters"]
    missing = [k for k in params.get("required", []) if k not in args]
    extra = [k for k in args if k not in params["properties"]]
    if missing or extra:
        raise InvalidAction(f"{name}: missing arguments {missing}, unexpected {extra}; expected "
                            f"{list(params['properties'])}.", code="bad_arguments")
    for key, spec in params["properties"].items():
        if key in args:
            want = {"string": str, "integer": int}[spec["type"]]
            if not isinstance(args[key], want) or isinstance(args[key], bool):
                raise InvalidAction(f"{name}: argument {key!r} must be a {spec['type']}.", code="bad_arguments")
    return ToolCall(name=name, arguments=dict(args))


def render_tool_call(msg: Message) -> str:
    """The text a policy emits for an assistant message with a tool call (inverse of the parser)."""
    calls = tool_calls_of(msg)
    if not calls:
        return msg.get("content") or ""
    call = calls[0]
    return "<tool_call>" + json.dumps({"name": call.name, "arguments": call.arguments}, ensure_ascii=False) + "</tool_call>"


def resolve(root: Path, rel: str, *, must_exist: bool = True) -> Path:
    """``rel`` inside ``root`` (symlinks resolved); refuse anything that leads outside."""
    if "\x00" in rel:
        raise InvalidAction("The path contains a NUL byte.", code="bad_path")
    real_root = root.resolve()
    target = (real_root / rel).resolve()
    if target != real_root and real_root not in target.parents:
        raise InvalidAction(f"{rel!r} is outside the repository; paths are relative to its root.", code="bad_path")
    if must_exist and not target.exists():
        raise InvalidAction(f"{rel!r} does not exist. Use search to find files.", code="no_such_file")
    return target


def view(root: Path, path: str, start: int = 1, end: int | None = None) -> str:
    target = resolve(root, path)
    if target.is_dir():
        entries = sorted(p.name + ("/" if p.is_dir() else "") for p in target.iterdir() if p.name != "__pycache__")
        return f"{path}/ contains:\n" + "\n".join(entries)
    lines = read_text(target).splitlines()
    start = max(1, start)
    end = min(len(lines), end if end is not None else start + VIEW_MAX_LINES - 1, start + VIEW_MAX_LINES - 1)
    if start > len(lines):
        raise InvalidAction(f"{path} has {len(lines)} lines; start {start} is past the end.", code="bad_range")
    body = "\n".join(f"{i:5d}  {lines[i - 1]}" for i in range(start, end + 1))
    return f"{path} (lines {start}-{end} of {len(lines)})\n{body}"


def read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InvalidAction(f"{path.name} is not a UTF-8 text file.", code="binary_file") from None


def search_hits(root: Path, pattern: str, path: str = ".") -> list[tuple[str, int, str]]:
    """(path, line, text) of every match of ``pattern`` under ``path``, in path order."""
    try:
        regex = re.compile(pattern)
    except re.error as exc:
        raise InvalidAction(f"Invalid regular expression: {exc}.", code="bad_pattern") from None
    base = resolve(root, path)
    real_root = root.resolve()
    files = [base] if base.is_file() else sorted(p for p in base.rglob("*") if p.suffix in SEARCH_SUFFIXES and p.is_file())
    hits = []
    for file in files:
        real = file.resolve()
        if real_root not in real.parents or "__pycache__" in file.parts:
            continue
        try:
            text = real.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        rel = os.path.relpath(file, real_root)
        for n, line in enumerate(text.splitlines(), 1):
            if regex.search(line):
                hits.append((rel, n, line.strip()[:200]))
    return hits


def search(root: Path, pattern: str, path: str = ".") -> str:
    hits = search_hits(root, pattern, path)
    if not hits:
        return f"No matches for {pattern!r}."
    shown = "\n".join(f"{p}:{n}: {t}" for p, n, t in hits[:SEARCH_MAX_HITS])
    more = f"\n... {len(hits) - SEARCH_MAX_HITS} more matches; narrow the pattern." if len(hits) > SEARCH_MAX_HITS else ""
    return f"{len(hits)} match(es):\n{shown}{more}"


def edit(root: Path, path: str, old: str, new: str) -> str:
    target = resolve(root, path)
    if not target.is_file():
        raise InvalidAction(f"{path} is not a file.", code="no_such_file")
    text = read_text(target)
    if not old:
        raise InvalidAction("`old` is empty; copy the exact lines to replace from a view.", code="edit_not_found")
    count = text.count(old)
    if count == 0:
        raise InvalidAction(f"`old` does not occur in {path}; view the file and copy the exact text, including "
                            "indentation.", code="edit_not_found")
    if count > 1:
        raise InvalidAction(f"`old` occurs {count} times in {path}; include more surrounding lines so it is unique.",
                            code="edit_ambiguous")
    updated = text.replace(old, new, 1)
    tmp = target.with_name(target.name + ".pivotgym-tmp")
    tmp.write_text(updated, encoding="utf-8")
    os.replace(tmp, target)  # a new inode: forks that share the old file are untouched
    first = text[: text.index(old)].count("\n") + 1
    last = first + max(new.count("\n"), 1) - 1
    lines = updated.splitlines()
    lo, hi = max(1, first - 2), min(len(lines), last + 2)
    snippet = "\n".join(f"{i:5d}  {lines[i - 1]}" for i in range(lo, hi + 1))
    return f"Edited {path}. Lines {lo}-{hi} now read:\n{snippet}"
