"""Env sessions held by ``pivotgym serve``: creation under a cap, one lock each, deadlines, idle reaping.

An :class:`~pivotgym.env.AgentEnv` is not thread-safe, so every session has its own lock: a request that
finds its session busy (another request of the same session is running) is refused with 409 instead of
queueing behind it. Different sessions share nothing, so their steps run at the same time in the server's
worker threads. A step's deadline is the env's own ``step_timeout`` (the server may lower it with
``ServeConfig.step_timeout``); a session nobody has used for ``idle_timeout`` seconds is closed by a reaper
thread, so a client that died without closing frees its slot.

Every failure meant for the client is a :class:`ServeError` carrying the HTTP status, a stable ``code``, a
message and a hint; the app turns it into ``{"error": code, "message": ..., "hint": ...}``.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import secrets
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from pivotgym.errors import PivotgymError, RegistryError, TaskNotFound

#: sessions open at once unless ``--max-sessions`` says otherwise
#: the env server's port: not 8000, where vLLM's OpenAI server (and the ``openai`` sampler's default) listens
DEFAULT_PORT = 8100
DEFAULT_MAX_SESSIONS = 64
#: seconds without a request after which a session is closed
DEFAULT_IDLE_TIMEOUT = 600.0
#: the largest request body accepted (an action of 100,000 characters fits, escaped, several times over)
DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
#: closed-session ids remembered (so "unknown session" can say it was reaped or closed)
_REMEMBERED = 4096


class ServeError(PivotgymError):
    """A request the server refuses: ``status`` is the HTTP status, ``code`` a stable machine-readable name."""

    def __init__(self, status: int, code: str, message: str, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.status = status
        self.code = code

    def to_dict(self) -> dict[str, Any]:
        return {"error": self.code, "message": str(self), "hint": self.hint}


@dataclass(frozen=True)
class ServeConfig:
    """The limits of one server (the ``pivotgym serve`` options)."""

    max_sessions: int = DEFAULT_MAX_SESSIONS
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT
    #: an upper bound on every session's step deadline (seconds); None keeps each env's own ``step_timeout``
    step_timeout: float | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    #: the env whose verifier judges NeMo-Gym ``/verify`` requests that do not name one
    nemo_env: str | None = None
    #: the token every request but ``GET /health`` must carry (``Authorization: Bearer``); None: no authentication
    token: str | None = field(default=None, repr=False)
    #: with ``--workers N``: this process's index and every worker's own base URL (index-aligned). Session ids
    #: then start with ``w<index>-``, and a request for another worker's session is redirected there (307)
    worker: int = 0
    worker_urls: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.max_sessions < 1:
            raise ValueError(f"max_sessions must be at least 1, got {self.max_sessions}")
        if not self.idle_timeout > 0:
            raise ValueError(f"idle_timeout must be a positive number of seconds, got {self.idle_timeout}")
        if self.step_timeout is not None and not self.step_timeout > 0:
            raise ValueError(f"step_timeout must be a positive number of seconds, got {self.step_timeout}")
        if self.max_body_bytes < 1024:
            raise ValueError(f"max_body_bytes must be at least 1024, got {self.max_body_bytes}")


@dataclass
class Session:
    """One env and what the server knows about its use."""

    id: str
    env_id: str
    env: Any
    created: float
    last_used: float
    lock: threading.Lock = field(default_factory=threading.Lock)
    was_reset: bool = False
    steps: int = 0
    #: the last step ended the episode (terminated or truncated): no step until the next reset
    ended: bool = False

    def describe(self) -> dict[str, Any]:
        """The session as the client sees it (``POST /sessions`` and ``GET /sessions/{id}``)."""
        space = getattr(self.env, "action_space", None)
        task = getattr(self.env, "task", None)
        return {
            "session_id": self.id,
            "env_id": self.env_id,
            "max_action_chars": getattr(space, "max_length", None),
            "max_turns": getattr(self.env, "max_turns", None),
            "step_timeout": getattr(self.env, "step_timeout", None),
            "max_new_tokens": getattr(self.env, "max_new_tokens", None),
            "task_id": getattr(task, "id", None) if self.was_reset else None,
            "turn": getattr(self.env, "turn", None) if self.was_reset else None,
            "done": getattr(self.env, "done", None) if self.was_reset else None,
            "steps": self.steps,
        }


class SessionManager:
    """The open sessions of one server. Thread-safe: every method may be called from any worker thread."""

    def __init__(self, config: ServeConfig | None = None) -> None:
        self.config = config or ServeConfig()
        self._sessions: dict[str, Session] = {}
        self._pending = 0  # sessions being built: they hold a slot under the cap
        self._lock = threading.Lock()
        self._ended: collections.OrderedDict[str, str] = collections.OrderedDict()
        self._stop = threading.Event()
        self._reaper: threading.Thread | None = None
        self.reaped = 0

    # ------------------------------------------------------------------ lifecycle of sessions
    def create(self, env_id: str, kwargs: Mapping[str, Any] | None = None) -> Session:
        """Build ``env_id`` with ``kwargs`` in a new session; 404 for an unknown env, 429 at the cap."""
        from pivotgym.registry import get_registry

        registry = get_registry()
        try:
            registry.env_spec(env_id)
        except RegistryError as exc:
            raise ServeError(404, "unknown_env", str(exc), hint="GET /envs lists the env ids") from None
        with self._lock:
            if len(self._sessions) + self._pending >= self.config.max_sessions:
                raise ServeError(
                    429,
                    "too_many_sessions",
                    f"the server holds its maximum of {self.config.max_sessions} sessions",
                    hint="close sessions you no longer use (DELETE /sessions/{id}); idle ones close after "
                    f"{self.config.idle_timeout:g}s; or start the server with a larger --max-sessions",
                )
            self._pending += 1
        try:
            env = self._make(registry, env_id, dict(kwargs or {}))
            now = time.monotonic()
            ident = secrets.token_hex(16)
            if self.config.worker_urls:  # the worker that holds it, for the others to redirect to
                ident = f"w{self.config.worker}-{ident}"
            session = Session(id=ident, env_id=env_id, env=env, created=now, last_used=now)
            with self._lock:
                self._sessions[session.id] = session
            return session
        finally:
            with self._lock:
                self._pending -= 1

    def _make(self, registry: Any, env_id: str, kwargs: dict[str, Any]) -> Any:
        try:
            env = registry.make(env_id, **kwargs)
        except RegistryError as exc:
            raise ServeError(400, "env_unavailable", str(exc), hint="GET /envs shows each env's error") from None
        except (TypeError, ValueError) as exc:
            raise ServeError(
                400,
                "bad_env_kwargs",
                f"{env_id} cannot be built with kwargs {sorted(kwargs)}: {exc}",
                hint='pass only keyword arguments the env accepts, e.g. {"max_turns": 10}',
            ) from None
        limit = self.config.step_timeout
        if limit is not None and hasattr(env, "step_timeout"):
            own = env.step_timeout
            env.step_timeout = limit if not own else min(float(own), limit)
        return env

    def get(self, session_id: str) -> Session:
        """The open session ``session_id``; 404 (saying whether it was closed or reaped) when there is none."""
        with self._lock:
            session = self._sessions.get(session_id)
            ended = self._ended.get(session_id)
        if session is None:
            why = f"session {session_id!r} {ended}" if ended else f"no session {session_id!r}"
            raise ServeError(404, "unknown_session", why, hint="create one with POST /sessions")
        return session

    @contextmanager
    def use(self, session_id: str, *, touch: bool = True) -> Iterator[Session]:
        """Hold ``session_id``'s lock for one request; 409 when another request of it is running. ``touch``:
        the request counts as use (it restarts the idle clock); a read of the session's state does not."""
        session = self.get(session_id)
        if not session.lock.acquire(blocking=False):
            raise ServeError(
                409,
                "session_busy",
                f"session {session_id!r} is running another request",
                hint="send one request at a time per session; open more sessions to run steps in parallel",
            )
        try:
            if session_id not in self._sessions:  # closed or reaped while we waited for the lock
                raise ServeError(404, "unknown_session", f"session {session_id!r} was closed", hint="POST /sessions")
            yield session
        finally:
            if touch:
                session.last_used = time.monotonic()
            session.lock.release()

    def reset(self, session_id: str, seed: int | None, options: Mapping[str, Any] | None) -> dict[str, Any]:
        """``env.reset(seed=..., options=...)`` of one session, as ``{"observation", "info", "session"}``: the
        session's description after the reset (a task may set its own turn budget)."""
        with self.use(session_id) as session:
            try:
                obs, info = session.env.reset(seed=seed, options=dict(options) if options is not None else None)
            except TaskNotFound as exc:
                raise ServeError(
                    404,
                    "unknown_task",
                    str(exc),
                    hint=f"GET /envs/{session.env_id}/tasks?split=... lists task ids",
                ) from None
            except (KeyError, ValueError, TypeError) as exc:
                message = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
                raise ServeError(
                    400,
                    "bad_options",
                    f"reset options {dict(options or {})!r} rejected: {message}",
                    hint='options may name a "split" or a "task_id"',
                ) from None
            session.was_reset, session.ended = True, False
            return {"observation": jsonable(obs), "info": jsonable(info), "session": session.describe()}

    def step(self, session_id: str, action: Any) -> dict[str, Any]:
        """``env.step(action)`` of one session, as ``{"observation", "reward", "terminated", "truncated", "info"}``."""
        if not isinstance(action, str):
            raise ServeError(
                422,
                "not_text",
                f"an action must be text (a JSON string), got {_json_type(action)}",
                hint='send {"action": "<the assistant text>"}',
            )
        with self.use(session_id) as session:
            if not session.was_reset:
                raise ServeError(
                    409,
                    "reset_needed",
                    f"session {session_id!r} has not been reset",
                    hint=f"POST /sessions/{session_id}/reset before the first step",
                )
            if session.ended:
                raise ServeError(
                    409,
                    "episode_over",
                    f"session {session_id!r}: the episode has ended (its last step was terminated or truncated)",
                    hint=f"POST /sessions/{session_id}/reset to start the next one",
                )
            space = getattr(session.env, "action_space", None)
            limit = getattr(space, "max_length", None)
            if isinstance(limit, int) and len(action) > limit:
                raise ServeError(
                    422,
                    "action_too_long",
                    f"the action has {len(action)} characters; {session.env_id} accepts at most {limit}",
                    hint="shorten the action",
                )
            try:
                obs, reward, terminated, truncated, info = session.env.step(action)
            except gym.error.ResetNeeded as exc:
                raise ServeError(409, "reset_needed", str(exc), hint=f"POST /sessions/{session_id}/reset") from None
            session.steps += 1
            session.ended = bool(terminated or truncated)
            return {
                "observation": jsonable(obs),
                "reward": jsonable(float(reward)),
                "terminated": bool(terminated),
                "truncated": bool(truncated),
                "info": jsonable(info),
            }

    def close(self, session_id: str, why: str = "was closed") -> None:
        """Close and forget a session (waits for a running request of it to finish first)."""
        with self._lock:
            session = self._sessions.pop(session_id, None)
            if session is None:
                ended = self._ended.get(session_id)
            else:
                self._remember(session_id, why)
        if session is None:
            message = f"session {session_id!r} {ended}" if ended else f"no session {session_id!r}"
            raise ServeError(404, "unknown_session", message, hint="GET /sessions lists open sessions")
        with session.lock:
            _close_env(session.env)

    def _remember(self, session_id: str, why: str) -> None:
        self._ended[session_id] = why
        while len(self._ended) > _REMEMBERED:
            self._ended.popitem(last=False)

    # ------------------------------------------------------------------ idle sessions
    def reap_idle(self, now: float | None = None) -> list[str]:
        """Close every session idle longer than ``idle_timeout`` and not running a request; their ids."""
        now = time.monotonic() if now is None else now
        limit = self.config.idle_timeout
        reaped: list[Session] = []
        with self._lock:
            for sid, session in list(self._sessions.items()):
                if now - session.last_used > limit and session.lock.acquire(blocking=False):
                    del self._sessions[sid]
                    self._remember(sid, f"was closed after {limit:g}s without a request (idle timeout)")
                    reaped.append(session)
        for session in reaped:
            try:
                _close_env(session.env)
            finally:
                session.lock.release()
        self.reaped += len(reaped)
        return [s.id for s in reaped]

    def start_reaper(self) -> None:
        """Start the thread that closes idle sessions (checks several times per ``idle_timeout``)."""
        if self._reaper is not None:
            return
        interval = min(max(self.config.idle_timeout / 4, 0.05), 5.0)

        def loop() -> None:
            while not self._stop.wait(interval):
                self.reap_idle()

        self._stop.clear()
        self._reaper = threading.Thread(target=loop, name="pivotgym-serve-reaper", daemon=True)
        self._reaper.start()

    def shutdown(self) -> None:
        """Stop the reaper and close every session (server shutdown)."""
        self._stop.set()
        if self._reaper is not None:
            self._reaper.join(timeout=5)
            self._reaper = None
        with self._lock:
            sessions = list(self._sessions.values())
            self._sessions.clear()
            for s in sessions:
                self._remember(s.id, "was closed when the server shut down")
        for session in sessions:
            _close_env(session.env)

    # ------------------------------------------------------------------ reading
    def list(self) -> list[dict[str, Any]]:
        with self._lock:
            sessions = list(self._sessions.values())
        now = time.monotonic()
        return [
            {"session_id": s.id, "env_id": s.env_id, "steps": s.steps, "idle_s": round(now - s.last_used, 3)}
            for s in sessions
        ]

    def __len__(self) -> int:
        with self._lock:
            return len(self._sessions)


def _close_env(env: Any) -> None:
    try:
        env.close()
    except Exception:
        pass


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__


def jsonable(value: Any, _depth: int = 0) -> Any:
    """``value`` made of JSON types only: mappings with string keys, lists, strings, finite numbers, bools,
    null. Tuples and sets become lists, numpy scalars and arrays their Python values, dataclasses dicts,
    non-finite floats the strings ``"nan"``/``"inf"``/``"-inf"``, anything else its ``str``; nesting past 64
    levels is cut to its ``str``, so an env's ``info`` always reaches the client."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else str(value)
    if _depth > 64:
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): jsonable(v, _depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value, key=repr) if isinstance(value, (set, frozenset)) else value
        return [jsonable(v, _depth + 1) for v in items]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return jsonable(dataclasses.asdict(value), _depth + 1)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    tolist = getattr(value, "tolist", None)  # numpy scalars and arrays
    if callable(tolist) and type(value).__module__ == "numpy":
        return jsonable(tolist(), _depth + 1)
    return str(value)


__all__ = [
    "DEFAULT_IDLE_TIMEOUT",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_SESSIONS",
    "ServeConfig",
    "ServeError",
    "Session",
    "SessionManager",
    "jsonable",
]
