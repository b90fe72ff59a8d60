"""Java/JavaScript argument values as source code, the way BFCL expects them.

BFCL's Java/JavaScript tasks pass every argument as a string of source code (``"true"``, ``"50L"``,
``new ArrayList<>(Arrays.asList("a", "b"))``, ``{key: 1}``) while its answers hold the typed values.
:func:`to_source` writes a typed value as source (for expert calls); :func:`from_source` reads a source
string back leniently (for comparison). Both are our own small readers, not BFCL's converters.
"""

from __future__ import annotations

import json
import re
from typing import Any

_INT_TYPES = {"integer", "int", "byte", "short", "long", "bigint"}
_FLOAT_TYPES = {"float", "double", "number"}
_LIST_TYPES = {"array", "arraylist", "list", "queue", "stack"}
_DICT_TYPES = {"hashmap", "hashtable", "dict", "object", "map"}


def _element(value: Any, language: str) -> str:
    return json.dumps(value) if isinstance(value, str) else to_source(value, None, language)


def to_source(value: Any, type_name: str | None, language: str, items_type: str | None = None) -> str:
    """A typed value written as Java/JavaScript source (strings stay as they are)."""
    t = (type_name or "").lower()
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return f"{value}L" if (language == "java" and t == "long") else f"{value}n" if t == "bigint" else str(value)
    if isinstance(value, float):
        return f"{value}f" if (language == "java" and t == "float") else repr(value)
    if isinstance(value, (list, tuple)):
        inner = ", ".join(_element(v, language) for v in value)
        if language == "java":
            if t == "arraylist":
                return f"new ArrayList<>(Arrays.asList({inner}))"
            return f"new {items_type or 'Object'}[]{{{inner}}}"
        return f"[{inner}]"
    if isinstance(value, dict):
        if language == "java":
            puts = " ".join(f"put({json.dumps(str(k))}, {_element(v, language)});" for k, v in value.items())
            return f"new HashMap<String, Object>() {{{{ {puts} }}}}"
        return "{" + ", ".join(f"{k}: {_element(v, language)}" for k, v in value.items()) + "}"
    return json.dumps(value)


def _split_top(text: str) -> list[str]:
    """Split at commas outside quotes and brackets."""
    parts, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(text):
        if quote:
            if ch == quote and text[i - 1] != "\\":
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _scalar(text: str) -> Any:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1]
    if text in ("true", "false"):
        return text == "true"
    if text == "null":
        return None
    number = re.fullmatch(r"(-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)[lLfFdDn]?", text)
    if number:
        s = number.group(1)
        return float(s) if any(c in s for c in ".eE") else int(s)
    if text.startswith(("[", "{", "new ")):
        return from_source(text, "array" if text.startswith(("[", "new ")) and "HashMap" not in text else "dict")
    return text


def from_source(text: Any, type_name: str | None, items_type: str | None = None) -> Any:
    """Read a source-code string as a typed value (non-strings and unreadable text pass through)."""
    if not isinstance(text, str):
        return text
    t, s = (type_name or "").lower(), text.strip()
    if t in _LIST_TYPES or (not t and s.startswith("[")):
        m = (
            re.search(r"Arrays\.asList\((.*)\)\s*\)?\s*$", s, re.S)
            or re.search(r"^new\s+[\w<>]+\s*\[\]\s*\{(.*)\}$", s, re.S)
            or re.search(r"^\[(.*)\]$", s, re.S)
            or re.search(r"^new\s+Array\((.*)\)$", s, re.S)
        )
        if m:
            return [_scalar(p) for p in _split_top(m.group(1))]
        return [] if re.fullmatch(r"new\s+\w+<.*>\(\s*\)", s) else s
    if t in _DICT_TYPES:
        puts = re.findall(r"put\(\s*(\"[^\"]*\"|'[^']*'|[^,]+?)\s*,\s*(.+?)\)\s*;", s, re.S)
        if puts or "HashMap" in s:
            return {str(_scalar(k)): _scalar(v) for k, v in puts}
        m = re.search(r"^\{(.*)\}$", s, re.S)
        if m:
            out = {}
            for pair in _split_top(m.group(1)):
                key, _, value = pair.partition(":")
                out[str(_scalar(key))] = _scalar(value)
            return out
        return s
    if t in _INT_TYPES | _FLOAT_TYPES or t in ("boolean", "bool"):
        return _scalar(s)
    return _scalar(s) if s[:1] in "\"'" else s
