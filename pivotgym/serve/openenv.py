"""OpenEnv's wire protocol (0.10) on ``pivotgym serve``: every registered env at its own OpenEnv base URL.

OpenEnv serves one environment per server and its client (``EnvClient``, ``GenericEnvClient``) appends ``/ws``
to the base URL it is given. Here each env id gets the base URL ``http://HOST:PORT/openenv/<env_id>``, so one
``pivotgym serve`` stands in for as many OpenEnv servers as it has envs:

* ``WS /openenv/<env_id>/ws``: one env session per connection (a session of :class:`SessionManager`, with its
  limits: the session cap, the idle timeout, the step deadline). Client frames ``{"type": "reset", "data":
  {"seed", "task_id", "split"}}``, ``{"type": "step", "data": {"message": "<assistant text>"}}``,
  ``{"type": "state"}`` and ``{"type": "close"}``; answers ``{"type": "observation", "data": {"observation",
  "reward", "done", "metadata"}}``, ``{"type": "state", "data": {...}}`` or ``{"type": "error", "data":
  {"message", "code"}}`` (OpenEnv's codes; the connection stays open after an error in a frame).
* stateless HTTP, as OpenEnv's server has them: ``POST .../reset`` (a fresh env, reset and closed: the first
  observation), ``POST .../step`` (refused: a multi-turn step needs the episode a connection holds),
  ``GET .../state``, ``GET .../schema``, ``GET .../metadata``, ``GET .../health``.

The observation is ``{"messages": [chat messages], "info": {...}}``; ``done`` is terminated or truncated,
both of which ``metadata`` keeps. ``tests/serve/test_openenv.py`` plays episodes to reward 1 with OpenEnv's own
``GenericEnvClient`` in a venv of its own (``make openenv``).
"""

from __future__ import annotations

import json
from typing import Any

import anyio
from fastapi import FastAPI, WebSocket, WebSocketDisconnect

from pivotgym._version import __version__
from pivotgym.errors import RegistryError
from pivotgym.serve.sessions import ServeError, SessionManager

PREFIX = "/openenv"
#: OpenEnv's error codes (``openenv.core.env_server.types.WSErrorCode``) for ours
_CODES = {
    "too_many_sessions": "CAPACITY_REACHED",
    "unknown_env": "FACTORY_ERROR",
    "env_unavailable": "FACTORY_ERROR",
    "bad_env_kwargs": "FACTORY_ERROR",
}

ACTION_SCHEMA = {
    "title": "PivotgymAction",
    "type": "object",
    "properties": {
        "message": {"type": "string", "description": "the assistant's text for this turn"},
        "metadata": {"type": "object"},
    },
    "required": ["message"],
}
OBSERVATION_SCHEMA = {
    "title": "PivotgymObservation",
    "type": "object",
    "properties": {
        "messages": {"type": "array", "items": {"type": "object"}, "description": "the conversation so far"},
        "info": {"type": "object"},
        "done": {"type": "boolean"},
        "reward": {"type": ["number", "null"]},
        "metadata": {"type": "object"},
    },
}
STATE_SCHEMA = {
    "title": "PivotgymState",
    "type": "object",
    "properties": {
        "episode_id": {"type": ["string", "null"]},
        "step_count": {"type": "integer"},
        "env_id": {"type": "string"},
        "task_id": {"type": ["string", "null"]},
        "turn": {"type": ["integer", "null"]},
        "max_turns": {"type": ["integer", "null"]},
        "done": {"type": ["boolean", "null"]},
    },
}


def _observation(answer: dict[str, Any], *, reset: bool) -> dict[str, Any]:
    """One of our reset/step answers in OpenEnv's serialised-observation form."""
    info = answer.get("info") or {}
    terminated, truncated = bool(answer.get("terminated")), bool(answer.get("truncated"))
    return {
        "observation": {"messages": answer["observation"], "info": info, "metadata": {}},
        "reward": None if reset else answer["reward"],
        "done": terminated or truncated,
        "metadata": {"terminated": terminated, "truncated": truncated},
    }


def _reset_options(data: dict[str, Any]) -> tuple[int | None, dict[str, Any] | None]:
    """(seed, options) of an OpenEnv reset's ``data``: ``seed``, and ``task_id``/``split`` as our options."""
    seed = data.get("seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise ServeError(422, "bad_request", f"seed must be an integer, got {seed!r}", hint=None)
    options = {k: data[k] for k in ("task_id", "split") if data.get(k) is not None}
    return seed, options or None


def _state(manager: SessionManager, session_id: str, episode_id: str | None) -> dict[str, Any]:
    with manager.use(session_id, touch=False) as session:
        described = session.describe()
    keys = ("env_id", "task_id", "turn", "max_turns", "done")
    return {"episode_id": episode_id, "step_count": described["steps"], **{k: described[k] for k in keys}}


def _message_of(data: Any) -> str:
    if not isinstance(data, dict) or not isinstance(data.get("message"), str):
        raise ServeError(
            422,
            "bad_action",
            'an OpenEnv action here is {"message": "<the assistant text>"}',
            hint="send the assistant's text under message",
        )
    return data["message"]


def _error_frame(exc: ServeError) -> dict[str, Any]:
    code = _CODES.get(exc.code, "EXECUTION_ERROR" if exc.status >= 500 else "VALIDATION_ERROR")
    text = str(exc) + (f" ({exc.hint})" if exc.hint else "")
    return {"type": "error", "data": {"message": text, "code": code, "pivotgym_code": exc.code}}


def add_openenv_routes(app: FastAPI, manager: SessionManager) -> None:
    """Mount the OpenEnv protocol on ``app`` (see the module docstring), backed by ``manager``'s sessions."""

    def known(env_id: str) -> Any:
        """``env_id``'s spec; 404 for an unknown one."""
        from pivotgym.registry import get_registry

        try:
            return get_registry().env_spec(env_id)
        except RegistryError as exc:
            raise ServeError(404, "unknown_env", str(exc), hint="GET /envs lists the env ids") from None

    @app.websocket(PREFIX + "/{env_id:path}/ws")
    async def openenv_ws(websocket: WebSocket, env_id: str) -> None:
        await websocket.accept()
        try:
            session = await anyio.to_thread.run_sync(manager.create, env_id, {})
        except ServeError as exc:
            await websocket.send_text(json.dumps(_error_frame(exc)))
            await websocket.close()
            return
        episode: str | None = None
        try:
            while True:
                try:
                    raw = await websocket.receive_text()
                except WebSocketDisconnect:
                    return
                try:
                    frame = json.loads(raw)
                    if not isinstance(frame, dict):
                        raise ValueError("a frame must be a JSON object")
                except ValueError as exc:
                    err = {"type": "error", "data": {"message": f"Invalid JSON: {exc}", "code": "INVALID_JSON"}}
                    await websocket.send_text(json.dumps(err))
                    continue
                kind, data = frame.get("type"), frame.get("data") or {}
                if kind == "close":
                    return
                try:
                    if kind == "reset":
                        seed, options = _reset_options(data)
                        answer = await anyio.to_thread.run_sync(manager.reset, session.id, seed, options)
                        episode = str(data.get("episode_id") or f"{session.id}-{session.steps}")
                        reply = {"type": "observation", "data": _observation(answer, reset=True)}
                    elif kind == "step":
                        message = _message_of(data)
                        answer = await anyio.to_thread.run_sync(manager.step, session.id, message)
                        reply = {"type": "observation", "data": _observation(answer, reset=False)}
                    elif kind == "state":
                        reply = {"type": "state", "data": _state(manager, session.id, episode)}
                    else:
                        reply = {
                            "type": "error",
                            "data": {"message": f"Unknown message type: {kind}", "code": "UNKNOWN_TYPE"},
                        }
                except ServeError as exc:
                    reply = _error_frame(exc)
                await websocket.send_text(json.dumps(reply, ensure_ascii=True))
        finally:
            await anyio.to_thread.run_sync(manager.close, session.id, "closed with its OpenEnv connection")
            try:
                await websocket.close()
            except RuntimeError:  # already closed by the client
                pass

    @app.post(PREFIX + "/{env_id:path}/reset")
    def openenv_reset(env_id: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        seed, options = _reset_options(body or {})
        session = manager.create(env_id, {})
        try:
            return _observation(manager.reset(session.id, seed, options), reset=True)
        finally:
            manager.close(session.id, "was a stateless OpenEnv reset")

    @app.post(PREFIX + "/{env_id:path}/step")
    def openenv_step(env_id: str) -> dict[str, Any]:
        known(env_id)
        raise ServeError(
            409,
            "reset_needed",
            f"{env_id} is multi-turn: a step needs the episode of an open session, which a stateless request "
            "does not have",
            hint=f"play episodes over the WebSocket {PREFIX}/{env_id}/ws (OpenEnv's EnvClient does)",
        )

    @app.get(PREFIX + "/{env_id:path}/state")
    def openenv_state(env_id: str) -> dict[str, Any]:
        known(env_id)
        return {"episode_id": None, "step_count": 0, "env_id": env_id}

    @app.get(PREFIX + "/{env_id:path}/schema")
    def openenv_schema(env_id: str) -> dict[str, Any]:
        known(env_id)
        return {"action": ACTION_SCHEMA, "observation": OBSERVATION_SCHEMA, "state": STATE_SCHEMA}

    @app.get(PREFIX + "/{env_id:path}/metadata")
    def openenv_metadata(env_id: str) -> dict[str, Any]:
        spec = known(env_id)
        return {
            "name": env_id,
            "description": spec.description or f"pivotgym env {env_id}",
            "version": __version__,
            "documentation_url": "docs/serve.md",
        }

    @app.get(PREFIX + "/{env_id:path}/health")
    def openenv_health(env_id: str) -> dict[str, Any]:
        known(env_id)
        return {"status": "healthy"}


__all__ = ["PREFIX", "add_openenv_routes"]
