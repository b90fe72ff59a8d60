"""The data every part of pivotgym exchanges.

Messages are plain OpenAI-style chat dicts (``{"role", "content", "tool_calls"?, "tool_call_id"?,
"name"?}``) so that they serialise to JSON lines unchanged and feed a chat template directly. The other
records are dataclasses with ``to_dict``/``from_dict`` that follow the JSONL contract in
``docs/formats.md`` (the architecture's "Data formats" section).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import types
import typing
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict, TypeGuard

from pivotgym.errors import RecordError

Role = Literal["system", "user", "assistant", "tool"]


class ToolCallFunction(TypedDict):
    name: str
    arguments: str  # JSON-encoded, as in the OpenAI API


class ToolCallDict(TypedDict):
    id: str
    type: Literal["function"]
    function: ToolCallFunction


class Message(TypedDict, total=False):
    """One chat message, OpenAI style. ``content`` is always a string (possibly empty)."""

    role: Role
    content: str
    tool_calls: list[ToolCallDict]
    tool_call_id: str
    name: str


@dataclass(frozen=True)
class ToolCall:
    """A parsed function call: a name and decoded keyword arguments."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    id: str | None = None

    def to_dict(self) -> ToolCallDict:
        digest = uuid.uuid5(uuid.NAMESPACE_OID, _encodable(self.name + canonical_json(self.arguments)))
        return {
            "id": self.id or f"call_{digest.hex[:12]}",
            "type": "function",
            "function": {"name": self.name, "arguments": json.dumps(self.arguments, ensure_ascii=False)},
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ToolCall:
        fn = data.get("function", data)
        args = fn.get("arguments", {})
        if isinstance(args, str):
            args = json.loads(args) if args.strip() else {}
        return cls(name=fn["name"], arguments=dict(args), id=data.get("id"))


def message(role: Role, content: str = "", **extra: Any) -> Message:
    """Build a chat message dict, dropping ``None`` extras."""
    msg: dict[str, Any] = {"role": role, "content": content}
    msg.update({k: v for k, v in extra.items() if v is not None})
    return msg  # type: ignore[return-value]


def assistant_message(content: str = "", tool_calls: list[ToolCall] | None = None) -> Message:
    """An assistant message, with ``tool_calls`` in OpenAI form when given."""
    if tool_calls:
        return message("assistant", content, tool_calls=[c.to_dict() for c in tool_calls])
    return message("assistant", content)


def tool_calls_of(msg: Message) -> list[ToolCall]:
    """The decoded tool calls of an assistant message (empty when it has none)."""
    return [ToolCall.from_dict(dict(c)) for c in msg.get("tool_calls") or []]


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no spaces: the form every content hash is computed over."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def content_hash(*parts: Any) -> str:
    """A stable sha256 hex digest of JSON-serialisable parts (used for cache keys).

    Lone surrogates (hostile or broken text) are hashed through ``surrogatepass`` instead of raising; every
    valid string hashes exactly as before."""
    return hashlib.sha256(canonical_json(list(parts)).encode("utf-8", "surrogatepass")).hexdigest()


def _encodable(text: str) -> str:
    """``text`` itself when it is valid Unicode, else with lone surrogates spelled as ``\\udXXX`` escapes."""
    return text.encode("utf-8", "surrogatepass").decode("utf-8", "backslashreplace")


_KINDS = {
    int: "an integer",
    float: "a number",
    str: "a string",
    bool: "true or false",
    list: "a list",
    tuple: "a list",
    dict: "a mapping",
}


def _describe(tp: Any) -> str:
    if tp is type(None):
        return "null"
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in typing.get_args(tp))
    if typing.get_origin(tp) is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    base = typing.get_origin(tp) or tp
    if typing.is_typeddict(base):
        return "a mapping"
    return _KINDS.get(base, getattr(base, "__name__", str(base)))


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _type_error(name: str, value: Any, tp: Any, deep: bool) -> str | None:
    """``None`` when ``value`` fits annotation ``tp``, else ``"NAME: expected KIND, got VALUE"``."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
    wrong = f"{name}: expected {_describe(tp)}, got {shown}"
    if tp is Any:
        return None
    if origin in (typing.Union, types.UnionType):
        errors = [_type_error(name, value, a, deep) for a in args]
        if any(e is None for e in errors):
            return None
        inner = [e for e, a in zip(errors, args) if e and a is not type(None) and not e.startswith(f"{name}: ")]
        return inner[0] if len(inner) == 1 else wrong
    if origin is Literal:
        return None if value in args else wrong
    base = origin or tp
    if tp is type(None):
        ok = value is None
    elif base is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif base is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif base is tuple:
        ok = isinstance(value, (list, tuple))
    elif typing.is_typeddict(base):
        ok = isinstance(value, dict)
    elif isinstance(base, type):
        ok = isinstance(value, base)
    else:
        return None  # an annotation this check does not model is not checked
    if not ok:
        if base is float and isinstance(value, str) and _is_number(value):
            return f"{wrong} (YAML reads a number like 1e-5 as text: write 1.0e-5)"
        return wrong
    if deep and base in (list, tuple) and args:
        fixed = base is tuple and not (len(args) == 2 and args[1] is Ellipsis)
        if fixed and len(value) != len(args):
            return f"{name}: expected a list of {len(args)} values, got {shown}"
        for i, item in enumerate(value):
            error = _type_error(f"{name}[{i}]", item, args[i] if fixed else args[0], deep)
            if error:
                return error
    if deep and base is dict and len(args) == 2:
        for key, item in value.items():
            error = _type_error(f"{name}.{key}", item, args[1], deep)
            if error:
                return error
    return None


@functools.cache
def _init_fields(cls: type) -> tuple[list[dataclasses.Field[Any]], dict[str, Any]]:
    """The init fields of dataclass ``cls`` and its resolved annotations, computed once per class (records are
    checked on every JSONL row read)."""
    return [f for f in dataclasses.fields(cls) if f.init], typing.get_type_hints(cls)


def is_env_id(value: Any) -> TypeGuard[str]:
    """Whether ``value`` is an env id as every registry and env file writes it: ``domain/name-vN``."""
    return isinstance(value, str) and "/" in value and value.rsplit("-v", 1)[-1].isdigit()


def check_fields(cls: type, data: dict[str, Any], *, required: bool = True, deep: bool = True) -> None:
    """Check a mapping meant for dataclass ``cls`` against its field annotations, before the constructor
    turns a typo into ``__init__() missing ...`` or a string ``steps`` into ``'<' not supported ...``.

    Raises :class:`RecordError` naming the first missing field (when ``required``) or the first mistyped one
    (``deep`` also checks the items of lists, tuples and dicts). Keys that are not fields are not checked.
    """
    fields, hints = _init_fields(cls)
    if required:
        missing = [
            f.name
            for f in fields
            if f.name not in data and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        ]
        if missing:
            raise RecordError(f"missing required field(s) {', '.join(missing)}")
    for f in fields:
        if f.name in data:
            error = _type_error(f.name, data[f.name], hints.get(f.name, Any), deep)
            if error:
                raise RecordError(error)


class _Record:
    """``to_dict``/``from_dict`` for dataclass records, ignoring unknown keys on read."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls, data: dict[str, Any]):
        """The record of ``data``; a missing required field or a value of the wrong kind (e.g. ``messages: 5``)
        raises :class:`RecordError` naming the field (the items of lists are not checked, for speed)."""
        names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        values = {k: v for k, v in data.items() if k in names}
        check_fields(cls, values, deep=False)
        return cls(**values)


@dataclass
class Task(_Record):
    """One problem instance of an environment. ``data`` is domain-specific and JSON-serialisable."""

    id: str
    split: str
    data: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class Trajectory(_Record):
    """A full episode as chat messages; the unit that expert data, rollouts and SFT share."""

    id: str
    env_id: str
    task_id: str
    messages: list[Message]
    reward: float = 0.0
    source: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)

    def assistant_turns(self) -> list[int]:
        """Indices in ``messages`` of the assistant messages (the candidate pivot states)."""
        return [i for i, m in enumerate(self.messages) if m.get("role") == "assistant"]

    def turn(self, n: int) -> Turn:
        """The n-th assistant turn (0-based) as a state: its prefix and the expert message."""
        index = self.assistant_turns()[n]
        return Turn(
            trajectory_id=self.id,
            env_id=self.env_id,
            task_id=self.task_id,
            turn=n,
            prefix=list(self.messages[:index]),
            expert=self.messages[index],
        )

    def turns(self) -> list[Turn]:
        return [self.turn(n) for n in range(len(self.assistant_turns()))]


@dataclass
class Turn(_Record):
    """A candidate state s_t: the history before assistant turn ``turn`` and the expert's message there."""

    trajectory_id: str
    env_id: str
    task_id: str
    turn: int
    prefix: list[Message]
    expert: Message


@dataclass
class ExpertState(_Record):
    """An expert state as every stage passes it along: the :class:`Turn` (history and the expert's message) and
    the functions offered there (None: the env's own; rows imported from NeMo-Gym carry theirs).

    Made by :func:`pivotgym.states.expert_states` only. :attr:`key` is computed from the content, never stored
    apart from it, so a state read back from a file has the key it was profiled under, and an edited one a new
    key. Profile and pivot-set rows carry their state (``TurnProfile.state``)."""

    turn: Turn
    tools: list[dict[str, Any]] | None = None

    @functools.cached_property
    def key(self) -> str:
        """The state's content hash: the profiler's sampling streams and cache keys derive from it, and every
        judge caches the state's verification context under it."""
        t = self.turn
        offered = () if self.tools is None else (self.tools,)  # the key of a state without tools names none
        return content_hash(
            "pivotgym-state", t.trajectory_id, t.env_id, t.task_id, t.turn, t.prefix, t.expert, *offered
        )

    @property
    def env_id(self) -> str:
        return self.turn.env_id

    @property
    def task_id(self) -> str:
        return self.turn.task_id

    @property
    def trajectory_id(self) -> str:
        return self.turn.trajectory_id

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "turn": self.turn.to_dict(), "tools": self.tools}

    @classmethod
    def from_dict(cls, data: dict[str, Any]):
        """The state of ``data`` (its ``key`` is recomputed from the content, not read)."""
        if "turn" not in data:
            raise RecordError("missing required field(s) turn")
        turn = Turn.from_dict(data["turn"]) if isinstance(data["turn"], dict) else data["turn"]
        values = {"turn": turn, "tools": data.get("tools")}
        check_fields(cls, values, deep=False)
        return cls(**values)


#: an undecided verdict's reason is cut to this length (it is stored in every profile row)
MAX_UNDECIDED = 300


@dataclass
class Verdict(_Record):
    """A verifier's judgement of one candidate action.

    ``reward`` is in [0, 1]; ``equivalent`` says whether the candidate achieves what the expert's action
    achieved; ``reason`` is a short machine-friendly tag plus detail; ``components`` holds per-layer results.

    ``undecided`` is None for a judgement. A verification that could not decide (a search out of budget, a
    judge that broke, a verifier that raised, a timeout, a sample that never came) says why there, and is made
    by :meth:`undecided_because` only: it carries no reward, so profiling, selection, training, floors and the
    checker leave it out instead of counting it as a 0.
    """

    reward: float
    equivalent: bool
    reason: str
    components: dict[str, Any] = field(default_factory=dict)
    undecided: str | None = None

    def __post_init__(self) -> None:
        if not 0.0 <= float(self.reward) <= 1.0:
            raise ValueError(f"Verdict.reward must be in [0, 1], got {self.reward}")
        self.reward = float(self.reward)
        if self.undecided is not None and (not self.undecided or self.reward or self.equivalent):
            raise ValueError(
                "an undecided Verdict carries no reward and a reason: make it with Verdict.undecided_because(why)"
            )

    @property
    def decided(self) -> bool:
        """Whether this verdict judges the candidate (its reward is one)."""
        return self.undecided is None

    @classmethod
    def fail(cls, reason: str, **components: Any) -> Verdict:
        return cls(0.0, False, reason, dict(components))

    @classmethod
    def ok(cls, reason: str = "equivalent", **components: Any) -> Verdict:
        return cls(1.0, True, reason, dict(components))

    @classmethod
    def undecided_because(cls, why: str, **components: Any) -> Verdict:
        """A verification that could not judge the candidate, and ``why``: whole as the ``reason``, cut to
        :data:`MAX_UNDECIDED` characters as ``undecided`` (which is stored in every profile row)."""
        why = str(why).strip() or "undecided"
        return cls(0.0, False, why, dict(components), undecided=why[:MAX_UNDECIDED])


@dataclass
class Completion(_Record):
    """One sampled continuation: text plus the exact token ids and their logprobs (token in, token out)."""

    text: str
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str = "stop"  # "stop" | "length" | "error"
    prompt_token_ids: list[int] = field(default_factory=list)


@dataclass
class TurnProfile(_Record):
    """The profiler's record for one candidate turn (contract: the "Turn profile" JSONL row).

    ``rewards`` (and ``reasons``, ``mean``, ``var``, ``k``) are the judged samples only; ``undecided`` holds the
    reason of every draw that could not be judged (:attr:`Verdict.undecided`), so ``k + len(undecided)``
    samples were drawn."""

    trajectory_id: str
    turn: int
    env_id: str
    task_id: str
    k: int
    rewards: list[float]
    mean: float
    var: float
    reasons: list[str]
    reference: dict[str, Any]
    verifier: dict[str, Any]
    key: str
    metadata: dict[str, Any] = field(default_factory=dict)
    undecided: list[str] = field(default_factory=list)
    #: the state itself (the profiler writes it into every row), so selection, training, export and evaluation
    #: read one file; None in rows written before rows carried it (their readers take the trajectories)
    state: ExpertState | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]):
        """The row of ``data``; a row written before ``undecided`` was a field (profile format 3) keeps its
        undecided reasons under ``metadata.failed_reasons``, and they move here."""
        metadata = data.get("metadata")
        if "undecided" not in data and isinstance(metadata, dict) and "failed" in metadata:
            metadata = {k: v for k, v in metadata.items() if k not in ("failed", "failed_reasons")}
            data = {**data, "metadata": metadata, "undecided": list(data["metadata"].get("failed_reasons") or [])}
        if isinstance(data.get("state"), dict):
            try:
                data = {**data, "state": ExpertState.from_dict(data["state"])}
            except RecordError as exc:
                raise RecordError(f"state: {exc}") from None
        return super().from_dict(data)

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        if self.state is not None:
            out["state"] = self.state.to_dict()
        return out

    @property
    def informative(self) -> bool:
        """True when the rewards are mixed (some signal for a group-relative policy gradient)."""
        return self.var > 0


@dataclass
class PivotSet:
    """Selected turn profiles plus the rule that selected them (contract: the "Pivot set").

    On disk it is JSON lines: one turn-profile row per pivot, each carrying the rule under ``"selection"``,
    so the file stays loadable with ``datasets.load_dataset("json", ...)``.
    """

    rule: dict[str, Any]
    pivots: list[TurnProfile]
    stats: dict[str, Any] = field(default_factory=dict)


def new_id(prefix: str = "") -> str:
    """A short random id, optionally prefixed."""
    return f"{prefix}{uuid.uuid4().hex[:12]}"
