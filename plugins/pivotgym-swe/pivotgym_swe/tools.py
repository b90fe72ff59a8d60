"""The SWE env's tools: parsing a tool call from assistant text, and the file tools themselves.

An action is one tool call, written as ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (a bare
JSON object or a fenced ``json`` block, also inside prose, parse too). Reading is the core's ``<tool_call>``
codec (:mod:`pivotgym.parsing`, with its hardening against hostile text) narrowed to this env's language: no
python call syntax, no ``NaN``, a block cut before its ``</tool_call>`` still read. Any string parses to a
tool call or to an :class:`InvalidAction` with a fix-it message: deep nesting, integers too long to convert,
lone surrogates and NUL bytes included.

The file tools run in the host process, as the host user, on a directory that sandboxed code writes into, so
they treat every path as hostile:

* a path is resolved inside the working copy (symlinks within it are fine; one leading out is refused), then
  opened component by component from a directory fd with ``O_NOFOLLOW`` (``openat``-style), so no symlink
  swapped in anywhere along the way is followed;
* only regular files are read or edited (opened ``O_NONBLOCK`` and checked with ``fstat``: a FIFO, socket or
  device is refused instead of blocking), and reads are bounded (``MAX_FILE_BYTES``);
* ``edit`` writes a new file under a random name with ``O_CREAT | O_EXCL | O_NOFOLLOW`` in the same directory
  fd and renames it over the old one: no planted ``<file>.pivotgym-tmp`` symlink can redirect the write;
* ``search`` walks with ``os.fwalk`` (no symlink followed), skips non-regular files, and is bounded in files,
  bytes and time: the pattern runs under the ``regex`` package's timeout, so a catastrophic pattern ends in
  an error observation instead of spinning a core.
"""

from __future__ import annotations

import os
import re
import secrets
import stat
import time
from pathlib import Path
from typing import Any

import regex

from pivotgym import InvalidAction
from pivotgym.parsing import ParseError, ToolCallCodec, render_calls
from pivotgym.types import Message, ToolCall, tool_calls_of

VIEW_MAX_LINES = 120
SEARCH_MAX_HITS = 50
SEARCH_SUFFIXES = (".py", ".pyi", ".txt", ".rst", ".md", ".cfg", ".toml", ".ini")
MAX_FILE_BYTES = 2 << 20  # the largest file view / edit / search will read
SEARCH_MAX_FILES = 5000
SEARCH_MAX_BYTES = 32 << 20
SEARCH_SECONDS = 2.0  # regex budget of one search, over all files
PATTERN_MAX_CHARS = 1000
MAX_INT = 10**9  # integer arguments (line numbers) beyond this are refused
LISTING_MAX = 500

TOOLS: dict[str, dict[str, Any]] = {
    "view": {
        "description": f"Show lines start..end (1-based, inclusive; at most {VIEW_MAX_LINES}) of a file, numbered.",
        "parameters": {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "file path relative to the repository root"},
                "start": {"type": "integer", "default": 1},
                "end": {"type": "integer", "description": "last line (default: start + 119)"},
            },
            "required": ["path"],
        },
    },
    "search": {
        "description": (
            "Search text files for a Python regular expression; prints path:line: text "
            f"(at most {SEARCH_MAX_HITS} hits)."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "pattern": {"type": "string"},
                "path": {
                    "type": "string",
                    "description": "directory or file to search (default: the whole repository)",
                    "default": ".",
                },
            },
            "required": ["pattern"],
        },
    },
    "edit": {
        "description": "Replace the exact text `old` (which must occur exactly once in the file) with `new`.",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}, "old": {"type": "string"}, "new": {"type": "string"}},
            "required": ["path", "old", "new"],
        },
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

FORMAT_HINT = (
    'Write exactly one tool call: <tool_call>{"name": "view", "arguments": {"path": "pkg/mod.py", '
    '"start": 1, "end": 40}}</tool_call>. Tools: ' + ", ".join(TOOLS) + "."
)
#: the core codec, narrowed to what this env reads (see the module docstring)
CODEC = ToolCallCodec(
    hint=FORMAT_HINT, python=False, fences_in_prose=True, json_constants=False, require_closing_tag=False
)


def tool_schemas() -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": n, **spec}} for n, spec in TOOLS.items()]


def parse_tool_call(text: Any) -> ToolCall:
    """The single tool call in ``text``; :class:`InvalidAction` with a fix-it message otherwise."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidAction(f"Empty action. {FORMAT_HINT}", code="parse_error")
    try:
        parsed = CODEC.parse(text)
    except ParseError as exc:
        raise InvalidAction(str(exc), code="parse_error") from None
    if not parsed.calls:
        raise InvalidAction(f"The reply holds no tool call. {FORMAT_HINT}", code="parse_error")
    if len(parsed.calls) != 1:
        raise InvalidAction(
            f"Found {len(parsed.calls)} tool calls; send one per turn. {FORMAT_HINT}", code="parse_error"
        )
    name, args = parsed.calls[0].name, parsed.calls[0].arguments
    if name not in TOOLS:
        raise InvalidAction(f"Unknown tool {name!r}; the tools are {', '.join(TOOLS)}.", code="unknown_tool")
    params = TOOLS[name]["parameters"]
    missing = [k for k in params.get("required", []) if k not in args]
    extra = [k for k in args if k not in params["properties"]]
    if missing or extra:
        raise InvalidAction(
            f"{name}: missing arguments {missing}, unexpected {extra}; expected {list(params['properties'])}.",
            code="bad_arguments",
        )
    for key, spec in params["properties"].items():
        if key in args:
            want = {"string": str, "integer": int}[spec["type"]]
            if not isinstance(args[key], want) or isinstance(args[key], bool):
                raise InvalidAction(f"{name}: argument {key!r} must be a {spec['type']}.", code="bad_arguments")
            if want is int and abs(args[key]) > MAX_INT:
                raise InvalidAction(
                    f"{name}: argument {key!r} is out of range (|n| <= {MAX_INT}).", code="bad_arguments"
                )
            if want is str:
                check_text(args[key], f"{name}: argument {key!r}")
    return ToolCall(name=name, arguments=dict(args))


def check_text(value: str, what: str) -> str:
    """Refuse text that cannot reach a file or a process intact: NUL bytes and lone surrogates."""
    if "\x00" in value:
        raise InvalidAction(f"{what} contains a NUL byte; remove it.", code="bad_arguments")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidAction(
            f"{what} contains a lone surrogate (\\ud800-\\udfff), which is not valid text; write plain UTF-8.",
            code="bad_arguments",
        ) from None
    return value


def render_tool_call(msg: Message) -> str:
    """The text a policy emits for an assistant message with a tool call (inverse of the parser)."""
    calls = tool_calls_of(msg)
    return render_calls(calls[:1]) if calls else (msg.get("content") or "")


def resolve(root: Path, rel: str, *, must_exist: bool = True) -> Path:
    """``rel`` inside ``root`` (symlinks resolved); refuse anything that leads outside.

    The result is only a name: open it with :func:`open_in_root`, which re-checks every component."""
    if not isinstance(rel, str):
        raise InvalidAction("A path must be a string.", code="bad_path")
    if "\x00" in rel:
        raise InvalidAction("The path contains a NUL byte.", code="bad_path")
    try:
        os.fsencode(rel)
    except UnicodeEncodeError:
        raise InvalidAction("The path contains a lone surrogate; use plain UTF-8 names.", code="bad_path") from None
    real_root = Path(os.path.realpath(root))
    target = Path(os.path.realpath(real_root / rel))
    if target != real_root and real_root not in target.parents:
        raise InvalidAction(f"{rel!r} is outside the repository; paths are relative to its root.", code="bad_path")
    if must_exist and not os.path.lexists(target):
        raise InvalidAction(f"{rel!r} does not exist. Use search to find files.", code="no_such_file")
    return target


def _walk_to(root: Path, target: Path) -> tuple[int, str]:
    """(fd of the directory holding ``target``, its last component), each directory on the way opened from
    its parent's fd with O_NOFOLLOW: a symlink anywhere on the path fails instead of being followed."""
    real_root = Path(os.path.realpath(root))
    parts = target.relative_to(real_root).parts
    fd = os.open(real_root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except OSError:
        os.close(fd)
        raise InvalidAction(
            f"{target.relative_to(real_root)} is not reachable through real directories.", code="bad_path"
        ) from None
    return fd, (parts[-1] if parts else ".")


def open_in_root(root: Path, rel: str, *, directory_ok: bool = False) -> tuple[int, os.stat_result]:
    """An fd of ``rel`` inside ``root`` opened without following links, and its ``fstat``; only a regular
    file (or a directory, when ``directory_ok``). The caller closes the fd."""
    target = resolve(root, rel)
    parent, name = _walk_to(root, target)
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=parent)
    except OSError as exc:
        raise InvalidAction(f"{rel!r} cannot be opened ({exc.strerror}).", code="bad_path") from None
    finally:
        os.close(parent)
    st = os.fstat(fd)
    if stat.S_ISREG(st.st_mode) or (directory_ok and stat.S_ISDIR(st.st_mode)):
        return fd, st
    os.close(fd)
    kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file (a FIFO, socket or device)"
    raise InvalidAction(f"{rel!r} is {kind}; only regular files can be viewed or edited.", code="not_a_file")


def _read_fd(fd: int, st: os.stat_result, rel: str) -> str:
    if st.st_size > MAX_FILE_BYTES:
        raise InvalidAction(
            f"{rel} has {st.st_size} bytes; the tools read files up to {MAX_FILE_BYTES}.", code="file_too_large"
        )
    chunks, size = [], 0
    while size <= MAX_FILE_BYTES:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    if size > MAX_FILE_BYTES:
        raise InvalidAction(f"{rel} is larger than {MAX_FILE_BYTES} bytes.", code="file_too_large")
    try:
        return b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidAction(f"{Path(rel).name} is not a UTF-8 text file.", code="binary_file") from None


def read_file(root: Path, rel: str) -> str:
    """The text of the regular file ``rel`` inside ``root`` (bounded, never through a link out)."""
    fd, st = open_in_root(root, rel)
    try:
        return _read_fd(fd, st, rel)
    finally:
        os.close(fd)


def view(root: Path, path: str, start: int = 1, end: int | None = None) -> str:
    fd, st = open_in_root(root, path, directory_ok=True)
    try:
        if stat.S_ISDIR(st.st_mode):
            return f"{path}/ contains:\n" + "\n".join(_listing(fd))
        lines = _read_fd(fd, st, path).splitlines()
    finally:
        os.close(fd)
    start = max(1, start)
    end = min(len(lines), end if end is not None else start + VIEW_MAX_LINES - 1, start + VIEW_MAX_LINES - 1)
    if start > len(lines):
        raise InvalidAction(f"{path} has {len(lines)} lines; start {start} is past the end.", code="bad_range")
    body = "\n".join(f"{i:5d}  {lines[i - 1]}" for i in range(start, end + 1))
    return f"{path} (lines {start}-{end} of {len(lines)})\n{body}"


def _listing(fd: int) -> list[str]:
    names = []
    for name in sorted(os.listdir(fd))[: LISTING_MAX + 1]:
        if name == "__pycache__":
            continue
        try:
            is_dir = stat.S_ISDIR(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode)
        except OSError:
            is_dir = False
        names.append(name + ("/" if is_dir else ""))
    if len(names) > LISTING_MAX:
        names = names[:LISTING_MAX] + ["[... more entries ...]"]
    return names


def read_text(path: Path) -> str:
    """Bounded UTF-8 read of a host-trusted path (not for agent-chosen paths: use :func:`read_file`)."""
    return read_file(path.parent, path.name)


def compile_pattern(pattern: str) -> Any:
    """The compiled ``regex`` pattern, or :class:`InvalidAction` saying what is wrong with it."""
    if len(pattern) > PATTERN_MAX_CHARS:
        raise InvalidAction(
            f"The pattern has {len(pattern)} characters; keep it under {PATTERN_MAX_CHARS}.", code="bad_pattern"
        )
    try:
        return regex.compile(pattern)
    except (regex.error, re.error) as exc:
        raise InvalidAction(f"Invalid regular expression: {exc}.", code="bad_pattern") from None
    except (RecursionError, OverflowError, ValueError, MemoryError, TypeError):
        raise InvalidAction(
            "Invalid regular expression: too complex (nested too deeply or too large).", code="bad_pattern"
        ) from None


def search_hits(root: Path, pattern: str, path: str = ".") -> list[tuple[str, int, str]]:
    """(path, line, text) of every match of ``pattern`` under ``path``, in path order (bounded, see module)."""
    compiled = compile_pattern(pattern)
    real_root = Path(os.path.realpath(root))
    base = resolve(root, path)
    deadline = time.monotonic() + SEARCH_SECONDS
    budget = {"files": SEARCH_MAX_FILES, "bytes": SEARCH_MAX_BYTES}
    found: list[tuple[str, int, str]] = []
    parent, name = _walk_to(root, base)
    try:
        st = os.stat(name, dir_fd=parent, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            dir_fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
            try:
                for dirpath, dirnames, filenames, dfd in os.fwalk(".", dir_fd=dir_fd, follow_symlinks=False):
                    dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
                    rel_dir = os.path.normpath(os.path.join(os.path.relpath(base, real_root), dirpath))
                    for fname in sorted(filenames):
                        if Path(fname).suffix in SEARCH_SUFFIXES:
                            found += _search_file(
                                dfd, fname, os.path.normpath(os.path.join(rel_dir, fname)), compiled, deadline, budget
                            )
            finally:
                os.close(dir_fd)
        else:
            found += _search_file(parent, name, str(base.relative_to(real_root)), compiled, deadline, budget)
    finally:
        os.close(parent)
    return sorted(found, key=lambda h: (h[0], h[1]))


def _search_file(dir_fd: int, name: str, rel: str, compiled: Any, deadline: float, budget: dict) -> list:
    budget["files"] -= 1
    if budget["files"] < 0:
        raise InvalidAction(
            f"The search covers more than {SEARCH_MAX_FILES} files; give a narrower path.", code="search_too_broad"
        )
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return []  # a symlink, or gone
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_FILE_BYTES:
            return []
        budget["bytes"] -= st.st_size
        if budget["bytes"] < 0:
            raise InvalidAction(
                f"The search covers more than {SEARCH_MAX_BYTES} bytes; give a narrower path.", code="search_too_broad"
            )
        try:
            text = _read_fd(fd, st, rel)
        except InvalidAction:
            return []
    finally:
        os.close(fd)
    hits = []
    for n, line in enumerate(text.splitlines(), 1):
        remaining = deadline - time.monotonic()
        try:
            if remaining <= 0:
                raise TimeoutError
            matched = compiled.search(line, timeout=remaining)
        except TimeoutError:
            raise InvalidAction(
                f"The search took longer than {SEARCH_SECONDS:g}s and was stopped; the pattern "
                "probably backtracks catastrophically (nested quantifiers like (a+)+). Simplify "
                "it or narrow the path.",
                code="search_timeout",
            ) from None
        if matched:
            hits.append((rel, n, line.strip()[:200]))
    return hits


def search(root: Path, pattern: str, path: str = ".") -> str:
    hits = search_hits(root, pattern, path)
    if not hits:
        return f"No matches for {pattern!r}."
    shown = "\n".join(f"{p}:{n}: {t}" for p, n, t in hits[:SEARCH_MAX_HITS])
    more = (
        f"\n... {len(hits) - SEARCH_MAX_HITS} more matches; narrow the pattern." if len(hits) > SEARCH_MAX_HITS else ""
    )
    return f"{len(hits)} match(es):\n{shown}{more}"


def edit(root: Path, path: str, old: str, new: str) -> str:
    target = resolve(root, path)
    parent, name = _walk_to(root, target)
    try:
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=parent)
        except OSError as exc:
            raise InvalidAction(f"{path!r} cannot be opened ({exc.strerror}).", code="no_such_file") from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise InvalidAction(f"{path} is not a file.", code="no_such_file")
            text = _read_fd(fd, st, path)
        finally:
            os.close(fd)
        if not old:
            raise InvalidAction("`old` is empty; copy the exact lines to replace from a view.", code="edit_not_found")
        count = text.count(old)
        if count == 0:
            raise InvalidAction(
                f"`old` does not occur in {path}; view the file and copy the exact text, including indentation.",
                code="edit_not_found",
            )
        if count > 1:
            raise InvalidAction(
                f"`old` occurs {count} times in {path}; include more surrounding lines so it is unique.",
                code="edit_ambiguous",
            )
        updated = text.replace(old, new, 1)
        data = updated.encode("utf-8")
        if len(data) > MAX_FILE_BYTES:
            raise InvalidAction(f"The edited file would exceed {MAX_FILE_BYTES} bytes.", code="file_too_large")
        # a fresh inode under a random name (O_EXCL: never an existing entry, never a link), renamed over the
        # old one within the same directory fd: forks sharing the old file are untouched
        tmp = f".{name}.pivotgym-{secrets.token_hex(8)}"
        out = os.open(
            tmp,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            stat.S_IMODE(st.st_mode) or 0o644,
            dir_fd=parent,
        )
        try:
            with os.fdopen(out, "wb") as fh:
                fh.write(data)
            os.replace(tmp, name, src_dir_fd=parent, dst_dir_fd=parent)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=parent)
            except OSError:
                pass
            raise
    finally:
        os.close(parent)
    first = text[: text.index(old)].count("\n") + 1
    last = first + max(new.count("\n"), 1) - 1
    lines = updated.splitlines()
    lo, hi = max(1, first - 2), min(len(lines), last + 2)
    snippet = "\n".join(f"{i:5d}  {lines[i - 1]}" for i in range(lo, hi + 1))
    return f"Edited {path}. Lines {lo}-{hi} now read:\n{snippet}"
