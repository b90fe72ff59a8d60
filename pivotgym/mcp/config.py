"""The definition of an MCP env: which server, which tasks, what the policy sees; read from YAML or given whole.

A YAML file with a top-level ``server:`` key, in any env directory (``pivotgym/data/envs``,
``$PIVOTGYM_ENV_PATH``), registers an MCP env under its ``id``::

    id: demo/tally-v0
    description: a tally kept by an MCP server
    server:
      command: [python, tally_server.py]   # stdio, run in the file's folder; or `url: http://host:port/mcp`
    system: Keep the user's tally with the tools.
    max_turns: 8
    tasks:                                  # a list of rows, or a JSONL file beside this one
      - id: t1
        split: train
        prompt: Add 2, then 3, and tell me the total.
        expect: ["5"]                       # the final message must carry these
        expert:                             # optional: the expert's turns (enables `pivotgym expert`)
          - tool_calls: [{name: add, arguments: {n: 2}}]
          - tool_calls: [{name: add, arguments: {n: 3}}]
          - content: The total is 5.

Keys are checked whole (a typo is ``FILE:LINE: key: unknown key ... did you mean``).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from pivotgym.config import Source, check_section, read_yaml
from pivotgym.jsonl import iter_jsonl
from pivotgym.mcp.session import McpServer
from pivotgym.types import is_env_id

__all__ = ["McpEnvConfig"]


@dataclass
class _ServerSection:
    command: list[str] | None = None
    url: str | None = None
    env: dict[str, str] | None = None
    cwd: str | None = None


@dataclass
class _McpFile:
    """The keys an MCP env file may have."""

    id: str
    server: _ServerSection
    tasks: Any
    description: str = ""
    system: str = ""
    hidden_tools: list[str] | None = None
    session_argument: str | None = None
    call_timeout: float = 30.0
    max_turns: int | None = None
    max_new_tokens: int | None = None


@dataclass(frozen=True)
class McpEnvConfig:
    """A validated MCP env definition (see the module docstring for the keys)."""

    id: str
    server: McpServer
    #: the task rows: ``id``, ``split`` (default ``test``), ``prompt`` or ``messages``, ``expect``, ``expert``
    tasks: tuple[Mapping[str, Any], ...] = ()
    description: str = ""
    #: the first lines of the system message (the tools and the call format follow)
    system: str = ""
    #: server tools the policy is not offered (control tools of a benchmark server, say)
    hidden_tools: tuple[str, ...] = ()
    #: a tool argument the server keys its state by: set by the env per episode, hidden from the policy
    session_argument: str | None = None
    #: seconds each MCP request may take (the handshake too)
    call_timeout: float = 30.0
    max_turns: int | None = None
    max_new_tokens: int | None = None
    path: Path | None = None

    #: the keyword arguments :class:`~pivotgym.mcp.env.McpEnv` takes in place of a whole config
    FIELDS: ClassVar[frozenset[str]] = frozenset(
        (
            "id",
            "server",
            "tasks",
            "description",
            "system",
            "hidden_tools",
            "session_argument",
            "call_timeout",
            "max_turns",
        )
    )

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> McpEnvConfig:
        data, source = read_yaml(path, what="MCP env")
        return cls.parse(data, Path(path), source)

    @classmethod
    def parse(cls, data: Mapping[str, Any], path: Path | None = None, source: Source | None = None) -> McpEnvConfig:
        """A config from a mapping, checked whole: unknown keys, wrong types and a server that is neither a
        command nor a URL raise :class:`ConfigError` naming FILE:LINE and the key."""
        where = source or Source(path)
        data = dict(data)
        server = data.get("server")
        if isinstance(server, McpServer):
            data["server"] = {}
        check_section(_McpFile, data, where)
        env_id = data.get("id")
        if not is_env_id(env_id):
            raise where.error(("id",), f"must look like 'domain/name-v0', got {env_id!r}")
        folder = path.parent if path is not None else Path.cwd()
        if not isinstance(server, McpServer):
            spec = dict(server or {})
            try:
                server = McpServer(
                    command=tuple(str(c) for c in spec.get("command") or ()),
                    url=str(spec.get("url") or ""),
                    env={str(k): str(v) for k, v in (spec.get("env") or {}).items()},
                    cwd=str(folder / spec["cwd"]) if spec.get("cwd") else (str(folder) if path else None),
                )
            except ValueError as exc:
                raise where.error(("server",), str(exc)) from None
        rows = _rows(data.get("tasks"), folder, where)
        return cls(
            id=env_id,
            server=server,
            tasks=rows,
            description=str(data.get("description") or ""),
            system=str(data.get("system") or ""),
            hidden_tools=tuple(data.get("hidden_tools") or ()),
            session_argument=data.get("session_argument") or None,
            call_timeout=float(data.get("call_timeout") or 30.0),
            max_turns=data.get("max_turns"),
            max_new_tokens=data.get("max_new_tokens"),
            path=path,
        )

    def replace(self, **changes: Any) -> McpEnvConfig:
        """This config with some keys changed, checked again."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "path"}
        data.update(changes)
        data["tasks"] = list(data["tasks"])
        data["hidden_tools"] = list(data["hidden_tools"])
        return McpEnvConfig.parse(data, self.path)

    def split_names(self) -> tuple[str, ...]:
        names: list[str] = []
        for row in self.tasks:
            split = str(row.get("split") or "test")
            if split not in names:
                names.append(split)
        return tuple(names) or ("test",)

    def rows(self, split: str) -> list[Mapping[str, Any]]:
        return [row for row in self.tasks if str(row.get("split") or "test") == split]

    def register_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of the registry's ``register_environments`` callback for this file."""
        return {
            "verifier": "mcp/functional",
            "splits": list(self.split_names()),
            "description": self.description or f"MCP server {self.server.describe()}",
            "config_path": str(self.path) if self.path else None,
        }


def _rows(tasks: Any, folder: Path, where: Source) -> tuple[Mapping[str, Any], ...]:
    if isinstance(tasks, str):
        file = folder / tasks
        if not file.is_file():
            raise where.error(("tasks",), f"no such task file: {file}")
        tasks = list(iter_jsonl(file))
    if not isinstance(tasks, Sequence) or not tasks:
        raise where.error(("tasks",), "must be a non-empty list of task rows or the path of a JSONL file of them")
    seen: set[str] = set()
    for i, row in enumerate(tasks):
        if not isinstance(row, Mapping) or "id" not in row:
            raise where.error(("tasks", str(i)), "a task row is a mapping with an `id`")
        if str(row["id"]) in seen:
            raise where.error(("tasks", str(i)), f"task id {row['id']!r} appears twice")
        seen.add(str(row["id"]))
        if "prompt" not in row and "messages" not in row:
            raise where.error(("tasks", str(i)), "a task row needs `prompt` (the user's text) or `messages`")
    return tuple(dict(row) for row in tasks)
