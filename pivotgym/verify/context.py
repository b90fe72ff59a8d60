"""Verifiers: the protocol, the context they judge in, exact match, and shared comparison helpers.

A verifier answers one question: does ``candidate`` (raw assistant text) achieve, from the state at turn t,
what the expert's action achieved there? Domains layer cheap checks first (parse, tool name, target), then
structural argument comparison, then execution from the exact state (via :meth:`VerifyContext.env`).

Any turn can be judged, not only one of an env's own tasks: :meth:`VerifyContext.from_turn` takes the
messages before the turn, the expert's action and (for tool use) the offered functions, and
``pivotgym verify`` does the same from a JSON file. The comparison helpers below are domain-free JSON-schema
rules: strict types (:func:`type_matches`), meaning-preserving strings (:func:`normalize_string`), numbers
of any size (:func:`numbers_equal`), schema defaults, and order-free matching of parallel calls; every
failure carries a :data:`CallReason` code.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import traceback
import unicodedata
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from pivotgym.types import Task, ToolCall, Trajectory, Turn, Verdict

if TYPE_CHECKING:
    from pivotgym.env import AgentEnv

#: builds an env from its id for a :class:`VerifyContext` without ``env_factory``. This module sits below the
#: registry and never imports it: :mod:`pivotgym.registry` installs its ``make`` here when it is imported (which
#: ``import pivotgym`` always does).
_env_maker: list[Callable[..., AgentEnv]] = []


def set_env_maker(maker: Callable[..., AgentEnv]) -> None:
    """Install how contexts build an env by id: ``maker(env_id, **env_kwargs)``."""
    _env_maker[:] = [maker]


@runtime_checkable
class Verifier(Protocol):
    """Judges a candidate action against the expert's at one state. ``version`` keys caches: bump it
    whenever a change could alter a verdict."""

    name: str
    version: str

    def verify(self, context: VerifyContext, candidate: str) -> Verdict: ...



def trajectory_tools(trajectory: Trajectory) -> list[dict[str, Any]] | None:
    """The functions a trajectory offered (``metadata["tools"]``, OpenAI form), or None when it names none.

    Trajectories imported from NeMo-Gym rows carry them; the profiler and the trainers pass them into every
    :class:`VerifyContext` so such turns are judged against their own schemas, not without any."""
    tools = (trajectory.metadata or {}).get("tools")
    return [dict(t) for t in tools if isinstance(t, dict)] if isinstance(tools, list) else None


@dataclass
class VerifyContext:
    """Everything a verifier may look at for one state: the turn (prefix + expert message) and, lazily,
    an env positioned at that turn.

    Picklable: the env is rebuilt from ``turn.env_id`` in whichever process verifies.
    """

    turn: Turn
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    env_factory: Callable[[], AgentEnv] | None = None
    #: the functions offered at this turn (OpenAI ``tools``), when they travel with the turn instead of
    #: coming from the env's task (an imported row, a user's own trajectory)
    tools: list[dict[str, Any]] | None = None
    _fresh: AgentEnv | None = field(default=None, repr=False)
    _positioned: AgentEnv | None = field(default=None, repr=False)
    _snapshot: Any = field(default=None, repr=False)
    _task: Any = field(default=None, repr=False)
    _task_resolved: bool = field(default=False, repr=False)
    _memo: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_turn(
        cls,
        env_id: str,
        messages: Sequence[Mapping[str, Any]],
        expert: Mapping[str, Any] | str | Sequence[ToolCall | Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        task_id: str | None = None,
        env_kwargs: Mapping[str, Any] | None = None,
        env_factory: Callable[[], AgentEnv] | None = None,
    ) -> VerifyContext:
        """A context for any turn, not only one of the env's own tasks: the chat ``messages`` before the
        turn, the ``expert``'s action there and, for tool use, the ``tools`` offered (OpenAI form).

        ``expert`` is an assistant message, its plain text, or its tool calls (``ToolCall`` objects or
        ``{"name", "arguments"}`` dicts). ``task_id`` names one of the env's tasks when the turn comes from
        one (a verifier may then use what the task knows, e.g. BFCL's acceptable answers); by default it is
        a content hash, which no env task has, so verifiers judge from the expert's action alone.
        """
        prefix = [dict(m) for m in messages]
        expert_msg = expert_message(expert)
        tool_list = [dict(t) for t in tools] if tools is not None else None
        if task_id is None:
            digest = hashlib.sha256(json.dumps([prefix, expert_msg, tool_list], sort_keys=True, default=str)
                                    .encode("utf-8", "surrogatepass")).hexdigest()
            task_id = f"adhoc:{digest[:16]}"
        turn = Turn(trajectory_id=f"{task_id}:turn", env_id=env_id, task_id=task_id,
                    turn=sum(1 for m in prefix if m.get("role") == "assistant"),
                    prefix=prefix, expert=expert_msg)  # type: ignore[arg-type]
        return cls(turn, env_kwargs=dict(env_kwargs or {}), env_factory=env_factory, tools=tool_list)

    @classmethod
    def from_trajectory(cls, trajectory: Trajectory, n: int, **kwargs: Any) -> VerifyContext:
        """The context of assistant turn ``n`` of a trajectory, carrying ``metadata["tools"]`` when the
        trajectory has them (trajectories imported from NeMo-Gym rows do)."""
        return cls(trajectory.turn(n), tools=trajectory_tools(trajectory), **kwargs)

    @property
    def env_id(self) -> str:
        return self.turn.env_id

    def memo(self, key: str, make: Callable[[], Any]) -> Any:
        """A value a verifier derives from this context once (the offered functions' schemas, the expert's
        decoded calls) and reuses for every later candidate judged in the same context."""
        if key not in self._memo:
            self._memo[key] = make()
        return self._memo[key]

    def known_task(self) -> Task | None:
        """The env's task this turn belongs to, or None for a turn from elsewhere (see :meth:`from_turn`)."""
        if not self._task_resolved:
            self._task_resolved = True
            if not self.turn.task_id.startswith("adhoc:"):
                try:
                    self._task = self.fresh_env().get_task(self.turn.task_id)
                except (KeyError, LookupError):
                    self._task = None
        return self._task

    @property
    def expert(self) -> dict[str, Any]:
        return dict(self.turn.expert)

    def _make(self) -> AgentEnv:
        if self.env_factory is not None:
            return self.env_factory()
        if not _env_maker:
            raise RuntimeError(f"{self.turn.env_id}: no env registry is installed; `import pivotgym` first or "
                               "pass env_factory")
        return _env_maker[0](self.turn.env_id, **self.env_kwargs)

    def fresh_env(self) -> AgentEnv:
        """An env of the right id and settings, not reset (for stateless helpers like rendering)."""
        if self._fresh is None:
            self._fresh = self._make()
        return self._fresh

    @property
    def expert_text(self) -> str:
        """The expert's action as the text a policy would emit."""
        return self.fresh_env().render_action(self.turn.expert)

    @property
    def task(self) -> Task:
        return self.fresh_env().get_task(self.turn.task_id)

    def env(self) -> AgentEnv:
        """The env in the exact state before the expert's action at this turn.

        The first call replays the prefix; later calls restore the snapshot taken then, so a verifier can
        step freely (candidate, then expert) and ask again for a clean copy of the state.
        """
        if self._positioned is None:
            env = self._make()
            env.goto(self.turn.task_id, self.turn.prefix)
            self._positioned = env
            self._snapshot = env.snapshot()
        else:
            self._positioned.restore(self._snapshot)
        return self._positioned

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.update(_fresh=None, _positioned=None, _snapshot=None, _task=None, _task_resolved=False, _memo={})
        return state


def expert_message(expert: Mapping[str, Any] | str | Sequence[ToolCall | Mapping[str, Any]]) -> dict[str, Any]:
    """An assistant message from an expert action given as a message, its text, or its tool calls."""
    if isinstance(expert, str):
        return {"role": "assistant", "content": expert}
    if isinstance(expert, Mapping) and ("role" in expert or "tool_calls" in expert or "content" in expert):
        msg = dict(expert)
        msg["role"] = "assistant"
        msg["content"] = msg.get("content") or ""
        return msg
    items = [expert] if isinstance(expert, Mapping) else list(expert)
    calls = []
    for item in items:
        if isinstance(item, ToolCall):
            calls.append(item.to_dict())
        elif isinstance(item, Mapping):
            fn = item.get("function", item)
            if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
                raise ValueError(f"an expert tool call needs a \"name\" (got {item!r:.80}); write "
                                 '{"name": "f", "arguments": {...}}')
            args = fn.get("arguments", fn.get("parameters", {}))
            calls.append({"id": item.get("id") or f"call_{len(calls)}", "type": "function",
                          "function": {"name": fn["name"], "arguments": args if isinstance(args, str)
                                       else json.dumps(args, ensure_ascii=False)}})
        else:
            raise ValueError(f"an expert action is a message, a text or tool calls, got {type(item).__name__}")
    return {"role": "assistant", "content": "", "tool_calls": calls}


def verify_safely(verifier: Verifier, context: VerifyContext, candidate: str) -> Verdict:
    """Run a verifier, turning any exception into a failing verdict with the error as its reason."""
    try:
        verdict = verifier.verify(context, candidate)
    except Exception as exc:  # noqa: BLE001 - a broken verifier must not kill a profiling run
        return Verdict.fail(f"verifier_error: {exc!r}", traceback=traceback.format_exc(limit=5))
    if not isinstance(verdict, Verdict):
        return Verdict.fail(f"verifier_error: {type(verifier).__name__}.verify returned {type(verdict).__name__}")
    return verdict


class ExactMatchVerifier:
    """Reward 1 only when the candidate text equals the expert's text up to surrounding/inner whitespace.

    The ablation baseline: every domain's functional verifier should credit at least what this credits.
    """

    name = "exact"
    version = "1"

    def verify(self, context: VerifyContext, candidate: str) -> Verdict:
        expected = normalize_whitespace(context.expert_text)
        got = normalize_whitespace(candidate if isinstance(candidate, str) else "")
        if got == expected:
            return Verdict.ok("exact_match")
        return Verdict.fail("text_differs", expected=expected[:200], got=got[:200])


# ---------------------------------------------------------------------------- comparison helpers
#: Why a comparison of calls failed (or that it succeeded). The tool-use verifier's reasons extend these.
CallReason = Literal[
    "equivalent",           # every call matched an expected call
    "call_count",           # a different number of calls
    "function_name",        # a call to a function the expert did not call (or not as often)
    "missing_argument",     # the expert's call sets a parameter (to a non-default value) the candidate leaves out
    "unexpected_argument",  # a parameter the function does not have, or one the expert left unset set to a non-default
    "wrong_type",           # a value of the wrong JSON type for its parameter (``"70"`` for an integer)
    "argument_value",       # the right type, a different value
]

#: nested values deeper than this are never equivalent (bounded recursion on untrusted input)
MAX_VALUE_DEPTH = 64

_WS = re.compile(r"\s+")
_CASE_INSENSITIVE = re.compile(r"case[\s_-]?insensitive", re.IGNORECASE)
_MISSING: Any = object()


def normalize_whitespace(text: str) -> str:
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


def numbers_equal(a: int | float, b: int | float, *, rel_tol: float = 1e-9) -> bool:
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


def values_equivalent(a: Any, b: Any, *, spec: Mapping[str, Any] | None = None, loose_strings: bool = True,
                      rel_tol: float = 1e-9, _depth: int = 0) -> bool:
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
            for x, y in zip(a, b))
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        props = spec.get("properties") if isinstance(spec.get("properties"), Mapping) else {}
        return a.keys() == b.keys() and all(
            values_equivalent(a[k], b[k], spec=props.get(k), loose_strings=loose_strings, rel_tol=rel_tol,
                              _depth=_depth + 1) for k in a)
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
    props: Mapping[str, Any] = schema.get("properties") if isinstance(schema.get("properties"), Mapping) else {}
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
        if not values_equivalent(coerce_value(got, type_name), coerce_value(want, type_name), spec=spec,
                                 loose_strings=loose_strings):
            if name not in candidate:  # left out, so the default applies, and the expert wanted another value
                return CallMatch(False, "missing_argument", [f"{name}: expected {_short(want)}, left out "
                                                             f"(its default is {_short(got)})"])
            if name not in expected:
                return CallMatch(False, "unexpected_argument", [f"{name}={_short(got)} is not set by the expert "
                                                                f"(its default is {_short(want)})"])
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
