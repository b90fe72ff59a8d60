"""The τ² env: the domain's policy and tools, a simulated user, and the episode reward as τ²-bench scores it.

Each env runs its domain's MCP server (from the asset package) once, with a private state folder; every
episode is a fresh ``state_key`` on it, so it starts from the domain's database and sees no other episode's
writes. The system message is the domain policy, then the tools (their ``state_key`` argument hidden: the env
sets it) and the call format. A tool call is executed on the server; a plain message goes to the user
simulator (a registered one: ``pivotgym user-simulators``, :mod:`pivotgym.users`), whose answer is the next
observation; the episode ends when the user writes ``###STOP###``, when the agent transfers to a human agent,
or at the turn limit.

Reward (τ²-bench's, on the task's ``reward_basis``): ``DB`` - the database at the end equals the one the gold
calls produce (a hash over a canonical dump); ``COMMUNICATE`` - every item of ``communicate_info`` appears in
the agent's messages. A task whose basis holds natural-language assertions cannot be scored without a judge:
its episodes report ``undecided`` in their info (the reward then counts only what could be checked).
"""

from __future__ import annotations

import functools
import hashlib
import json
import shutil
import tempfile
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pivotgym import McpEnv, McpEnvConfig, McpServer, StepOutcome, Task, make_user_simulator
from pivotgym.types import Message, ToolCall, assistant_message, canonical_json, message
from pivotgym.users import STOP, Scenario, UserSimulator
from pivotgym_tau2 import data

__all__ = ["Tau2Env", "communicated", "gold_calls", "task_kind"]

#: the server's own control tools, which an agent is not offered
CONTROL_TOOLS = ("reset_state", "get_call_log")
TRANSFER = "transfer_to_human_agents"
CLOSING_WITH_INFO = "Here is what you asked about: {items}. Is there anything else I can help you with?"
CLOSING = "Your request is complete. Is there anything else I can help you with?"
REFUSAL = "I am sorry, but I cannot help with this request under our policy."
CONFIRMATION = "I am about to call {name} with {arguments}. Do you confirm (yes/no)?"


def communicated(item: str, said: Sequence[str]) -> bool:
    """τ²-bench's check of one ``communicate_info`` item: it appears in an agent message, case and commas aside."""
    want = str(item).lower().replace(",", "")
    return any(want in text.lower().replace(",", "") for text in said)


class Tau2Env(McpEnv):
    """A τ² domain (``airline`` or ``retail``) with a user simulator (``scripted`` by default, or ``llm`` with
    ``user_options`` such as ``{"sampler": "openai", "model": ...}``)."""

    max_turns = 40
    max_new_tokens = 256
    #: what the ``judge`` verifier is told equivalence means here: for a message turn, what the message does for
    #: the user (the rule verifier checks confirmations and the task's information items)
    judge_instructions = (
        "Decide whether the CANDIDATE does for the customer what the EXPERT action did at this point: the same "
        "tool call with equivalent arguments, or a message that asks for the same information or confirmation "
        "and tells the same facts. Politeness and wording do not matter; a missing question, a missing fact, a "
        "write the expert did not make, or a different reservation or order do."
    )

    def __init__(
        self,
        domain: str = "retail",
        *,
        user: str | UserSimulator = "scripted",
        user_options: Mapping[str, Any] | None = None,
        call_timeout: float = 30.0,
        **kwargs: Any,
    ) -> None:
        self.domain = domain
        self.user = make_user_simulator(user, **dict(user_options or {})) if isinstance(user, str) else user
        self.state_dir = Path(tempfile.mkdtemp(prefix=f"pivotgym-tau2-{domain}-"))
        self._owns_state_dir = True
        server = McpServer(
            command=("python", "-m", f"{data.package(domain)}.server"),
            env={f"TAU2_{domain.upper()}_MCP_STATE_DIR": str(self.state_dir)},
        )
        rows = [
            {"id": task_id, "split": split, "prompt": "", "task": task, "kind": task_kind(task)}
            for split, ids in data.splits(domain).items()
            for task_id in ids
            for task in [data.tasks(domain)[task_id]]
        ]
        config = McpEnvConfig(
            id=f"tau2/{domain}-v0",
            server=server,
            tasks=tuple(rows),
            description=f"tau2-bench {domain}: policy, tools over MCP, a simulated user",
            system=data.policy(domain),
            hidden_tools=CONTROL_TOOLS,
            session_argument="state_key",
            call_timeout=call_timeout,
            max_turns=self.max_turns,
        )
        super().__init__(config=config, **kwargs)
        self.said: list[str] = []

    # ------------------------------------------------------------------ the server's state
    def session_key(self, task: Task) -> str:
        # the server reads the domain and the task from the key's first parts
        return f"tau2/{self.domain}/{task.id}/{uuid.uuid4().hex}"

    def _state_file(self, key: str) -> Path:
        return self.state_dir / f"{hashlib.sha256(key.encode('utf-8')).hexdigest()}.json"

    def database_digest(self, key: str | None) -> str:
        """The digest of the database under ``key``: the domain's initial one until the first call writes it."""
        path = self._state_file(key) if key else None
        if path is None or not path.is_file():
            return _base_digest(self.domain)
        return _digest(json.loads(path.read_text(encoding="utf-8"))["db"])

    def state_digest(self) -> str | None:
        return self.database_digest(self._session_key)

    def _end_session(self, wait: bool = True) -> None:
        if self._session_key:
            self._state_file(self._session_key).unlink(missing_ok=True)  # a retail state is ~3 MB
        super()._end_session(wait)

    def close(self, wait: bool = True) -> None:
        super().close(wait)
        if self.__dict__.get("_owns_state_dir"):  # copies share the folder; its maker removes it
            shutil.rmtree(self.state_dir, ignore_errors=True)

    # ------------------------------------------------------------------ the gold run of a task
    def gold(self, task: Task) -> dict[str, Any]:
        """What the gold calls do from the initial database: each call's result, whether it writes (changes
        the database), and the digest at the end. Computed once per task on a key of its own."""
        cache = self.__dict__.setdefault("_gold", {})
        if task.id not in cache:
            if self._shared is None or self._shared.broken:
                self._shared = self._open()
            key = f"tau2/{self.domain}/{task.id}/gold-{uuid.uuid4().hex}"
            before = self.database_digest(None)
            steps = []
            for action in gold_calls(task):
                result = self._shared.call_tool(action.name, {**action.arguments, "state_key": key})
                after = self.database_digest(key)
                steps.append({"call": action, "result": self.result_text(result), "writes": after != before})
                before = after
            cache[task.id] = {"steps": steps, "digest": before}
            self._state_file(key).unlink(missing_ok=True)
        return cache[task.id]

    # ------------------------------------------------------------------ episodes
    def scenario(self, task: Task) -> Scenario:
        return Scenario.of(task.data["task"])

    def initial_messages(self, task: Task) -> list[Message]:
        self._new_session(task)
        self.said, self.calls_sent = [], 0
        return [message("system", self.system_prompt(task)), message("user", self.user.opening(self.scenario(task)))]

    def system_prompt(self, task: Task) -> str:
        return super().system_prompt(task) + (
            "\nTool results come back as tool messages. Talk to the user with plain messages; make one tool call "
            "at a time, and do not write to the user in the same turn as a call."
        )

    def result_text(self, result: Any) -> str:
        """The τ² server wraps each result; the tool message is the domain tool's own output."""
        wrapped = (result.structured or {}).get("tau2_tool_message") if result.structured else None
        if isinstance(wrapped, Mapping) and "content" in wrapped:
            return str(wrapped["content"])
        return super().result_text(result)

    def apply_action(self, action: str) -> StepOutcome:
        outcome = super().apply_action(action)
        calls = (outcome.assistant or {}).get("tool_calls", [])
        if any(c["function"]["name"] == TRANSFER for c in calls) and not outcome.terminated:
            reward, info = self.episode_reward()
            return StepOutcome(
                outcome.observation,
                reward=reward,
                terminated=True,
                info={**info, "ended_by": "transfer"},
                assistant=outcome.assistant,
            )
        return outcome

    def on_message(self, text: str) -> StepOutcome:
        self.said.append(text)
        said = assistant_message(text)
        try:
            reply = self.user.reply(self.scenario(self.active_task), [*self.messages, said], self.task_done())
            if not str(reply or "").strip():
                raise ValueError(f"the user simulator {self.user.name!r} returned an empty message")
        except Exception as exc:  # a user model that fails or says nothing ends the episode, named
            reward, info = self.episode_reward()
            return StepOutcome(
                [],
                reward=reward,
                terminated=True,
                info={**info, "error": "user_simulator", "error_message": str(exc)},
                assistant=said,
            )
        if STOP in reply:
            reward, info = self.episode_reward()
            return StepOutcome(
                [message("user", reply)],
                reward=reward,
                terminated=True,
                info={**info, "ended_by": "user"},
                assistant=said,
            )
        return StepOutcome([message("user", reply)], assistant=said)

    def task_done(self) -> bool:
        """What the scripted user takes for done: the gold database, everything to communicate said, and at
        least as many calls answered by the server as the gold run has."""
        task = self.active_task
        criteria = task.data["task"].get("evaluation_criteria") or {}
        items = criteria.get("communicate_info") or []
        gold = self.gold(task)
        return (
            self.state_digest() == gold["digest"]
            and all(communicated(i, self.said) for i in items)
            and self.calls_sent >= len(gold["steps"])
        )

    def episode_reward(self) -> tuple[float, dict[str, Any]]:
        """τ²-bench's reward on the task's basis (see the module docstring), with its parts in the info."""
        task = self.active_task
        criteria = task.data["task"].get("evaluation_criteria") or {}
        basis = list(criteria.get("reward_basis") or ["DB"])
        db = self.state_digest() == self.gold(task)["digest"]
        items = [str(i) for i in criteria.get("communicate_info") or []]
        missing = [i for i in items if not communicated(i, self.said)]
        reward = float((db or "DB" not in basis) and (not missing or "COMMUNICATE" not in basis))
        info: dict[str, Any] = {"db_match": db, "communicate_missing": missing, "reward_basis": basis}
        assertions = criteria.get("nl_assertions") or []
        if assertions and "NL_ASSERTION" in basis:
            info["undecided"] = f"{len(assertions)} natural-language assertion(s) need a judge"
        return reward, info

    candidate_description = "an action of the task's own expert trajectory, from any of its turns"

    def candidate_actions(self) -> list[str] | None:
        """Every action of the active task's expert trajectory (its tool calls, confirmation requests and closing
        message), wherever it comes in the trajectory: the floors' naive policy knows what the expert does but
        not when, and the share of states crediting two or more of them shows where order does not matter (a
        read the expert makes later, with the verifier's ``later_reads`` option)."""
        actions = self.expert_actions(self.active_task)
        return None if actions is None else [self.render_action(a) for a in actions]

    def expert_actions(self, task: Task) -> list[Message] | None:
        """The gold calls in order, each write preceded by a request for confirmation (the policy requires
        it; the user answers it), then a closing message with the information to communicate. A task with
        neither gold calls nor information to give (:func:`task_kind` ``refusal``) is refused."""
        steps = self.gold(task)["steps"]
        items = [str(i) for i in (task.data["task"].get("evaluation_criteria") or {}).get("communicate_info") or []]
        if task.data["kind"] == "refusal":
            return [assistant_message(REFUSAL)]
        out: list[Message] = []
        for step in steps:
            call: ToolCall = step["call"]
            if step["writes"]:
                out.append(
                    assistant_message(
                        CONFIRMATION.format(
                            name=call.name, arguments=json.dumps(call.arguments, ensure_ascii=False, sort_keys=True)
                        )
                    )
                )
            out.append(assistant_message("", [call]))
        if not steps or steps[-1]["call"].name != TRANSFER:
            out.append(assistant_message(CLOSING_WITH_INFO.format(items=", ".join(items)) if items else CLOSING))
        return out

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state.pop("_gold", None)
        state["_owns_state_dir"] = False
        return state


def task_kind(task: Mapping[str, Any]) -> str:
    """``action`` (gold calls to make), ``information`` (no call, information to give) or ``refusal`` (neither:
    what the user asks must be refused under the policy)."""
    criteria = task.get("evaluation_criteria") or {}
    if criteria.get("actions"):
        return "action"
    return "information" if criteria.get("communicate_info") else "refusal"


def gold_calls(task: Task) -> list[ToolCall]:
    """The task's gold tool calls in order (``evaluation_criteria.actions``)."""
    actions = (task.data["task"].get("evaluation_criteria") or {}).get("actions") or []
    return [ToolCall(str(a["name"]), dict(a.get("arguments") or {})) for a in actions]


def _digest(db: Any) -> str:
    return hashlib.sha256(canonical_json(db).encode("utf-8")).hexdigest()[:32]


@functools.cache
def _base_digest(domain: str) -> str:
    return _digest(json.loads((data.domain_dir(domain) / "db.json").read_text(encoding="utf-8")))
