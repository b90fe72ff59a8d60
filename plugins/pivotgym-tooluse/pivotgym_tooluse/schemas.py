"""BFCL function docs as OpenAI tool schemas, and the compact prompt a small model sees.

BFCL writes types its own way (``dict``, ``float``, ``tuple``, ``any`` and, for Java/JavaScript, language
types whose values are passed as strings). :func:`json_schema` maps them to JSON-schema types so that the
core helpers (``coerce_value``) apply; Java/JavaScript parameters become strings, as BFCL expects.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

_PY_TYPES = {
    "dict": "object",
    "object": "object",
    "float": "number",
    "number": "number",
    "integer": "integer",
    "int": "integer",
    "string": "string",
    "str": "string",
    "boolean": "boolean",
    "bool": "boolean",
    "array": "array",
    "list": "array",
    "tuple": "array",
    "any": None,
}


def json_type(bfcl_type: Any, language: str = "python") -> str | None:
    """The JSON-schema type for a BFCL type name (None when any value goes)."""
    if language != "python":
        return "string"  # BFCL passes Java/JavaScript values as source-code strings
    return _PY_TYPES.get(str(bfcl_type).lower(), None) if bfcl_type is not None else None


def json_schema(spec: Mapping[str, Any], language: str = "python") -> dict[str, Any]:
    """Convert one BFCL parameter spec (recursively) to JSON schema, keeping what the comparison rules read
    (description, enum/const, default, format, pattern and the explicit case marks)."""
    out: dict[str, Any] = {}
    type_name = json_type(spec.get("type"), language)
    if type_name:
        out["type"] = type_name
    for key in (
        "description",
        "enum",
        "const",
        "default",
        "format",
        "pattern",
        "x-case-insensitive",
        "x-case-sensitive",
    ):
        if key in spec:
            out[key] = spec[key]
    if language != "python" and spec.get("type"):
        out["description"] = f"({spec['type']}, written as source code in a string) " + str(spec.get("description", ""))
        out["x-source-type"] = spec["type"]  # the language type, for reading the source string back
        if isinstance(spec.get("items"), Mapping) and spec["items"].get("type"):
            out["x-source-items"] = spec["items"]["type"]
    if language == "python":
        if isinstance(spec.get("items"), Mapping):
            out["items"] = json_schema(spec["items"], language)
        if isinstance(spec.get("properties"), Mapping):
            out["properties"] = {
                k: json_schema(v, language) for k, v in spec["properties"].items() if isinstance(v, Mapping)
            }
            if spec.get("required"):
                out["required"] = list(spec["required"])
    return out


def to_tool(doc: Mapping[str, Any], language: str = "python") -> dict[str, Any]:
    """An OpenAI ``tools`` entry for a BFCL function doc."""
    params = doc.get("parameters") or {}
    schema = json_schema({**params, "type": "dict"}, "python")
    if language != "python":
        schema["properties"] = {k: json_schema(v, language) for k, v in (params.get("properties") or {}).items()}
    schema.setdefault("properties", {})
    schema["required"] = list(params.get("required") or [])
    return {
        "type": "function",
        "function": {"name": doc["name"], "description": str(doc.get("description", "")), "parameters": schema},
    }


def _short(text: str, limit: int = 160) -> str:
    text = " ".join(str(text).split())
    if "Tool description:" in text:  # multi-turn docs start with a long class preamble
        text = text.split("Tool description:", 1)[1].strip()
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


def _type_label(spec: Mapping[str, Any]) -> str:
    t = spec.get("type", "any")
    if t == "array" and isinstance(spec.get("items"), Mapping):
        return f"array[{spec['items'].get('type', 'any')}]"
    return str(t)


def compact_signature(tool: Mapping[str, Any]) -> str:
    """One line per tool: ``name(req: type, opt: type = default) - description``."""
    fn = tool.get("function", tool)
    params = fn.get("parameters") or {}
    required = set(params.get("required") or [])
    parts = []
    for name, spec in (params.get("properties") or {}).items():
        label = f"{name}: {_type_label(spec)}"
        if name not in required:
            label += f" = {json.dumps(spec['default'])}" if "default" in spec else " (optional)"
        parts.append(label)
    line = f"- {fn['name']}({', '.join(parts)})"
    desc = _short(fn.get("description", ""))
    return f"{line}: {desc}" if desc else line


WORKED_EXAMPLE = (
    'Example. Tool: get_weather(city: string, unit: string = "celsius").\n'
    "User: What is the weather in Paris in fahrenheit?\n"
    'Assistant: <tool_call>{"name": "get_weather", "arguments": {"city": "Paris", '
    '"unit": "fahrenheit"}}</tool_call>'
)


def system_prompt(tools: Iterable[Mapping[str, Any]], *, multi_turn: bool = False) -> str:
    """The system message: what to do, the tools compactly, the call format and a worked example."""
    lines = [
        "You can call these tools:",
        *(compact_signature(t) for t in tools),
        "",
        'To call a tool, reply with <tool_call>{"name": ..., "arguments": {...}}</tool_call> '
        "(one block per call; several blocks for several calls). "
        "If no tool fits the request, or required information is missing, reply with a plain message instead.",
    ]
    if multi_turn:
        lines.append(
            "Tool results come back as tool messages; keep calling tools until the user's request is "
            "done, then reply with a short plain message."
        )
    lines += ["", WORKED_EXAMPLE]
    return "\n".join(lines)


def tools_note(tools: Iterable[Mapping[str, Any]]) -> str:
    """A user-turn note announcing tools that became available mid-conversation (BFCL miss_func)."""
    return (
        "More tools are now available:\n"
        + "\n".join(compact_signature(t) for t in tools)
        + "\nPlease continue with my previous request."
    )
