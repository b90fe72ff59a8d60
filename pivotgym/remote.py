"""A client of ``pivotgym serve``: :class:`RemoteEnv`, a ``gymnasium.Env`` whose env runs on the server.

``RemoteEnv("http://127.0.0.1:8100", "planning/blocks-v0", max_turns=10)`` opens a session (the keyword
arguments go to the env's constructor on the server); ``reset``/``step``/``close`` have the return shapes of
:class:`~pivotgym.env.AgentEnv` (observations are lists of chat messages, actions text) and its spaces
(:class:`~pivotgym.spaces.Messages`, :class:`~pivotgym.spaces.TextAction` with the env's length limit).
:func:`verify` judges candidates for a turn with an env's verifier on the server.

Differences from a local env, by design: a non-text action or one over the length limit raises
:class:`RemoteError` (the server refuses it with 422) instead of becoming an error observation; a step
before ``reset`` raises ``gymnasium.error.ResetNeeded`` as locally. A session nobody uses for the server's
idle timeout is closed by the server; the next call then raises :class:`RemoteError` (404,
``unknown_session``). A server started with ``--token`` needs it: ``token=`` or ``$PIVOTGYM_SERVE_TOKEN``.

This module needs only ``httpx``, ``gymnasium`` and pivotgym's records; it never imports the server.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import httpx

from pivotgym.errors import PivotgymError
from pivotgym.spaces import Messages, TextAction

#: seconds a request may take: above the default step deadline (300 s) so the server's deadline fires first
DEFAULT_TIMEOUT = 330.0
#: the environment variable holding a server's token (``pivotgym serve --token``); the clients here send it
TOKEN_ENV = "PIVOTGYM_SERVE_TOKEN"

__all__ = ["DEFAULT_TIMEOUT", "TOKEN_ENV", "AsyncRemoteEnv", "RemoteEnv", "RemoteError", "verify"]


def _headers(token: str | None) -> dict[str, str]:
    """The authorization header for ``token`` (default: ``$PIVOTGYM_SERVE_TOKEN``), or none."""
    token = token if token is not None else os.environ.get(TOKEN_ENV)
    return {"Authorization": f"Bearer {token}"} if token else {}


class RemoteError(PivotgymError, RuntimeError):
    """The server refused a request, or could not be reached: ``status`` is the HTTP status (0 when the server
    did not answer), ``code`` the server's error code (``unknown_env``, ``unknown_session``, ...)."""

    def __init__(self, message: str, *, status: int = 0, code: str = "unreachable", hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.status = status
        self.code = code


def _transport_error(method: str, url: str, exc: Exception) -> RemoteError:
    if isinstance(exc, httpx.TimeoutException):
        return RemoteError(
            f"{method} {url}: no answer within the client's timeout ({exc})",
            code="timeout",
            hint="raise RemoteEnv(timeout=...) or the server's step deadline",
        )
    return RemoteError(f"{method} {url}: cannot reach the server ({exc})", hint="start it with `pivotgym serve`")


def _answer(response: httpx.Response) -> Any:
    """The JSON answer of ``response``, or :class:`RemoteError` with the server's message and hint."""
    try:
        data = response.json()
    except ValueError:
        data = None
    if response.status_code >= 400 or response.status_code == 307:
        if isinstance(data, Mapping) and "error" in data:
            code, message, hint = str(data["error"]), str(data.get("message", "")), data.get("hint")
        else:
            code, message, hint = "http_error", response.text[:300], None
        if code == "reset_needed":
            raise gym.error.ResetNeeded(message)
        raise RemoteError(message, status=response.status_code, code=code, hint=hint)
    return data


def _request(client: httpx.Client, method: str, path: str, **kwargs: Any) -> Any:
    """One request; the JSON answer, or :class:`RemoteError` with the server's message and hint."""
    try:
        response = client.request(method, path, **kwargs)
    except httpx.TransportError as exc:
        raise _transport_error(method, f"{client.base_url}{path}", exc) from None
    return _answer(response)


async def _arequest(client: httpx.AsyncClient, method: str, path: str, **kwargs: Any) -> Any:
    """:func:`_request` on an async client."""
    try:
        response = await client.request(method, path, **kwargs)
    except httpx.TransportError as exc:
        raise _transport_error(method, f"{client.base_url}{path}", exc) from None
    return _answer(response)


def _step_result(data: Mapping[str, Any]) -> tuple[list, float, bool, bool, dict]:
    """A step answer as gymnasium's 5-tuple."""
    return data["observation"], float(data["reward"]), bool(data["terminated"]), bool(data["truncated"]), data["info"]


class RemoteEnv(gym.Env[list, str]):
    """An env of a ``pivotgym serve`` server, one session per instance (see the module docstring)."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(
        self,
        base_url: str,
        env_id: str,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        client: httpx.Client | None = None,
        token: str | None = None,
        **kwargs: Any,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.env_id = env_id
        self._own_client = client is None
        self._http = client or httpx.Client(base_url=self.base_url, timeout=timeout, headers=_headers(token))
        self.session_id: str | None = None
        try:
            info = _request(self._http, "POST", "/sessions", json={"env_id": env_id, "kwargs": kwargs})
        except BaseException:
            self._close_client()
            raise
        self.session_id = str(info["session_id"])
        if info.get("worker_url") and self._own_client:  # a server of several workers: talk to this one directly
            self._http.close()
            self._http = httpx.Client(base_url=str(info["worker_url"]), timeout=timeout, headers=_headers(token))
        #: what the server said about the session (limits, turn budget)
        self.session_info: dict[str, Any] = dict(info)
        self.max_turns: int | None = info.get("max_turns")
        self.max_new_tokens: int | None = info.get("max_new_tokens")
        self.observation_space = Messages()
        self.action_space = TextAction(max_length=int(info.get("max_action_chars") or 100_000))

    def _path(self, suffix: str = "") -> str:
        if self.session_id is None:
            raise RemoteError(f"RemoteEnv({self.env_id!r}) is closed", code="closed", hint="create a new RemoteEnv")
        return f"/sessions/{self.session_id}{suffix}"

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[list, dict]:
        super().reset(seed=seed)
        data = _request(self._http, "POST", self._path("/reset"), json={"seed": seed, "options": options})
        session = data.get("session") or {}  # the limits after the reset (a task may set its own turn budget)
        self.session_info.update(session)
        self.max_turns = session.get("max_turns", self.max_turns)
        self.max_new_tokens = session.get("max_new_tokens", self.max_new_tokens)
        return data["observation"], data["info"]

    def step(self, action: str) -> tuple[list, float, bool, bool, dict]:
        return _step_result(_request(self._http, "POST", self._path("/step"), json={"action": action}))

    def tool_schemas(self) -> list[dict[str, Any]]:
        """The tools (OpenAI form) of the current task, as the env on the server offers them."""
        return list(_request(self._http, "GET", self._path()).get("tools") or [])

    def state(self) -> dict[str, Any]:
        """The session as the server sees it: task id, turn, whether the episode is done, limits."""
        return dict(_request(self._http, "GET", self._path()))

    def close(self) -> None:
        """Close the session on the server (a session it already reaped is fine) and the HTTP client."""
        if self.session_id is not None:
            try:
                _request(self._http, "DELETE", self._path())
            except RemoteError as exc:
                if exc.code not in ("unknown_session", "unreachable"):
                    raise
            finally:
                self.session_id = None
        self._close_client()

    def _close_client(self) -> None:
        if self._own_client:
            self._http.close()

    def __repr__(self) -> str:
        return f"RemoteEnv({self.base_url!r}, {self.env_id!r}, session={self.session_id})"


class AsyncRemoteEnv:
    """:class:`RemoteEnv` for ``asyncio``: one session, ``await``-ed ``reset``/``step``/``state``/``close``, so
    one event loop drives many sessions at once (a rollout worker with 64 episodes in flight). Open it with
    ``env = await AsyncRemoteEnv.open(base_url, env_id, **env_kwargs)`` or ``async with`` that."""

    def __init__(self, http: httpx.AsyncClient, env_id: str, info: Mapping[str, Any]) -> None:
        self._http = http
        self.env_id = env_id
        self.session_id: str | None = str(info["session_id"])
        self.session_info: dict[str, Any] = dict(info)
        self.max_turns: int | None = info.get("max_turns")

    @classmethod
    async def open(
        cls,
        base_url: str,
        env_id: str,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        token: str | None = None,
        **kwargs: Any,
    ) -> AsyncRemoteEnv:
        """Create a session of ``env_id`` (``kwargs`` go to the env) on the server at ``base_url``."""
        headers = _headers(token)
        http = httpx.AsyncClient(base_url=base_url.rstrip("/"), timeout=timeout, headers=headers)
        try:
            info = await _arequest(http, "POST", "/sessions", json={"env_id": env_id, "kwargs": kwargs})
        except BaseException:
            await http.aclose()
            raise
        if info.get("worker_url"):  # a server of several workers: talk to the one holding the session
            await http.aclose()
            http = httpx.AsyncClient(base_url=str(info["worker_url"]), timeout=timeout, headers=headers)
        return cls(http, env_id, info)

    def _path(self, suffix: str = "") -> str:
        if self.session_id is None:
            raise RemoteError(f"AsyncRemoteEnv({self.env_id!r}) is closed", code="closed", hint="open a new one")
        return f"/sessions/{self.session_id}{suffix}"

    async def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[list, dict]:
        data = await _arequest(self._http, "POST", self._path("/reset"), json={"seed": seed, "options": options})
        self.session_info.update(data.get("session") or {})
        self.max_turns = self.session_info.get("max_turns", self.max_turns)
        return data["observation"], data["info"]

    async def step(self, action: str) -> tuple[list, float, bool, bool, dict]:
        data = await _arequest(self._http, "POST", self._path("/step"), json={"action": action})
        return _step_result(data)

    async def state(self) -> dict[str, Any]:
        """The session as the server sees it (as :meth:`RemoteEnv.state`)."""
        return dict(await _arequest(self._http, "GET", self._path()))

    async def close(self) -> None:
        """Close the session (a session the server already reaped is fine) and the HTTP client."""
        try:
            if self.session_id is not None:
                try:
                    await _arequest(self._http, "DELETE", self._path())
                except RemoteError as exc:
                    if exc.code not in ("unknown_session", "unreachable"):
                        raise
                finally:
                    self.session_id = None
        finally:
            await self._http.aclose()

    async def __aenter__(self) -> AsyncRemoteEnv:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def verify(
    base_url: str,
    env_id: str,
    turn: Mapping[str, Any],
    candidates: Sequence[str] | str,
    *,
    verifier: str = "functional",
    timeout: float = DEFAULT_TIMEOUT,
    token: str | None = None,
) -> list[dict[str, Any]]:
    """Verdicts of ``candidates`` for ``turn`` (``{"messages", "expert", "tools"?, "task_id"?}``, the
    ``pivotgym verify --turn`` format) from ``env_id``'s verifier on the server: one dict per candidate with
    ``reward``, ``reason``, ``code``, ``undecided`` (why it is no judgement, else None) and ``equivalent``."""
    texts = [candidates] if isinstance(candidates, str) else list(candidates)
    body = {"env_id": env_id, "turn": dict(turn), "candidates": texts, "verifier": verifier}
    with httpx.Client(base_url=base_url.rstrip("/"), timeout=timeout, headers=_headers(token)) as client:
        return list(_request(client, "POST", "/verify/turn", json=body))
