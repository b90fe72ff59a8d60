"""Domain-free comparison helpers for verifiers: JSON-schema rules for tool-call arguments.

Strict types (:func:`type_matches`), meaning-preserving strings (:func:`normalize_string`; case folded only for
free text, :func:`string_kind` and :func:`folds_case`), numbers of any size (:func:`numbers_equal`), defaults from
the schema or its description, coerced to the parameter's type (:func:`param_default`), and order-free matching of
parallel calls (:func:`calls_equivalent`); every failure carries a :data:`CallReason` code. Every helper here
accepts untrusted values and never raises; every regular expression runs in time linear in its input.
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
    "description_default",
    "folds_case",
    "is_case_insensitive",
    "normalize_string",
    "normalize_whitespace",
    "numbers_equal",
    "param_default",
    "perfect_matching",
    "string_kind",
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
    "text_not_decidable",  # free text differing beyond case and whitespace: a synonym or another value, unknowable
]

#: What a string parameter holds, by its schema and its name/description (:func:`string_kind`).
StringKind = Literal[
    "free_text", "enum", "format", "pattern", "identifier", "path", "url", "email", "code", "not_string"
]

#: nested values deeper than this are never equivalent (bounded recursion on untrusted input)
MAX_VALUE_DEPTH = 64

_WS = re.compile(r"\s+")
_CASE_INSENSITIVE = re.compile(r"case[\s_-]?insensitive|not case[\s_-]?sensitive", re.IGNORECASE)
_CASE_SENSITIVE = re.compile(r"(?<!not )\bcase[\s_-]?sensitive", re.IGNORECASE)
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


# Words that make a string parameter something other than free text, by what it then is. A parameter's *name* is
# split into words (snake_case, camelCase, digits); its *description* is searched for the shorter, less ambiguous
# list. Either is a reason to keep case: a wrong guess costs a false negative, never a false positive.
_NAME_WORDS: dict[str, StringKind] = {
    **dict.fromkeys(
        "id ids uuid uuids guid key keys token tokens password passwd secret hash checksum sha md5 username usernames "
        "login handle slug sku isbn iban ticker symbol symbols ip mac hex base64 identifier identifiers".split(),
        "identifier",
    ),
    **dict.fromkeys(
        "path paths file files filename filenames filepath dir dirs dirname directory directories folder folders "
        "source destination".split(),
        "path",
    ),
    **dict.fromkeys("url urls uri uris link links endpoint href hostname host domain".split(), "url"),
    **dict.fromkeys("email emails mail".split(), "email"),
    **dict.fromkeys(
        "code codes query queries expression expressions expr regex regexp pattern sql script command cmd formula "
        "equation function func lambda snippet program selector xpath jsonpath".split(),
        "code",
    ),
}
_DESCRIPTION_WORDS: dict[str, StringKind] = {
    **dict.fromkeys(
        "id ids identifier identifiers uuid token tokens password passwords hash username".split(), "identifier"
    ),
    **dict.fromkeys("path paths filename filenames file files directory directories folder folders".split(), "path"),
    **dict.fromkeys("url urls uri uris".split(), "url"),
    **dict.fromkeys("email emails e-mail".split(), "email"),
    **dict.fromkeys("regex sql code expression query formula equation".split(), "code"),
}
_CAMEL = re.compile(r"[a-z0-9]+|[A-Z][a-z0-9]*")
_WORDS = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)?")
_MAX_SCHEMA_TEXT = 2000  # description text read per parameter: the rules need its first sentences only


def _name_words(name: str) -> list[str]:
    return [w.lower() for w in _CAMEL.findall(name[:200])]


def string_kind(name: str | None, spec: Mapping[str, Any] | None) -> StringKind:
    """What a string parameter holds, decided by its schema first (``enum``/``const``, ``format``, ``pattern``,
    source code of another language), then by its name's words (``file_name``, ``userId``, ``query``...), then by
    its description's (``"the file path"``, ``"the user's ID"``...). ``"free_text"`` is what is left: a string
    parameter with none of these, whose case carries no meaning (a city, a genre, a title). A parameter whose
    schema type is not ``"string"`` is ``"not_string"``."""
    if not isinstance(spec, Mapping) or spec.get("type") != "string":
        return "not_string"
    if "enum" in spec or "const" in spec:
        return "enum"
    if "format" in spec:
        return "format"
    if "pattern" in spec:
        return "pattern"
    if "x-source-type" in spec:
        return "code"
    for word in _name_words(name) if isinstance(name, str) else ():
        if word in _NAME_WORDS:
            return _NAME_WORDS[word]
    description = spec.get("description")
    if isinstance(description, str):
        for word in _WORDS.findall(description[:_MAX_SCHEMA_TEXT].lower()):
            if word in _DESCRIPTION_WORDS:
                return _DESCRIPTION_WORDS[word]
    return "free_text"


def folds_case(name: str | None, spec: Mapping[str, Any] | None) -> bool:
    """Is a string parameter compared without case? Explicit marks decide first (``"x-case-sensitive": true`` or a
    description saying "case-sensitive": no; ``"x-case-insensitive": true`` or "case-insensitive": yes, even for an
    enum or an identifier); otherwise only free text (:func:`string_kind`) is folded."""
    if isinstance(spec, Mapping):
        if spec.get("x-case-sensitive") is True:
            return False
        if is_case_insensitive(spec):
            return True
        description = spec.get("description")
        if isinstance(description, str) and _CASE_SENSITIVE.search(description[:_MAX_SCHEMA_TEXT]):
            return False
    return string_kind(name, spec) == "free_text"


# "Default is 'cm'", "defaults to 10", "Default: true", "default value is None", "(default=5)": the word, an optional
# "value", an optional verb or sign, then one literal. Read on whitespace-collapsed, length-capped text with bounded
# repetitions and no nested quantifiers, so the search is linear in the description's length.
_DEFAULT = re.compile(
    r"\bdefault(?:s|ed)?(?: value)?(?: (?:is|to|of|will be|is set to|=)| ?[:=])? ?"
    r"(?:'(?P<sq>[^'\n]{0,200})'|\"(?P<dq>[^\"\n]{0,200})\"|`(?P<bq>[^`\n]{0,200})`"
    r"|(?P<num>[-+]?\d{1,30}(?:\.\d{1,30})?(?:[eE][-+]?\d{1,4})?)(?![\w:/-]|\.\d)"
    r"|(?P<word>true|false|none|null)\b)",
    re.IGNORECASE,
)
_INT = re.compile(r"[-+]?\d{1,4300}")
_FLOAT = re.compile(r"[-+]?(?:\d{1,400}(?:\.\d{0,400})?|\.\d{1,400})(?:[eE][-+]?\d{1,4})?")


def description_default(spec: Mapping[str, Any] | None) -> tuple[bool, Any]:
    """``(True, value)`` when a parameter's description states its default ("Default is 'cm'", "defaults to 10",
    "Default: true", "default value is None"), coerced to the parameter's type (:func:`param_default`); ``(False,
    None)`` when it states none, states several different ones, or one that its type cannot hold."""
    description = spec.get("description") if isinstance(spec, Mapping) else None
    if not isinstance(description, str) or "default" not in description.lower():
        return False, None
    found: list[tuple[bool, Any]] = []
    for m in _DEFAULT.finditer(normalize_whitespace(description[:_MAX_SCHEMA_TEXT])):
        quoted = next((m.group(g) for g in ("sq", "dq", "bq") if m.group(g) is not None), None)
        if quoted is not None:
            raw: Any = quoted
        elif m.group("num") is not None:
            raw = _number(m.group("num"))
            if spec.get("type") == "string":  # type: ignore[union-attr]
                raw = m.group("num")
        else:
            word = m.group("word").lower()
            raw = None if word in ("none", "null") else word == "true"
            if spec.get("type") == "string" and raw is not None:  # type: ignore[union-attr]
                raw = m.group("word")
        found.append(_coerce_default(raw, spec.get("type")))  # type: ignore[union-attr]
    values = [v for ok, v in found if ok]
    if not values or len(values) != len(found):
        return False, None
    first = values[0]
    if any(not (type(v) is type(first) and v == first) for v in values[1:]):
        return False, None  # "defaults to 'a' for X and 'b' for Y": no single default
    return True, first


def _number(text: str) -> Any:
    try:
        if _INT.fullmatch(text):
            return int(text)
        value = float(text)
        return value if math.isfinite(value) else None
    except ValueError:
        return None


def _coerce_default(value: Any, type_name: Any) -> tuple[bool, Any]:
    """A stated default in its parameter's type: ``"false"`` for a boolean is ``False``, ``"10"`` for an integer
    is 10, ``2.0`` for an integer is 2; ``None`` stays ``None`` (a null default). ``(False, None)`` when the
    value cannot be of that type."""
    if value is None or not isinstance(type_name, str) or type_name not in _JSON_TYPES:
        return True, value
    if type_name == "boolean" and isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return True, value.strip().lower() == "true"
    if type_name in ("integer", "number", "float") and isinstance(value, str) and not isinstance(value, bool):
        text = value.strip()
        if _INT.fullmatch(text) or (type_name != "integer" and _FLOAT.fullmatch(text)):
            value = _number(text)
        elif type_name == "integer" and _FLOAT.fullmatch(text):
            value = _number(text)
    if type_name == "string" and isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    value = coerce_value(value, type_name)
    return (True, value) if value is not None and type_matches(value, type_name) else (False, None)


def param_default(spec: Mapping[str, Any] | None) -> tuple[bool, Any]:
    """A parameter's default as ``(found, value)``: the schema's ``default`` coerced to the parameter's type
    (``"false"`` for a boolean is ``False``; a default its type cannot hold is kept as written, since the
    schema's author meant it), else one its description states (:func:`description_default`). A ``null``
    default is ``(True, None)``."""
    if not isinstance(spec, Mapping):
        return False, None
    if "default" in spec:
        ok, value = _coerce_default(spec["default"], spec.get("type"))
        return True, value if ok else spec["default"]
    return description_default(spec)


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
    name: str | None = None,
    loose_strings: bool = True,
    rel_tol: float = 1e-9,
    _depth: int = 0,
) -> bool:
    """Structural equality for argument values: numbers by value (``2 == 2.0``, booleans apart, any size),
    strings by :func:`normalize_string` when ``loose_strings`` (case-folded where :func:`folds_case` says so for
    the parameter ``name`` with schema ``spec``: free text, or an explicit case-insensitive mark) or exactly
    otherwise, sequences element-wise, mappings key-wise. ``spec`` (the parameter's JSON schema) is followed into
    ``items`` (which keep the parameter's name) and ``properties`` (named by their keys). Never raises."""
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
        fold = folds_case(name, spec)
        return normalize_string(a, case_insensitive=fold) == normalize_string(b, case_insensitive=fold)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        items = spec.get("items")
        return len(a) == len(b) and all(
            values_equivalent(
                x, y, spec=items, name=name, loose_strings=loose_strings, rel_tol=rel_tol, _depth=_depth + 1
            )
            for x, y in zip(a, b)
        )
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        found = spec.get("properties")
        props: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
        return a.keys() == b.keys() and all(
            values_equivalent(
                a[k],
                b[k],
                spec=props.get(k),
                name=k if isinstance(k, str) else None,
                loose_strings=loose_strings,
                rel_tol=rel_tol,
                _depth=_depth + 1,
            )
            for k in a
        )
    try:
        return bool(a == b)
    except Exception:
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
    except Exception:
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
    default (:func:`param_default`: the schema's, or one its description states) on either side, unknown
    parameters fail, and so does leaving out a required one the expert set (even at its default) or any one the
    expert set to a non-default value. Free text (:func:`string_kind`) that still differs beyond case is
    ``text_not_decidable``: a synonym cannot be told from another value by the expert's call alone. Argument
    order never matters. The schema is
    trusted only where the expert's call agrees with it: a parameter the expert passes is never "unknown",
    one the expert leaves out is never "required", a type the expert's own value violates is not enforced,
    and a value equal to the schema default (even ``null``) is always of an acceptable type."""
    schema = schema if isinstance(schema, Mapping) else {}
    found = schema.get("properties")
    props: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    for name in candidate:
        if props and name not in props and name not in expected:
            return CallMatch(False, "unexpected_argument", [f"the function has no parameter {name!r}"])
    listed = schema.get("required")
    required = {r for r in listed if isinstance(r, str)} if isinstance(listed, (list, tuple)) else set()
    for name in sorted(set(candidate) | set(expected)):
        spec = props.get(name) if isinstance(props.get(name), Mapping) else None
        if name in required and name in expected and name not in candidate:  # even at its default: the call needs it
            return CallMatch(False, "missing_argument", [f"{name}: required, left out"])
        has_default, stated = param_default(spec)
        default = stated if has_default else _MISSING
        got, want = candidate.get(name, default), expected.get(name, default)
        if got is _MISSING:
            return CallMatch(False, "missing_argument", [f"{name}: expected {_short(want)}, left out"])
        # the schema is trusted as far as the expert's action agrees with it, and the default is always valid
        trusted = want is _MISSING or value_problem(want, spec) is None
        at_default = default is not _MISSING and values_equivalent(got, default, spec=spec, name=name)
        if name in candidate and trusted and not at_default:
            problem = value_problem(got, spec)
            if problem:
                return CallMatch(False, problem[0], [f"{name}: {problem[1]}"])
        if want is _MISSING:
            return CallMatch(False, "unexpected_argument", [f"{name}={_short(got)} is not set by the expert"])
        type_name = spec.get("type") if spec else None
        if not values_equivalent(
            coerce_value(got, type_name),
            coerce_value(want, type_name),
            spec=spec,
            name=name,
            loose_strings=loose_strings,
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
            if (
                isinstance(got, str)
                and isinstance(want, str)
                and string_kind(name, spec) == "free_text"
                and normalize_string(got, case_insensitive=True) != normalize_string(want, case_insensitive=True)
            ):  # free text that differs beyond case (case alone differs only where the schema says it matters)
                return CallMatch(
                    False,
                    "text_not_decidable",
                    [
                        f"{name}: got {_short(got)}, expected {_short(want)}; not decidable from the expert's call: "
                        "a synonym cannot be told from a different value"
                    ],
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
