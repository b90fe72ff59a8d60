"""Verifiers: the protocol, the context they judge in, exact match, and shared comparison helpers.

A verifier answers one question: does ``candidate`` (raw assistant text) achieve, from the state at turn t,
what the expert's action achieved there? Domains layer cheap checks first (parse, tool name, target), then
structural argument comparison, then execution from the exact state (via :meth:`VerifyContext.env`).
"""

from __future__ import annotations

import math
import re
import traceback
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from pivotgym.types import Task, ToolCall, Turn, Verdict

if TYPE_CHECKING:
    from pivotgym.env import AgentEnv


@runtime_checkable
class Verifier(Protocol):
    """Judges a candidate action against the expert's at one state. ``version`` keys caches: bump it
    whenever a change could alter a verdict."""

    name: str
    version: str

    def verify(self, context: VerifyContext, candidate: str) -> Verdict: ...


@dataclass
class VerifyContext:
    """Everything a verifier may look at for one state: the turn (prefix + expert message) and, lazily,
    an env positioned at that turn.

    Picklable: the env is rebuilt from ``turn.env_id`` in whichever process verifies.
    """

    turn: Turn
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    env_factory: Callable[[], AgentEnv] | None = None
    _fresh: AgentEnv | None = field(default=None, repr=False)
    _positioned: AgentEnv | None = field(default=None, repr=False)
    _snapshot: Any = field(default=None, repr=False)

    @property
    def env_id(self) -> str:
        return self.turn.env_id

    @property
    def expert(self) -> dict[str, Any]:
        return dict(self.turn.expert)

    def _make(self) -> AgentEnv:
        if self.env_factory is not None:
            return self.env_factory()
        from pivotgym.registry import make

        return make(self.turn.env_id, **self.env_kwargs)

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
        state.update(_fresh=None, _positioned=None, _snapshot=None)
        return state


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
_WS = re.compile(r"\s+")
_STRING_NOISE = re.compile(r"[\s,./\-_*^'\"`]")


def normalize_whitespace(text: str) -> str:
    return _WS.sub(" ", text).strip()


def normalize_string(text: str) -> str:
    """Loose string identity for argument values: Unicode-normalised, case-folded, without whitespace and
    common punctuation (so ``"New York, NY"`` equals ``"new york ny"``)."""
    return _STRING_NOISE.sub("", unicodedata.normalize("NFKC", text).casefold())


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "integer": (int,),
    "number": (int, float),
    "float": (int, float),
    "boolean": (bool,),
    "string": (str,),
    "array": (list, tuple),
    "tuple": (list, tuple),
    "object": (dict,),
    "dict": (dict,),
}


def coerce_value(value: Any, type_name: str | None) -> Any:
    """Coerce ``value`` to a JSON-schema type where that is lossless (``"2"``→2, ``2.0``→2 for integer,
    ``2``→2.0 for number, ``"true"``→True); otherwise return it unchanged."""
    if type_name is None:
        return value
    try:
        if type_name == "integer":
            if isinstance(value, bool):
                return value
            if isinstance(value, float) and value.is_integer():
                return int(value)
            if isinstance(value, str) and re.fullmatch(r"[+-]?\d+", value.strip()):
                return int(value)
        elif type_name in ("number", "float"):
            if isinstance(value, bool):
                return value
            if isinstance(value, (int, float)):
                return float(value)
            if isinstance(value, str):
                return float(value.strip())
        elif type_name == "boolean" and isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        elif type_name == "string" and isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
    except ValueError:
        return value
    return value


def values_equivalent(a: Any, b: Any, *, loose_strings: bool = True, rel_tol: float = 1e-9) -> bool:
    """Structural equality for argument values: numbers by value (``2 == 2.0``, booleans apart), strings
    normalised when ``loose_strings``, sequences element-wise, mappings key-wise."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(float(a), float(b), rel_tol=rel_tol, abs_tol=1e-12)
    if isinstance(a, str) and isinstance(b, str):
        return normalize_string(a) == normalize_string(b) if loose_strings else a == b
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(values_equivalent(x, y, loose_strings=loose_strings) for x, y in zip(a, b))
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(values_equivalent(a[k], b[k], loose_strings=loose_strings) for k in a)
    return a == b


@dataclass
class CallMatch:
    """The result of comparing tool calls: ``ok`` plus a reason tag and per-call details."""

    ok: bool
    reason: str
    details: list[str] = field(default_factory=list)


def arguments_equivalent(
    candidate: Mapping[str, Any],
    expected: Mapping[str, Any],
    *,
    schema: Mapping[str, Any] | None = None,
    loose_strings: bool = True,
) -> CallMatch:
    """Compare keyword arguments, using the function's JSON schema (``parameters``) when given to coerce
    types and to fill omitted optional arguments with their defaults on both sides."""
    props: Mapping[str, Any] = (schema or {}).get("properties", {}) or {}
    cand, exp = dict(candidate), dict(expected)
    for name, spec in props.items():
        if isinstance(spec, Mapping) and "default" in spec:
            cand.setdefault(name, spec["default"])
            exp.setdefault(name, spec["default"])
    missing = sorted(set(exp) - set(cand))
    extra = sorted(set(cand) - set(exp))
    if missing or extra:
        return CallMatch(False, "argument_names", [f"missing={missing}", f"unexpected={extra}"])
    for name in exp:
        type_name = props.get(name, {}).get("type") if isinstance(props.get(name), Mapping) else None
        a, b = coerce_value(cand[name], type_name), coerce_value(exp[name], type_name)
        if not values_equivalent(a, b, loose_strings=loose_strings):
            return CallMatch(False, "argument_value", [f"{name}: got {a!r}, expected {b!r}"])
    return CallMatch(True, "arguments_equivalent")


def calls_equivalent(
    candidate: Sequence[ToolCall],
    expected: Sequence[ToolCall],
    *,
    schemas: Mapping[str, Mapping[str, Any]] | None = None,
    order_free: bool = True,
    loose_strings: bool = True,
) -> CallMatch:
    """Compare two lists of tool calls: same count, same names, equivalent arguments. With ``order_free``
    (parallel calls) each expected call is matched to a distinct candidate call in any order."""
    schemas = schemas or {}
    if len(candidate) != len(expected):
        return CallMatch(False, "call_count", [f"got {len(candidate)} calls, expected {len(expected)}"])
    if sorted(c.name for c in candidate) != sorted(c.name for c in expected):
        got = [c.name for c in candidate]
        want = [c.name for c in expected]
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
        return CallMatch(True, "calls_equivalent")
    used: set[int] = set()
    for e in expected:
        last = CallMatch(False, "function_name", [f"no call to {e.name}"])
        for i, c in enumerate(candidate):
            if i in used:
                continue
            result = match(c, e)
            if result.ok:
                used.add(i)
                break
            if c.name == e.name:
                last = result
        else:
            return last
    return CallMatch(True, "calls_equivalent")
