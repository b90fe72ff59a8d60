"""Domain-free comparison helpers for verifiers: JSON-schema rules for tool-call arguments.

Strict types (:func:`type_matches`), meaning-preserving strings (:func:`normalize_string`), numbers of any size
(:func:`numbers_equal`), schema defaults, and order-free matching of parallel calls (:func:`calls_equivalent`);
every failure carries a :data:`CallReason` code. Every helper here accepts untrusted values and never raises.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pivotgym.types import ToolCall

__all__ = [
    "MAX_VALUE_DEPTH",
    "CallMatch",
    "CallReason",
    "arguments_equivalent",
    "calls_equivalent",
    "coerce_value",
    "is_case_insensitive",
    "normalize_string",
    "normalize_whitespace",
    "numbers_equal",
    "perfect_matching",
    "type_matches",
    "value_problem",
    "values_equivalent",
]

#: Why a comparison of calls failed (or that it succeeded). The tool-use verifier's reasons extend these.
CallReason = Literal[
    "equivalent",  # every call matched an expected call
    "call_count",  # a different number of calls
    "function_name",  # a call to a function the expert did not call (or not as often)
    "missing_argument",  # the expert's call sets a parameter (to a non-default value) the candidate leaves out
    "unexpected_argument",  # a parameter the function does not have, or one the expert left unset set to a non-default
    "wrong_type",  # a value of the wrong JSON type for its parameter (``"70"`` for an integer)
    "argument_value",  # the right type, a different value
]

#: nested values deeper than this are never equivalent (bounded recursion on untrusted input)
MAX_VALUE_DEPTH = 64

_WS = re.compile(r"\s+")
_CASE_INSENSITIVE = re.compile(r"case[\s_-]?insensitive", re.IGNORECASE)
_MISSING: Any = object()


def normalize_whitespace(text: str) -> str:
    """``text`` with every run of whitespace as one space and none around it."""
    return _WS.sub(" ", text).strip()


def normalize_string(text: str, *, case_insensitive: bool = False) -> str:
    """The meaning-preserving normal form of a string argument: canonical Unicode composition (NFC, so a
    composed and a decomposed ``é`` are one string) without surrounding whitespace (unless the string is
    only whitespace, e.g. a separator ``" "``, which is kept), case-folded only when
    ``case_insensitive``. Inner whitespace, punctuation and compatibility forms (full-width letters) are
    kept: ``my_data`` is not ``mydata`` and ``ｃｅｌｓｉｕｓ`` is not ``celsius``."""
    out = unicodedata.normalize("NFC", text)
    out = out.strip() or out  # a whitespace-only value (a separator) is all meaning: kept as it is
    return out.casefold() if case_insensitive else out


def is_case_insensitive(spec: Mapping[str, Any] | None) -> bool:
    """Does a parameter's schema say its value is case-insensitive? (``"x-case-insensitive": true`` or a
    description that says "case-insensitive".)"""
    if not isinstance(spec, Mapping):
        return False
    if spec.get("x-case-insensitive") is True:
        return True
    description = spec.get("description")
    return isinstance(description, str) and bool(_CASE_INSENSITIVE.search(description))


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "integer": (int,),
    "number": (int, float),
    "float": (int, float),
    "boolean": (bool,),
    "string": (str,),
    "array": (list, tuple),
    "tuple": (list, tuple),
    "object": (Mapping,),
    "dict": (Mapping,),
}


def type_matches(value: Any, type_name: str | None) -> bool:
    """Is ``value`` of JSON-schema type ``type_name``? An integral float passes for ``integer`` (``2.0`` is
    the number 2) and an integer for ``number``; a boolean is never a number and a numeric string is never a
    number or a boolean. Unknown or missing types accept anything."""
    if not isinstance(type_name, str) or type_name not in _JSON_TYPES:
        return True
    if isinstance(value, bool):
        return type_name == "boolean"
    if type_name == "integer" and isinstance(value, float):
        return math.isfinite(value) and value.is_integer()
    return isinstance(value, _JSON_TYPES[type_name])


def coerce_value(value: Any, type_name: str | None) -> Any:
    """Write ``value`` in its schema type's canonical form where that changes no meaning: an integral float
    for an ``integer`` parameter becomes an int (``2.0`` -> 2). Nothing else is converted: ``"2"``, ``"true"``
    and ``3`` for a string stay as they are (and fail :func:`type_matches`), as in BFCL's checker."""
    if type_name == "integer" and isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return value


def numbers_equal(a: float, b: float, *, rel_tol: float = 1e-9) -> bool:
    """Numeric equality that never raises: ints exactly (any size), floats within ``rel_tol``; an int too
    large for a float equals a float only when the float is integral and the same number."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    try:
        fa, fb = float(a), float(b)
    except OverflowError:  # one side is an int beyond float range
        big, other = (a, b) if isinstance(a, int) else (b, a)
        return isinstance(other, float) and math.isfinite(other) and other.is_integer() and int(other) == big
    if math.isnan(fa) or math.isnan(fb):
        return False
    if math.isinf(fa) or math.isinf(fb):
        return fa == fb
    return math.isclose(fa, fb, rel_tol=rel_tol)  # no absolute tolerance: 1.6e-19 is not -1.6e-19


def values_equivalent(
    a: Any,
    b: Any,
    *,
    spec: Mapping[str, Any] | None = None,
    loose_strings: bool = True,
    rel_tol: float = 1e-9,
    _depth: int = 0,
) -> bool:
    """Structural equality for argument values: numbers by value (``2 == 2.0``, booleans apart, any size),
    strings by :func:`normalize_string` when ``loose_strings`` (case-folded only where ``spec`` says the
    parameter is case-insensitive) or exactly otherwise, sequences element-wise, mappings key-wise. ``spec``
    (the parameter's JSON schema) is followed into ``items`` and ``properties``. Never raises."""
    if _depth > MAX_VALUE_DEPTH:
        return False
    spec = spec if isinstance(spec, Mapping) else {}
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return numbers_equal(a, b, rel_tol=rel_tol)
    if isinstance(a, str) and isinstance(b, str):
        if not loose_strings:
            return a == b
        fold = is_case_insensitive(spec)
        return normalize_string(a, case_insensitive=fold) == normalize_string(b, case_insensitive=fold)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        items = spec.get("items")
        return len(a) == len(b) and all(
            values_equivalent(x, y, spec=items, loose_strings=loose_strings, rel_tol=rel_tol, _depth=_depth + 1)
            for x, y in zip(a, b)
        )
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        found = spec.get("properties")
        props: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
        return a.keys() == b.keys() and all(
            values_equivalent(
                a[k], b[k], spec=props.get(k), loose_strings=loose_strings, rel_tol=rel_tol, _depth=_depth + 1
            )
            for k in a
        )
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - exotic objects: unequal rather than an exception
        return False


def value_problem(value: Any, spec: Mapping[str, Any] | None, _depth: int = 0) -> tuple[CallReason, str] | None:
    """Why ``value`` cannot be a value of a parameter with schema ``spec`` (its type and the types of its
    items and properties), or None when it can. Enums are not checked here: a value still has to equal the
    expert's, and no normalisation maps a value outside an enum onto a member."""
    if _depth > MAX_VALUE_DEPTH:
        return "wrong_type", f"nested deeper than {MAX_VALUE_DEPTH} levels"
    if not isinstance(spec, Mapping):
        return None
    type_name = spec.get("type")
    if not type_matches(value, type_name):
        return "wrong_type", f"{_short(value)} is not of type {type_name}"
    if isinstance(value, (list, tuple)) and isinstance(spec.get("items"), Mapping):
        for item in value:
            problem = value_problem(item, spec["items"], _depth + 1)
            if problem:
                return problem
    if isinstance(value, Mapping) and isinstance(spec.get("properties"), Mapping):
        for key, item in value.items():
            problem = value_problem(item, spec["properties"].get(key), _depth + 1)
            if problem:
                return problem
    return None


def _short(value: Any, limit: int = 80) -> str:
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a repr that raises (huge int digits limit) still gets a label
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass
class CallMatch:
    """The result of comparing tool calls: ``ok`` plus a reason code and per-call details."""

    ok: bool
    reason: CallReason
    details: list[str] = field(default_factory=list)


def arguments_equivalent(
    candidate: Mapping[str, Any],
    expected: Mapping[str, Any],
    *,
    schema: Mapping[str, Any] | None = None,
    loose_strings: bool = True,
) -> CallMatch:
    """Compare keyword arguments against the expert's, using the function's JSON schema (``parameters``)
    when given: types are checked (:func:`value_problem`), a parameter left out counts as its schema
    default on either side, unknown parameters fail, and so does leaving out one the expert set to a
    non-default value (which covers every required one). Argument order never matters. The schema is
    trusted only where the expert's call agrees with it: a parameter the expert passes is never "unknown",
    one the expert leaves out is never "required", a type the expert's own value violates is not enforced,
    and a value equal to the schema default (even ``null``) is always of an acceptable type."""
    schema = schema if isinstance(schema, Mapping) else {}
    found = schema.get("properties")
    props: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    for name in candidate:
        if props and name not in props and name not in expected:
            return CallMatch(False, "unexpected_argument", [f"the function has no parameter {name!r}"])
    for name in sorted(set(candidate) | set(expected)):
        spec = props.get(name) if isinstance(props.get(name), Mapping) else None
        default = spec.get("default", _MISSING) if spec else _MISSING
        got, want = candidate.get(name, default), expected.get(name, default)
        if got is _MISSING:
            return CallMatch(False, "missing_argument", [f"{name}: expected {_short(want)}, left out"])
        # the schema is trusted as far as the expert's action agrees with it, and the default is always valid
        trusted = want is _MISSING or value_problem(want, spec) is None
        at_default = default is not _MISSING and values_equivalent(got, default, spec=spec)
        if name in candidate and trusted and not at_default:
            problem = value_problem(got, spec)
            if problem:
                return CallMatch(False, problem[0], [f"{name}: {problem[1]}"])
        if want is _MISSING:
            return CallMatch(False, "unexpected_argument", [f"{name}={_short(got)} is not set by the expert"])
        type_name = spec.get("type") if spec else None
        if not values_equivalent(
            coerce_value(got, type_name), coerce_value(want, type_name), spec=spec, loose_strings=loose_strings
        ):
            if name not in candidate:  # left out, so the default applies, and the expert wanted another value
                return CallMatch(
                    False,
                    "missing_argument",
                    [(f"{name}: expected {_short(want)}, left out (its default is {_short(got)})")],
                )
            if name not in expected:
                return CallMatch(
                    False,
                    "unexpected_argument",
                    [(f"{name}={_short(got)} is not set by the expert (its default is {_short(want)})")],
                )
            return CallMatch(False, "argument_value", [f"{name}: got {_short(got)}, expected {_short(want)}"])
    return CallMatch(True, "equivalent")


def calls_equivalent(
    candidate: Sequence[ToolCall],
    expected: Sequence[ToolCall],
    *,
    schemas: Mapping[str, Mapping[str, Any]] | None = None,
    order_free: bool = True,
    loose_strings: bool = True,
) -> CallMatch:
    """Compare two lists of tool calls: same count, same names, equivalent arguments. With ``order_free``
    (parallel calls) the calls must form a perfect matching to the expected calls, in any order."""
    schemas = schemas or {}
    if len(candidate) != len(expected):
        return CallMatch(False, "call_count", [f"got {len(candidate)} calls, expected {len(expected)}"])
    if Counter(c.name for c in candidate) != Counter(e.name for e in expected):
        got, want = [c.name for c in candidate], [c.name for c in expected]
        return CallMatch(False, "function_name", [f"got {got}, expected {want}"])

    def match(c: ToolCall, e: ToolCall) -> CallMatch:
        if c.name != e.name:
            return CallMatch(False, "function_name", [f"got {c.name}, expected {e.name}"])
        return arguments_equivalent(c.arguments, e.arguments, schema=schemas.get(e.name), loose_strings=loose_strings)

    if not order_free:
        for c, e in zip(candidate, expected):
            result = match(c, e)
            if not result.ok:
                return result
        return CallMatch(True, "equivalent")
    table = [[match(c, e) for e in expected] for c in candidate]
    if perfect_matching([[m.ok for m in row] for row in table]):
        return CallMatch(True, "equivalent")
    # the most telling failure: the first candidate call with no match, against a same-name expected call
    for row in table:
        if not any(m.ok for m in row):
            return next((m for m in row if m.reason != "function_name"), row[0])
    return CallMatch(False, "argument_value", ["no consistent assignment of calls to expected calls"])


def perfect_matching(ok: Sequence[Sequence[bool]]) -> bool:
    """Can every row be assigned a distinct column where ``ok[row][col]``? (Kuhn's augmenting paths.)"""
    n = len(ok)
    owner = [-1] * (len(ok[0]) if n else 0)

    def augment(row: int, seen: list[bool]) -> bool:
        for col, good in enumerate(ok[row]):
            if good and not seen[col]:
                seen[col] = True
                if owner[col] < 0 or augment(owner[col], seen):
                    owner[col] = row
                    return True
        return False

    return all(augment(r, [False] * len(owner)) for r in range(n))
