"""One MCP client session, driven synchronously: what an env's ``step`` needs from the async SDK.

The ``mcp`` SDK is asynchronous and its client must be entered and left in one task (anyio cancel scopes).
:class:`McpSession` therefore runs a private event loop on a daemon thread: one task there opens the
client (``async with mcp.Client(...)``) and holds it until :meth:`McpSession.close`; every request is a
coroutine submitted to that loop and waited for with a deadline. A request past its deadline is cancelled
and the session is marked broken (the server's state can no longer be trusted), so a hung server costs one
deadline, never a hung step. Closing leaves the client's context, which for a stdio server closes its stdin
and terminates the process (the SDK escalates to a kill); a session that cannot be left within its deadline
is abandoned on its daemon thread rather than blocking the caller.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pivotgym.errors import PivotgymError

__all__ = ["McpError", "McpServer", "McpSession", "McpTool"]

T = TypeVar("T")


class McpError(PivotgymError, RuntimeError):
    """An MCP server could not be reached, broke the protocol, died or missed a deadline."""


@dataclass(frozen=True)
class McpServer:
    """Where an MCP server is: a command started over stdio, or the URL of a streamable HTTP endpoint."""

    #: the executable and its arguments (stdio); empty when :attr:`url` is set. ``python`` (or ``python3``)
    #: is the interpreter pivotgym runs in, so a server written in Python sees the same packages
    command: Sequence[str] = ()
    #: a streamable HTTP endpoint (``http://host:port/mcp``); empty when :attr:`command` is set
    url: str = ""
    #: extra environment variables of the server process (stdio)
    env: Mapping[str, str] = field(default_factory=dict)
    #: working directory of the server process (stdio)
    cwd: str | None = None

    def __post_init__(self) -> None:
        if bool(self.command) == bool(self.url):
            raise ValueError("an MCP server is either `command` (stdio) or `url` (streamable HTTP), exactly one")
        if isinstance(self.command, str):
            raise ValueError(f"`command` is a list (executable and arguments), got the string {self.command!r}")

    def describe(self) -> str:
        return self.url or " ".join(self.command)

    def transport(self) -> Any:
        """What :class:`mcp.Client` connects to: the URL, or stdio parameters that start the command."""
        if self.url:
            return self.url
        from mcp.client.stdio import StdioServerParameters

        executable = sys.executable if self.command[0] in ("python", "python3") else self.command[0]
        return StdioServerParameters(
            command=executable, args=list(self.command[1:]), env=dict(self.env) or None, cwd=self.cwd
        )


@dataclass(frozen=True)
class McpTool:
    """One tool a server offers: its name, description and JSON schema of arguments."""

    name: str
    description: str
    input_schema: dict[str, Any]

    def schema(self, hidden_arguments: Sequence[str] = ()) -> dict[str, Any]:
        """The tool as an OpenAI-style function schema (what envs offer a policy), less ``hidden_arguments``."""
        params = dict(self.input_schema or {"type": "object", "properties": {}})
        if hidden_arguments:
            props = {k: v for k, v in (params.get("properties") or {}).items() if k not in hidden_arguments}
            params["properties"] = props
            if "required" in params:
                params["required"] = [r for r in params["required"] if r not in hidden_arguments]
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": params},
        }


@dataclass(frozen=True)
class McpResult:
    """A ``tools/call`` answer: its text content (joined) and whether the server flagged it an error."""

    text: str
    is_error: bool
    structured: dict[str, Any] | None = None


class McpSession:
    """A synchronous MCP client session on a private event loop (see the module docstring).

    ``timeout`` bounds every request and the connection itself; after a missed deadline, a dead server or a
    protocol error the session is :attr:`broken` and every later request raises :class:`McpError` at once.
    """

    def __init__(self, server: McpServer, timeout: float = 30.0) -> None:
        self.server = server
        self.timeout = float(timeout)
        self.broken: str | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: Any = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle
    def open(self) -> McpSession:
        """Start the server (stdio) or connect (HTTP) and finish the handshake, within :attr:`timeout`."""
        try:
            import mcp  # noqa: F401
        except ImportError:
            raise McpError("MCP envs need the MCP SDK: pip install 'pivotgym[mcp]' (or mcp>=2.3)") from None
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"mcp {self.server.describe()[:40]}")
        self._thread.start()
        if not self._ready.wait(self.timeout):
            self.broken = f"no handshake within {self.timeout:g} s"
            self.close()
            raise McpError(f"MCP server {self.server.describe()!r}: {self.broken}")
        if self._error is not None:
            self.broken = _describe(self._error)
            raise McpError(f"MCP server {self.server.describe()!r} could not be started: {self.broken}")
        return self

    def _run(self) -> None:
        try:
            asyncio.run(self._hold())
        except BaseException as exc:  # reported through open() or the next request
            self._error = self._error or exc
        finally:
            self._ready.set()

    async def _hold(self) -> None:
        from mcp import Client

        self._stop = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        transport = self.server.transport()
        if not isinstance(transport, str):  # stdio: the server's stderr needs a real file (not a captured stream)
            from mcp.client.stdio import stdio_client

            transport = stdio_client(transport, errlog=_real_stderr())
        async with Client(transport, mode="legacy", read_timeout_seconds=self.timeout) as client:
            self._client = client
            self._ready.set()
            await self._stop.wait()

    def close(self, wait: bool = True) -> None:
        """Leave the session (a stdio server is terminated); never blocks longer than :attr:`timeout`, and not
        at all without ``wait`` (the session's thread then finishes leaving on its own)."""
        loop, stop, thread = self._loop, self._stop, self._thread
        if loop is not None and stop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(stop.set)
            except RuntimeError:  # the loop ended meanwhile
                pass
        if wait and thread is not None and thread is not threading.current_thread():
            thread.join(self.timeout)
        self.broken = self.broken or "closed"
        self._client = None

    def __enter__(self) -> McpSession:
        return self.open()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------ requests
    def _request(self, what: str, make: Callable[[Any], Awaitable[T]]) -> T:
        if self.broken is not None or self._loop is None or self._client is None:
            raise McpError(f"MCP server {self.server.describe()!r} is unavailable: {self.broken or 'not open'}")
        client = self._client
        future = asyncio.run_coroutine_threadsafe(_awaited(make(client)), self._loop)
        try:
            return future.result(self.timeout)
        except FutureTimeout:
            future.cancel()
            self.broken = f"{what} took longer than {self.timeout:g} s"
        except BaseException as exc:  # a dead pipe, a protocol error, a reply the SDK's models refuse
            self.broken = f"{what} failed: {_describe(exc)}"
        raise McpError(f"MCP server {self.server.describe()!r}: {self.broken}")

    def list_tools(self) -> list[McpTool]:
        """Every tool the server offers (all pages)."""

        async def listing(client: Any) -> list[McpTool]:
            tools: list[McpTool] = []
            cursor = None
            while True:
                page = await client.list_tools(cursor=cursor) if cursor else await client.list_tools()
                tools += [McpTool(t.name, t.description or "", dict(t.input_schema or {})) for t in page.tools]
                cursor = getattr(page, "next_cursor", None)
                if not cursor:
                    return tools

        return self._request("tools/list", listing)

    def call_tool(self, name: str, arguments: Mapping[str, Any]) -> McpResult:
        """``tools/call``: the result's text content, its error flag and its structured content."""

        async def calling(client: Any) -> McpResult:
            result = await client.call_tool(name, dict(arguments))
            texts = [getattr(c, "text", None) for c in result.content or []]
            text = "\n".join(t for t in texts if isinstance(t, str))
            structured = result.structured_content if isinstance(result.structured_content, dict) else None
            return McpResult(text, bool(result.is_error), structured)

        return self._request(f"tools/call {name}", calling)


def _real_stderr() -> Any:
    """``sys.stderr`` where it is a real file, else the process's own (a captured ``StringIO`` has no fd)."""
    try:
        sys.stderr.fileno()
        return sys.stderr
    except (AttributeError, OSError, ValueError):
        return sys.__stderr__


async def _awaited(awaitable: Awaitable[T]) -> T:
    return await awaitable


def _describe(exc: BaseException) -> str:
    """A one-line account of an exception, looking inside the exception groups anyio raises."""
    while getattr(exc, "exceptions", None):  # an exception group: its first member
        exc = exc.exceptions[0]  # type: ignore[attr-defined]
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
