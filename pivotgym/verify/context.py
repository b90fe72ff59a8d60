"""The verifier protocol and the context a verifier judges in.

A verifier answers one question: does ``candidate`` (raw assistant text) achieve, from the state at turn t,
what the expert's action achieved there? Domains layer cheap checks first (parse, tool name, target), then
structural argument comparison (:mod:`pivotgym.verify.compare`), then execution from the exact state (via
:meth:`VerifyContext.env`).

Any turn can be judged, not only one of an env's own tasks: :meth:`VerifyContext.from_turn` takes the
messages before the turn, the expert's action and (for tool use) the offered functions, and
``pivotgym verify`` does the same from a JSON file. Such an *ad-hoc* turn has no task of the env behind it
(:meth:`VerifyContext.known_task` is None), so no env can be positioned at it: a verifier judges it from
:attr:`VerifyContext.prefix`, :attr:`VerifyContext.expert` and :attr:`VerifyContext.tools`, and
:meth:`VerifyContext.env` raises :class:`~pivotgym.errors.AdhocTurn` saying so.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from pivotgym.errors import AdhocTurn
from pivotgym.types import ExpertState, Task, ToolCall, Trajectory, Turn, Verdict

if TYPE_CHECKING:
    from pivotgym.env import AgentEnv

__all__ = ["ADHOC_PREFIX", "Verifier", "VerifyContext", "expert_message", "set_env_maker", "trajectory_tools"]

#: the task id prefix of a turn that is none of the env's tasks (see :meth:`VerifyContext.from_turn`)
ADHOC_PREFIX = "adhoc:"

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
            digest = hashlib.sha256(
                json.dumps([prefix, expert_msg, tool_list], sort_keys=True, default=str).encode(
                    "utf-8", "surrogatepass"
                )
            ).hexdigest()
            task_id = f"{ADHOC_PREFIX}{digest[:16]}"
        turn = Turn(
            trajectory_id=f"{task_id}:turn",
            env_id=env_id,
            task_id=task_id,
            turn=sum(1 for m in prefix if m.get("role") == "assistant"),
            prefix=prefix,  # type: ignore[arg-type] # plain chat dicts are Messages
            expert=expert_msg,  # type: ignore[arg-type]
        )
        return cls(turn, env_kwargs=dict(env_kwargs or {}), env_factory=env_factory, tools=tool_list)

    @classmethod
    def at(cls, state: ExpertState, **kwargs: Any) -> VerifyContext:
        """The context of an expert state (:mod:`pivotgym.states`): its turn and the functions offered there."""
        return cls(state.turn, tools=state.tools, **kwargs)

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

    @property
    def adhoc(self) -> bool:
        """Whether this turn was given without a task id (see :meth:`from_turn`): no env can be positioned
        at it, so :meth:`env` and :attr:`task` raise :class:`~pivotgym.errors.AdhocTurn`."""
        return self.turn.task_id.startswith(ADHOC_PREFIX)

    def known_task(self) -> Task | None:
        """The env's task this turn belongs to, or None for a turn from elsewhere (see :meth:`from_turn`).

        A verifier that steps the env checks this first: with None it judges from :attr:`prefix`,
        :attr:`expert` and :attr:`tools` alone, because :meth:`env` has no state to replay."""
        if not self._task_resolved:
            self._task_resolved = True
            if not self.adhoc:
                try:
                    self._task = self.fresh_env().get_task(self.turn.task_id)
                except (KeyError, LookupError):
                    self._task = None
        return self._task

    @property
    def prefix(self) -> list[dict[str, Any]]:
        """The chat messages before this turn (the state), as stored in the turn."""
        return [dict(m) for m in self.turn.prefix]

    @property
    def expert(self) -> dict[str, Any]:
        """The expert's assistant message at this turn (``content`` and, for tool use, ``tool_calls``)."""
        return dict(self.turn.expert)

    def _require_task(self, what: str) -> None:
        if self.adhoc:
            raise AdhocTurn(
                f"{self.turn.env_id}: {what} needs one of the env's tasks, but this turn is ad-hoc (given without a "
                'task id, e.g. `pivotgym verify` with no "task_id"), so there is no env state to replay',
                hint="verifier authors: check context.known_task() and judge an ad-hoc turn from context.prefix "
                "and context.expert; callers: pass the turn's task_id",
            )

    def _make(self) -> AgentEnv:
        if self.env_factory is not None:
            return self.env_factory()
        if not _env_maker:
            raise RuntimeError(
                f"{self.turn.env_id}: no env registry is installed; `import pivotgym` first or pass env_factory"
            )
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
        """The env's task of this turn; :class:`~pivotgym.errors.AdhocTurn` for an ad-hoc turn (see
        :meth:`known_task`), :class:`~pivotgym.errors.TaskNotFound` for a task id the env does not have."""
        self._require_task("context.task")
        return self.fresh_env().get_task(self.turn.task_id)

    def env(self) -> AgentEnv:
        """The env in the exact state before the expert's action at this turn.

        The first call replays the prefix; later calls restore the snapshot taken then, so a verifier can
        step freely (candidate, then expert) and ask again for a clean copy of the state. An ad-hoc turn
        (:attr:`adhoc`) has no task to reset to: this raises :class:`~pivotgym.errors.AdhocTurn`, whose
        message tells the verifier's author to check :meth:`known_task` first.
        """
        if self._positioned is None:
            self._require_task("context.env()")
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
                raise ValueError(
                    f'an expert tool call needs a "name" (got {item!r:.80}); write '
                    '{"name": "f", "arguments": {...}}'
                )
            args = fn.get("arguments", fn.get("parameters", {}))
            calls.append(
                {
                    "id": item.get("id") or f"call_{len(calls)}",
                    "type": "function",
                    "function": {
                        "name": fn["name"],
                        "arguments": args if isinstance(args, str) else json.dumps(args, ensure_ascii=False),
                    },
                }
            )
        else:
            raise ValueError(f"an expert action is a message, a text or tool calls, got {type(item).__name__}")
    return {"role": "assistant", "content": "", "tool_calls": calls}
