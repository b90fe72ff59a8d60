"""MCP tool servers as environments: a synchronous client session (:mod:`pivotgym.mcp.session`), the env
definition read from YAML or given whole (:mod:`pivotgym.mcp.config`), and the env with its functional
verifier (:mod:`pivotgym.mcp.env`). The ``mcp`` SDK is imported only when a session opens."""

from pivotgym.mcp.config import McpEnvConfig
from pivotgym.mcp.env import McpEnv, McpResultVerifier, argument_problem
from pivotgym.mcp.session import McpError, McpResult, McpServer, McpSession, McpTool

__all__ = [
    "McpEnv",
    "McpEnvConfig",
    "McpError",
    "McpResult",
    "McpResultVerifier",
    "McpServer",
    "McpSession",
    "McpTool",
    "argument_problem",
]
