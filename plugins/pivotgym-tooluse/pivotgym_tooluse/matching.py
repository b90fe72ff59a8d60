"""Structural comparison of tool calls against BFCL's acceptable answers.

BFCL gives, per expected call, each parameter's list of acceptable values; ``""`` in a list means the
parameter may be omitted. These rules are our own reading of that format (the plugin README lists every
place where they depart from BFCL's checker):

* a value must have its parameter's JSON type (:func:`pivotgym.verify.value_problem`: ``"5"`` is not an
  integer, ``"true"`` not a boolean; an int is a number and ``2.0`` an integer), then equal an acceptable
  value by :func:`pivotgym.verify.values_equivalent` (strings: NFC, surrounding whitespace; case folded for
  free text, :func:`pivotgym.verify.compare.folds_case`);
* lists compare element-wise, dicts key-wise against nested acceptable lists;
* an omitted parameter is fine when ``""`` is acceptable or its default (the schema's or the description's,
  :func:`pivotgym.verify.compare.param_default`) is an acceptable value; a parameter passed at its default
  (``null`` for a null default included, checked before its type) is fine when omitting it is acceptable; any
  other extra parameter fails;
* parallel calls are matched order-free (a perfect bipartite matching of calls to expected calls).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pivotgym.types import ToolCall
from pivotgym.verify import coerce_value, param_default, perfect_matching, value_problem, values_equivalent
from pivotgym_tooluse.sourcecode import from_source, to_source


@dataclass
class Match:
    """``ok`` plus a reason tag (``function_name``, ``argument_value``...) and a human-readable detail."""

    ok: bool
    reason: str
    detail: str = ""


_MISSING = object()


def _default(spec: Mapping[str, Any] | None) -> Any:
    found, value = param_default(spec)
    return value if found else _MISSING


def value_matches(
    value: Any, answer: Any, spec: Mapping[str, Any] | None = None, _depth: int = 0, name: str | None = None
) -> bool:
    """Does ``value`` equal one acceptable ``answer`` (a single value, possibly a nested BFCL answer) of the
    parameter ``name`` (its name decides whether its case is folded)?"""
    spec = spec if isinstance(spec, Mapping) else {}
    if _depth > 64:
        return False
    type_name = spec.get("type")
    if "x-source-type" in spec:  # Java/JavaScript: the candidate writes source code in a string
        value = from_source(value, spec["x-source-type"], spec.get("x-source-items"))
        if not isinstance(answer, str):
            type_name = None
    elif value_problem(value, {"type": type_name}) is not None:
        return False
    v, a = coerce_value(value, type_name), coerce_value(answer, type_name)
    if isinstance(a, Mapping):
        if not isinstance(v, Mapping):
            return False
        return dict_matches(v, a, spec.get("properties") or {}, _depth + 1)
    if isinstance(a, (list, tuple)):
        if not isinstance(v, (list, tuple)) or len(v) != len(a):
            return False
        items = spec.get("items") if isinstance(spec.get("items"), Mapping) else {}
        return all(value_matches(x, y, items, _depth + 1, name) for x, y in zip(v, a))
    return values_equivalent(v, a, spec=spec, name=name)


def acceptable_values(answers: Any) -> list[Any]:
    """A parameter's acceptable values as a list. BFCL writes ``[]`` for a few required list parameters
    whose only sensible value is the empty list; we read it as ``[[]]`` (BFCL's checker accepts nothing)."""
    if not isinstance(answers, list):
        return [answers]
    return answers if answers else [[]]


def acceptable(
    value: Any, answers: Sequence[Any], spec: Mapping[str, Any] | None = None, name: str | None = None
) -> bool:
    """Does ``value`` match any of a parameter's acceptable values?"""
    return any(value_matches(value, a, spec, name=name) for a in acceptable_values(answers))


def _omittable(answers: Sequence[Any], spec: Mapping[str, Any] | None, name: str | None = None) -> bool:
    if "" in answers:
        return True
    default = _default(spec)
    return default is not _MISSING and acceptable(default, answers, spec, name)


def _listed(value: Any, answer: Any, spec: Mapping[str, Any] | None, name: str | None = None) -> bool:
    """``value`` is literally one of BFCL's acceptable values: same JSON type, same value."""
    return answer != "" and type(value) is type(answer) and values_equivalent(value, answer, spec=spec, name=name)


def _at_default(value: Any, spec: Mapping[str, Any] | None, name: str | None = None) -> bool:
    """``value`` is the parameter's default (an explicit ``null`` for a null default included)."""
    default = _default(spec)
    if default is _MISSING:
        return False
    return value is None if default is None else value_matches(value, default, spec, name=name)


def _at_omittable_default(
    value: Any, answers: Sequence[Any], spec: Mapping[str, Any] | None, name: str | None = None
) -> bool:
    """A value passed explicitly at its default where the answers allow leaving it out."""
    return "" in answers and _at_default(value, spec, name)


def dict_matches(
    value: Mapping[str, Any], answer: Mapping[str, Any], props: Mapping[str, Any], _depth: int = 0
) -> bool:
    """A dict value against a BFCL nested answer (each key mapped to a list of acceptable values)."""
    for key, accepted in answer.items():
        accepted = acceptable_values(accepted)
        if key in value:
            if not (
                any(value_matches(value[key], a, props.get(key), _depth, key) for a in accepted)
                or _at_omittable_default(value[key], accepted, props.get(key), key)
            ):
                return False
        elif not _omittable(accepted, props.get(key), key):
            return False
    for key in value:
        if key not in answer and not _at_default(value[key], props.get(key), key):
            return False
    return True


def match_call(
    call: ToolCall, name: str, answer: Mapping[str, Sequence[Any]], params: Mapping[str, Any] | None = None
) -> Match:
    """One call against one expected call (``name`` plus ``{param: [acceptable values]}``)."""
    if call.name != name:
        return Match(False, "function_name", f"got {call.name}, expected {name}")
    props = (params or {}).get("properties") or {}
    required = set((params or {}).get("required") or [])
    for param, value in call.arguments.items():
        if params is not None and param not in props:
            return Match(False, "unexpected_argument", f"{name} has no parameter {param!r}")
        spec = props.get(param) if isinstance(props.get(param), Mapping) else None
        accepted = acceptable_values(answer[param]) if param in answer else []
        if any(_listed(value, a, spec, param) for a in accepted):
            continue  # BFCL lists this very value (even where it contradicts the schema's type)
        if _at_omittable_default(value, accepted, spec, param) or (param not in answer and _at_default(value, spec)):
            continue  # the default passed explicitly (``null`` included) where leaving it out is acceptable
        problem = value_problem(value, spec) if spec and "x-source-type" not in spec else None
        if problem:
            return Match(False, problem[0], f"{name}.{param}: {problem[1]}")
        if param in answer:
            if not acceptable(value, accepted, spec, param):
                shown = [a for a in acceptable_values(answer[param]) if a != ""]
                return Match(False, "argument_value", f"{name}.{param}: got {value!r}, expected one of {shown!r}")
        else:
            return Match(False, "unexpected_argument", f"{name}.{param}={value!r} is not expected")
    for param in sorted(required - set(call.arguments)):
        return Match(False, "missing_argument", f"{name}: argument {param!r} is required")
    for param, listed in answer.items():
        if param not in call.arguments and not _omittable(acceptable_values(listed), props.get(param), param):
            return Match(False, "missing_argument", f"{name}: argument {param!r} is required here")
    return Match(True, "arguments_equivalent")


def answer_calls(answers: Sequence[Mapping[str, Mapping[str, Sequence[Any]]]]) -> list[tuple[str, dict]]:
    """BFCL's ``[{name: {param: [values]}}]`` as ``[(name, {param: [values]})]``."""
    return [(name, dict(args)) for entry in answers for name, args in entry.items()]


def match_answers(
    calls: Sequence[ToolCall],
    answers: Sequence[Mapping[str, Any]],
    schemas: Mapping[str, Mapping[str, Any]] | None = None,
) -> Match:
    """Calls against BFCL's expected calls: same count, same names (as a multiset) and an order-free
    perfect matching where every pair's arguments are acceptable."""
    schemas = schemas or {}
    expected = answer_calls(answers)
    if len(calls) != len(expected):
        return Match(False, "call_count", f"got {len(calls)} call(s), expected {len(expected)}")
    got, want = Counter(c.name for c in calls), Counter(n for n, _ in expected)
    if got != want:
        return Match(False, "function_name", f"got {sorted(got.elements())}, expected {sorted(want.elements())}")
    ok: list[list[bool]] = []
    first_failure: Match | None = None
    for call in calls:
        row = []
        for name, args in expected:
            m = match_call(call, name, args, schemas.get(name)) if call.name == name else Match(False, "function_name")
            row.append(m.ok)
            if not m.ok and call.name == name and first_failure is None:
                first_failure = m
        ok.append(row)
    if perfect_matching(ok):
        return Match(True, "arguments_equivalent")
    return first_failure or Match(False, "argument_value", "no consistent assignment of calls to expected calls")


def expert_call(
    name: str, answer: Mapping[str, Sequence[Any]], params: Mapping[str, Any] | None = None, language: str = "python"
) -> ToolCall:
    """A concrete call from an expected call: each parameter at its first acceptable value; parameters
    whose first acceptable value is ``""`` (omittable) are left out unless the schema requires them.
    Java/JavaScript values are written as source code, as BFCL expects."""
    props = (params or {}).get("properties") or {}
    required = set((params or {}).get("required") or [])
    args = {}
    for param, accepted in answer.items():
        accepted = acceptable_values(accepted)
        if param in required:
            accepted = [a for a in accepted if a != ""] or accepted
        if accepted[0] == "":
            continue
        value = _concrete(accepted[0])
        spec = props.get(param) or {}
        if language != "python" and "x-source-type" in spec:
            value = to_source(value, spec["x-source-type"], language, spec.get("x-source-items"))
        args[param] = value
    return ToolCall(name=name, arguments=args)


def _concrete(value: Any) -> Any:
    if isinstance(value, Mapping):  # nested answer: each key's first acceptable value
        out = {}
        for k, accepted in value.items():
            accepted = acceptable_values(accepted)
            if accepted[0] != "":
                out[k] = _concrete(accepted[0])
        return out
    if isinstance(value, list):
        return [_concrete(v) for v in value]
    return value
