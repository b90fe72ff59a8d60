"""The FastAPI app of ``pivotgym serve`` (routes are listed in docs/serve.md).

Session routes are plain functions, so Starlette runs each in a worker thread; the thread pool is raised to
``max_sessions`` plus a margin, so one slow step never keeps another session (or ``/health``) waiting.
Every error is JSON, ``{"error": code, "message": ..., "hint": ...}``, never a traceback: bad input gets
400/404/409/413/422/429, a bug 500 with the exception's one-line text.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pivotgym._version import __version__
from pivotgym.errors import RegistryError
from pivotgym.serve import nemo
from pivotgym.serve.openenv import add_openenv_routes
from pivotgym.serve.sessions import ServeConfig, ServeError, SessionManager, jsonable
from pivotgym.serve.verify import judge_turn, nemo_verify


class SafeJSONResponse(JSONResponse):
    """JSON with every non-ASCII character escaped: a lone surrogate an env echoes back still encodes."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii")


def _error(status: int, code: str, message: str, hint: str | None = None) -> SafeJSONResponse:
    return SafeJSONResponse({"error": code, "message": message, "hint": hint}, status_code=status)


class BodyLimit:
    """Refuses a request body over ``max_bytes`` with 413 (by its Content-Length, or while reading it)."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._refuse(scope, receive, send)
                return
            chunks.append(chunk)
            more = bool(message.get("more_body"))
        body = b"".join(chunks)
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = _error(
            413,
            "body_too_large",
            f"the request body is larger than the server's limit of {self.max_bytes} bytes",
            hint="send a shorter action or turn, or start the server with a larger --max-body-bytes",
        )
        await response(scope, receive, send)


class TokenAuth:
    """Every request but ``GET /health`` must carry the server's token: ``Authorization: Bearer TOKEN`` (HTTP and
    WebSocket), or ``?token=TOKEN`` on a WebSocket URL (OpenEnv's client sets no headers). 401 otherwise; a
    WebSocket handshake is refused (HTTP 403). Compared in constant time."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token.encode()

    def _presented(self, scope: Scope) -> bytes:
        auth = dict(scope.get("headers") or []).get(b"authorization", b"")
        if auth.lower().startswith(b"bearer "):
            return auth[7:].strip()
        if scope["type"] == "websocket":
            from urllib.parse import parse_qs

            values = parse_qs((scope.get("query_string") or b"").decode("latin-1")).get("token")
            return values[0].encode() if values else b""
        return b""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or (scope["type"] == "http" and scope["path"] == "/health"):
            await self.app(scope, receive, send)
            return
        if hmac.compare_digest(self._presented(scope), self.token):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008, "reason": "unauthorized"})
            return
        response = _error(
            401,
            "unauthorized",
            "this server needs its token",
            hint="send `Authorization: Bearer <token>` (RemoteEnv(token=...) or $PIVOTGYM_SERVE_TOKEN)",
        )
        await response(scope, receive, send)


class WorkerRouter:
    """With ``--workers N``: a request for a session another worker holds (its id starts ``w<j>-``) is answered
    307 with that worker's own URL, so it reaches the process that has the env (a redirect keeps the method
    and the body). :class:`~pivotgym.remote.RemoteEnv` talks to its session's worker directly from the start."""

    def __init__(self, app: ASGIApp, worker: int, worker_urls: tuple[str, ...]) -> None:
        self.app = app
        self.worker = worker
        self.worker_urls = worker_urls

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/sessions/w"):
            owner = scope["path"].split("/")[2].split("-", 1)[0][1:]
            if owner.isdigit() and int(owner) != self.worker and int(owner) < len(self.worker_urls):
                query = scope.get("query_string") or b""
                target = self.worker_urls[int(owner)] + scope["path"] + ("?" + query.decode() if query else "")
                response = SafeJSONResponse(
                    {"error": "other_worker", "message": f"the session is held by worker {owner}", "hint": target},
                    status_code=307,
                    headers={"location": target},
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


# ------------------------------------------------------------------------------------------------ bodies
class CreateSessionBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    env_id: str = Field(min_length=1, description="a registered env id, e.g. planning/blocks-v0")
    kwargs: dict[str, Any] = Field(default_factory=dict, description="keyword arguments for the env")


class ResetBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    seed: int | None = Field(default=None, strict=True)
    options: dict[str, Any] | None = None


class StepBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    action: Any = Field(description="the assistant's text")


class VerifyTurnBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    env_id: str | None = None
    turn: dict[str, Any]
    candidates: list[str] = Field(min_length=1)
    verifier: str = "functional"


# ------------------------------------------------------------------------------------------------ the app
def create_app(config: ServeConfig | None = None) -> FastAPI:
    """The server's ASGI app; ``uvicorn.run(create_app(...))`` serves it."""
    config = config or ServeConfig()
    manager = SessionManager(config)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        import anyio.to_thread

        limiter = anyio.to_thread.current_default_thread_limiter()
        limiter.total_tokens = max(int(limiter.total_tokens), config.max_sessions + 16)
        manager.start_reaper()
        try:
            yield
        finally:
            manager.shutdown()

    app = FastAPI(
        title="pivotgym",
        version=__version__,
        description="pivotgym envs and verifiers over HTTP (docs/serve.md)",
        lifespan=lifespan,
        default_response_class=SafeJSONResponse,
    )
    app.state.sessions = manager
    app.state.config = config

    @app.exception_handler(ServeError)
    async def serve_error(request: Request, exc: ServeError) -> SafeJSONResponse:
        return SafeJSONResponse(exc.to_dict(), status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> SafeJSONResponse:
        problems = []
        for err in exc.errors()[:5]:
            where = ".".join(str(p) for p in err.get("loc", ()) if p != "body") or "body"
            kind = err.get("type", "")
            text = "the body is not valid JSON" if kind == "json_invalid" else f"{where}: {err.get('msg', '')}"
            problems.append(text)
        return _error(422, "bad_request", "; ".join(problems) or "the request is invalid", _hint_for(request))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> SafeJSONResponse:
        codes = {404: "not_found", 405: "method_not_allowed"}
        return _error(
            exc.status_code,
            codes.get(exc.status_code, "http_error"),
            f"{request.method} {request.url.path}: {exc.detail}",
            "routes: GET /health, GET /envs, GET /envs/{env_id}/tasks, POST /sessions, "
            "POST /sessions/{id}/reset, POST /sessions/{id}/step, DELETE /sessions/{id}, "
            "POST /verify/turn, POST /verify (docs/serve.md)",
        )

    @app.exception_handler(Exception)
    async def internal(request: Request, exc: Exception) -> SafeJSONResponse:
        text = " ".join(str(exc).split())[:300]
        return _error(
            500, "internal_error", f"{type(exc).__name__}: {text}", "a bug in the server or an env; see its log"
        )

    app.add_middleware(BodyLimit, max_bytes=config.max_body_bytes)
    if config.worker_urls:
        app.add_middleware(WorkerRouter, worker=config.worker, worker_urls=config.worker_urls)
    if config.token:  # outermost: a request without the token is refused before its body is read
        app.add_middleware(TokenAuth, token=config.token)

    # -------------------------------------------------------------------------------- health and listing
    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {
            "status": "ok",
            "version": __version__,
            "sessions": len(manager),
            "max_sessions": config.max_sessions,
            "idle_timeout": config.idle_timeout,
            "step_timeout": config.step_timeout,
            "reaped": manager.reaped,
        }

    @app.get("/envs")
    def envs() -> list[dict[str, Any]]:
        from pivotgym.registry import list_envs

        return jsonable([spec.to_dict() for spec in list_envs()])

    @app.get("/envs/{env_id:path}/tasks")
    def tasks(env_id: str, split: str | None = Query(default=None)) -> dict[str, Any]:
        from pivotgym.registry import get_registry

        registry = get_registry()
        try:
            registry.env_spec(env_id)
            env = registry.make(env_id)
        except RegistryError as exc:
            raise ServeError(404, "unknown_env", str(exc), hint="GET /envs lists the env ids") from None
        chosen = split or env.splits[0]
        if chosen not in env.splits:
            raise ServeError(
                404, "unknown_split", f"{env_id} has no split {chosen!r}", hint=f"splits: {list(env.splits)}"
            )
        try:
            items = [{"id": t.id, "split": t.split} for t in env.tasks(chosen)]
        finally:
            env.close()
        return {"env_id": env_id, "split": chosen, "splits": list(env.splits), "tasks": items}

    # -------------------------------------------------------------------------------- sessions
    @app.post("/sessions", status_code=201)
    def create_session(body: CreateSessionBody) -> dict[str, Any]:
        described = manager.create(body.env_id, body.kwargs).describe()
        if config.worker_urls:  # the worker that holds it: a client may talk to it directly
            described["worker_url"] = config.worker_urls[config.worker]
        return jsonable(described)

    @app.get("/sessions")
    async def list_sessions() -> list[dict[str, Any]]:
        return manager.list()

    @app.get("/sessions/{session_id}")
    def get_session(session_id: str) -> dict[str, Any]:
        with manager.use(session_id, touch=False) as session:  # reading the state does not keep it open
            out = session.describe()
            tools = getattr(session.env, "tool_schemas", None)
            out["tools"] = tools() if callable(tools) and session.was_reset else []
            return jsonable(out)

    @app.post("/sessions/{session_id}/reset")
    def reset(session_id: str, body: ResetBody | None = None) -> dict[str, Any]:
        body = body or ResetBody()
        return manager.reset(session_id, body.seed, body.options)

    @app.post("/sessions/{session_id}/step")
    def step(session_id: str, body: StepBody) -> dict[str, Any]:
        return manager.step(session_id, body.action)

    @app.delete("/sessions/{session_id}")
    def close_session(session_id: str) -> dict[str, Any]:
        manager.close(session_id)
        return {"session_id": session_id, "closed": True}

    # -------------------------------------------------------------------------------- verification
    @app.post("/verify/turn")
    def verify_turn(body: VerifyTurnBody) -> list[dict[str, Any]]:
        return judge_turn(body.env_id, body.turn, body.candidates, body.verifier)

    @app.post("/verify")
    def verify_nemo(body: dict[str, Any]) -> dict[str, Any]:
        return nemo_verify(body, config.nemo_env)

    # OpenEnv's protocol, one base URL per env (pivotgym/serve/openenv.py)
    add_openenv_routes(app, manager)

    # the rest of NeMo-Gym's resources-server API (pivotgym/serve/nemo.py)
    @app.post("/seed_session")
    async def nemo_seed_session(request: Request) -> dict[str, Any]:
        return nemo.seed_session(await _json_or_empty(request))

    @app.post("/close_session")
    def nemo_close_session(body: dict[str, Any]) -> dict[str, Any]:
        return nemo.close_session(body)

    @app.post("/aggregate_metrics")
    def nemo_aggregate_metrics(body: dict[str, Any]) -> dict[str, Any]:
        return nemo.aggregate_metrics(body)

    @app.get("/reverify_mode")
    def nemo_reverify_mode() -> str:
        return nemo.REVERIFY_MODE

    return app


async def _json_or_empty(request: Request) -> Any:
    """The request's JSON body, or None when it has none (an agent may seed with an empty body)."""
    raw = await request.body()
    if not raw.strip():
        return None
    try:
        return json.loads(raw)
    except ValueError:
        raise ServeError(400, "bad_json", "the body is not valid JSON", hint="send a JSON object") from None


def _hint_for(request: Request) -> str:
    path = request.url.path
    if path.endswith("/step"):
        return 'send {"action": "<the assistant text>"}'
    if path.endswith("/reset"):
        return 'send {"seed": <int or null>, "options": {"task_id" or "split": ...}} (both optional)'
    if path == "/sessions":
        return 'send {"env_id": "planning/blocks-v0", "kwargs": {...}}'
    if path == "/verify/turn":
        return 'send {"env_id": ..., "turn": {"messages": [...], "expert": ...}, "candidates": ["..."]}'
    return "see docs/serve.md for the body of each route"


__all__ = ["BodyLimit", "SafeJSONResponse", "TokenAuth", "WorkerRouter", "create_app"]
