"""A small MCP server written with the SDK, for the MCP env's tests: a tally per session, and tools that fail.

Run over stdio (``python tally_server.py``) or streamable HTTP (``python tally_server.py --http PORT``).
"""

from __future__ import annotations

import os
import sys
import time

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("tally")
TALLIES: dict[str, int] = {}


@server.tool()
def add(n: int, session: str = "") -> int:
    """Add n to the tally and return the new total."""
    TALLIES[session] = TALLIES.get(session, 0) + n
    return TALLIES[session]


@server.tool()
def total(session: str = "") -> int:
    """The tally so far."""
    return TALLIES.get(session, 0)


@server.tool()
def sleep(seconds: float) -> str:
    """Sleep (a tool that hangs)."""
    time.sleep(seconds)
    return "awake"


@server.tool()
def crash() -> str:
    """End the server process at once (a server that dies mid-episode)."""
    os._exit(3)


@server.tool()
def fail(reason: str) -> str:
    """A tool that refuses (the SDK reports a ToolError's message; other exceptions it hides)."""
    raise ToolError(reason)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio")
