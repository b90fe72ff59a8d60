"""Any MCP tool server as a multi-turn environment, and a verifier that judges calls by what they do there.

:class:`McpEnv` offers the server's tools (``tools/list``) as the env's tool schemas, reads each assistant
text with the core's tool-call codec (:func:`pivotgym.parsing.parse_action`), executes the calls through
``tools/call`` and answers with tool messages. A plain message hands the turn back: by default it is the
final answer and ends the episode (reward 1 when it carries every string the task ``expect``s); a
conversational domain overrides :meth:`McpEnv.on_message` to pass it to a simulated user instead.

Isolation: every episode has its own MCP session. A stdio server is started afresh for each episode, unless
the env names a ``session_argument`` (a tool argument the server keys its state by, as the τ² servers'
``state_key``): then one process serves the env's episodes and each episode gets its own key, which the env
adds to every call and hides from the policy. Every request has a deadline (``call_timeout``); a server
that dies, hangs or answers outside the protocol ends the episode with an error observation naming the
cause, and the next ``reset`` starts a new session.

Arguments are checked against the tool's JSON schema before the call leaves (``jsonschema``), so a wrong
type is an error observation naming the argument rather than whatever the server makes of it.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pivotgym.env import AgentEnv, InvalidAction, StepOutcome
from pivotgym.mcp.config import McpEnvConfig
from pivotgym.mcp.session import McpError, McpResult, McpServer, McpSession, McpTool
from pivotgym.parsing import FORMAT_HINT, ParseError, message_problem, parse_action, render_message
from pivotgym.types import Message, Task, ToolCall, Verdict, assistant_message, canonical_json, message
from pivotgym.verify import VerifyContext, calls_equivalent, normalize_string

__all__ = ["McpEnv", "McpResultVerifier"]

#: the longest tool result kept in a tool message (longer ones are cut, with a note)
MAX_RESULT_CHARS = 20_000


class McpEnv(AgentEnv):
    """A tool-use env over an MCP server (see the module docstring). Built from a YAML file (``config_path``),
    an :class:`McpEnvConfig`, or keyword arguments: ``server`` and ``tasks`` at least."""

    error_role = "tool"
    max_turns = 12
    max_new_tokens = 256

    def __init__(
        self,
        config_path: str | os.PathLike[str] | None = None,
        *,
        config: McpEnvConfig | Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        own = {k: kwargs.pop(k) for k in list(kwargs) if k in McpEnvConfig.FIELDS}
        if config is None and config_path is not None:
            config = McpEnvConfig.read(config_path)
        elif config is None:
            config = McpEnvConfig.parse({"id": own.pop("id", f"mcp/{type(self).__name__.lower()}-v0"), **own})
            own = {}
        elif isinstance(config, Mapping):
            config = McpEnvConfig.parse(dict(config), Path(config_path) if config_path else None)
        if own:
            config = config.replace(**own)
        self.config: McpEnvConfig = config
        self.env_id = config.id
        self.splits = config.split_names()
        self.max_turns = config.max_turns or self.max_turns
        if kwargs.get("max_new_tokens") is None and config.max_new_tokens is not None:
            kwargs["max_new_tokens"] = config.max_new_tokens
        super().__init__(**kwargs)
        self.env_id = config.id
        self._shared: McpSession | None = None  # the one process of a keyed server
        self._session: McpSession | None = None
        self._session_key: str | None = None
        self._tools: dict[str, McpTool] | None = None
        #: calls of this episode the server answered (refused ones, unknown tools or bad arguments, excluded)
        self.calls_sent = 0

    # ------------------------------------------------------------------ sessions
    @property
    def server(self) -> McpServer:
        return self.config.server

    def _open(self) -> McpSession:
        return McpSession(self.server, timeout=self.config.call_timeout).open()

    def _new_session(self, task: Task) -> McpSession:
        """The session of a new episode: a fresh key on the shared process of a keyed server, else a fresh
        session (a fresh process for stdio)."""
        self._end_session()
        if self.config.session_argument:
            if self._shared is None or self._shared.broken:
                if self._shared is not None:
                    self._shared.close()
                self._shared = self._open()
            self._session_key = self.session_key(task)
            self._session = self._shared
        else:
            self._session = self._open()
        return self._session

    def session_key(self, task: Task) -> str:
        """The ``session_argument`` value of a new episode on ``task``: unique to it (override to shape it as
        a server expects)."""
        return f"pivotgym/{self.env_id}/{task.id}/{uuid.uuid4().hex}"

    def _end_session(self, wait: bool = True) -> None:
        if self._session is not None and self._session is not self._shared:
            self._session.close(wait)
        self._session = None
        self._session_key = None

    def close(self, wait: bool = True) -> None:
        """End the episode's session and the shared one (their servers stop); ``wait`` for them to finish."""
        self._end_session(wait)
        if self._shared is not None:
            self._shared.close(wait)
            self._shared = None
        super().close()

    def __del__(self) -> None:
        # an env dropped without close() (a verifier's context evicted from a cache) must not keep its server
        try:
            self.close(wait=False)
        except Exception:
            pass

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state.update(_shared=None, _session=None, _session_key=None)  # sessions are neither copied nor pickled
        return state

    def __deepcopy__(self, memo: dict[int, Any]) -> McpEnv:
        import copy

        clone = type(self).__new__(type(self))
        memo[id(self)] = clone
        clone.__dict__.update(copy.deepcopy(self.__getstate__(), memo))
        return clone

    # ------------------------------------------------------------------ tools
    def tools(self) -> dict[str, McpTool]:
        """The tools the policy may call: the server's, less :attr:`McpEnvConfig.hidden_tools` (listed once)."""
        if self._tools is None:
            session = self._session if self._session is not None and not self._session.broken else None
            if session is None:
                with McpSession(self.server, timeout=self.config.call_timeout) as probe:
                    listed = probe.list_tools()
            else:
                listed = session.list_tools()
            self._tools = {t.name: t for t in listed if t.name not in self.config.hidden_tools}
        return self._tools

    def tool_schemas(self) -> list[dict[str, Any]]:
        hidden = [self.config.session_argument] if self.config.session_argument else []
        return [tool.schema(hidden) for tool in self.tools().values()]

    def system_prompt(self, task: Task) -> str:
        """The system message: the config's ``system`` text, then the tools and how to call them."""
        lines = [self.config.system.strip()] if self.config.system.strip() else []
        lines.append("You can call these tools (JSON schemas):")
        lines += [json.dumps(s["function"], ensure_ascii=False, sort_keys=True) for s in self.tool_schemas()]
        lines.append(FORMAT_HINT)
        return "\n".join(lines)

    # ------------------------------------------------------------------ tasks
    def load_tasks(self, split: str) -> list[Task]:
        return [Task(id=str(row["id"]), split=split, data=dict(row)) for row in self.config.rows(split)]

    def initial_messages(self, task: Task) -> list[Message]:
        self._new_session(task)
        self.calls_sent = 0
        opening: list[Message] = [dict(m) for m in task.data.get("messages") or ()]  # type: ignore[misc]
        return [message("system", self.system_prompt(task)), *(opening or [message("user", str(task.data["prompt"]))])]

    def expert_actions(self, task: Task) -> list[Message] | None:
        expert = task.data.get("expert")
        if not expert:
            return None
        out: list[Message] = []
        for turn in expert:
            calls = [ToolCall(c["name"], dict(c.get("arguments") or {})) for c in turn.get("tool_calls") or []]
            out.append(assistant_message(str(turn.get("content") or ""), calls or None))
        return out

    def render_action(self, msg: Message) -> str:
        return render_message(msg)

    # ------------------------------------------------------------------ acting
    def parse(self, action: str) -> tuple[list[ToolCall], str]:
        """The calls and prose of an action; an unreadable one is an :class:`InvalidAction` naming the fix."""
        try:
            parsed = parse_action(action)
        except ParseError as exc:
            raise InvalidAction(str(exc), code="parse_error") from None  # the message carries the format hint
        return list(parsed.calls), parsed.content

    def apply_action(self, action: str) -> StepOutcome:
        calls, content = self.parse(action)
        if not calls:
            problem = message_problem(content or action)
            if problem:  # a message is for a reader (a user, or the final answer): noise is not one
                raise InvalidAction(f"A message must be readable text: {problem}.", code="unreadable_message")
            return self.on_message(content or action)
        assistant = assistant_message(content, calls)
        ids = [c["id"] for c in assistant.get("tool_calls", [])]
        observations: list[Message] = []
        for call, call_id in zip(calls, ids):
            try:
                text = self.call(call)
            except McpError as exc:
                observations.append(
                    message(
                        "tool",
                        f"Error: the tool server failed ({exc}); the episode ends.",
                        tool_call_id=call_id,
                        name=call.name,
                    )
                )
                self._end_session()
                return StepOutcome(
                    observations,
                    terminated=True,
                    info={"error": "server_unavailable", "error_message": str(exc)},
                    assistant=assistant,
                )
            observations.append(message("tool", text, tool_call_id=call_id, name=call.name))
        return StepOutcome(observations, assistant=assistant)

    def call(self, call: ToolCall) -> str:
        """Execute one call in this episode's session; the tool message's text. A call the server cannot take
        (unknown tool, arguments that break the schema) is answered here with an error text; a server that
        fails raises :class:`McpError`."""
        tools = self.tools()
        tool = tools.get(call.name)
        if tool is None:
            return f"Error: unknown tool {call.name!r}; the tools are: {', '.join(sorted(tools))}."
        problem = argument_problem(call.arguments, tool, self.config.session_argument)
        if problem:
            return f"Error: invalid arguments for {call.name}: {problem}"
        if self._session is None:
            raise McpError("no session: call reset() first")
        arguments = dict(call.arguments)
        if self.config.session_argument:
            arguments[self.config.session_argument] = self._session_key
        result = self._session.call_tool(call.name, arguments)
        self.calls_sent += 1
        return _cut(self.result_text(result))

    def result_text(self, result: McpResult) -> str:
        """The tool message of a ``tools/call`` result: its text content (servers that wrap their results
        override this to unwrap them). An error result keeps its text, marked as an error."""
        text = result.text
        return text if not result.is_error or text.lower().startswith("error") else f"Error: {text}"

    def on_message(self, text: str) -> StepOutcome:
        """A plain message: here the final answer, which ends the episode with :meth:`final_reward`."""
        reward, info = self.final_reward(text)
        return StepOutcome([], reward=reward, terminated=True, info=info, assistant=assistant_message(text))

    def final_reward(self, text: str) -> tuple[float, dict[str, Any]]:
        """1 when the final message carries every string of the task's ``expect`` (case and spacing aside)."""
        expect = [str(e) for e in self.active_task.data.get("expect") or []]
        said = normalize_string(text, case_insensitive=True)
        missing = [e for e in expect if normalize_string(e, case_insensitive=True) not in said]
        return float(bool(expect) and not missing), {"missing": missing}

    def state_digest(self) -> str | None:
        """A digest of the server-side state of this episode, where the env can read it (None: it cannot).
        :class:`McpResultVerifier` compares it after the candidate's and the expert's calls."""
        return None


def argument_problem(arguments: Mapping[str, Any], tool: McpTool, session_argument: str | None) -> str | None:
    """What is wrong with ``arguments`` under the tool's JSON schema (the first error, with its path), or None.
    The session argument is the env's to set: a policy that sets it is refused."""
    import jsonschema

    if session_argument and session_argument in arguments:
        return f"{session_argument!r} is set by the environment, not by a call"
    schema = dict(tool.input_schema or {"type": "object"})
    if session_argument:
        schema = tool.schema([session_argument])["function"]["parameters"]
    try:
        validator = jsonschema.Draft202012Validator(schema)
        error = jsonschema.exceptions.best_match(validator.iter_errors(dict(arguments)))
    except jsonschema.exceptions.SchemaError:  # the server's own schema is broken: the server judges
        return None
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path) or "arguments"
    return f"{where}: {error.message}"


def _cut(text: str) -> str:
    if len(text) <= MAX_RESULT_CHARS:
        return text
    return text[:MAX_RESULT_CHARS] + f"\n[... {len(text) - MAX_RESULT_CHARS} more characters cut]"


class McpResultVerifier:
    """Functional verifier of MCP envs: a candidate is credited when it does what the expert's action did at
    that turn. Calls first: a message where the expert calls a tool fails, and the reverse. Calls whose
    arguments are equivalent under the tools' schemas pass at once; otherwise both are executed from the
    turn's state, each in a session of its own, and pass when they return the same results (canonical JSON,
    in any order) and, where the env can read its server's state (:meth:`McpEnv.state_digest`), leave the
    same state. A message passes when it carries every ``expect`` string the expert's message carries."""

    name = "mcp/functional"
    version = "1"

    def verify(self, context: VerifyContext, candidate: str) -> Verdict:
        env = context.env()
        if not isinstance(env, McpEnv):
            return Verdict.fail("not_an_mcp_env")
        try:
            calls, content = env.parse(candidate)
        except InvalidAction as exc:
            return Verdict.fail(f"parse_error: {exc}")
        expert_calls, expert_content = env.parse(context.expert_text)
        if bool(calls) != bool(expert_calls):
            want = "a tool call" if expert_calls else "a message"
            return Verdict.fail(f"decision_mismatch: the expert wrote {want}")
        if not calls:
            return self._message(env, content or candidate, expert_content or context.expert_text)
        tools = env.tools()
        for call in calls:  # a call the env would refuse does nothing, whatever it resembles
            tool = tools.get(call.name)
            problem = (
                "unknown tool" if tool is None else argument_problem(call.arguments, tool, env.config.session_argument)
            )
            if problem:
                return Verdict.fail(f"refused_call: {call.name}: {problem}")
        schemas = {t.name: t.input_schema for t in tools.values()}
        if calls_equivalent(calls, expert_calls, schemas=schemas, order_free=False).ok:
            return Verdict.ok("equivalent:structural")
        try:
            mine = _effect(env, candidate)
            context.env()  # the same env, back at the turn's state (replayed in a new session)
            theirs = _effect(env, context.expert_text)
        except McpError as exc:
            return Verdict.undecided_because(f"server_unavailable: {exc}")
        if mine == theirs:
            return Verdict.ok("equivalent:execution")
        return Verdict.fail("different_effect: other results or another server state than the expert's call")

    def _message(self, env: McpEnv, text: str, expert_text: str) -> Verdict:
        """A message turn (both wrote one): a real message (:func:`~pivotgym.parsing.message_problem`) that
        carries the ``expect`` strings the expert's carries."""
        problem = message_problem(text)
        if problem:
            return Verdict.fail(f"empty_message: {problem}")
        expect = [str(e) for e in env.active_task.data.get("expect") or []]
        due = [
            e
            for e in expect
            if normalize_string(e, case_insensitive=True) in normalize_string(expert_text, case_insensitive=True)
        ]
        said = normalize_string(text, case_insensitive=True)
        missing = [e for e in due if normalize_string(e, case_insensitive=True) not in said]
        if missing:
            return Verdict.fail(f"missing_information: {missing}")
        return Verdict.ok("equivalent:message")


def _effect(env: McpEnv, action: str) -> tuple[list[str], str | None]:
    """What ``action`` does from the env's state: its tool results (canonical, sorted) and the state after."""
    observations, _, terminated, _, info = env.step(action)
    if info.get("error") == "server_unavailable":
        raise McpError(str(info.get("error_message")))
    results = sorted(_canonical(str(m.get("content", ""))) for m in observations if m.get("role") == "tool")
    return results, env.state_digest()


def _canonical(text: str) -> str:
    try:
        return canonical_json(json.loads(text))
    except (ValueError, RecursionError):
        return text.strip()
