"""The tool-use environments on BFCL data.

* :class:`SingleTurnEnv` - one question, one reply: tool call(s) judged against BFCL's acceptable answers,
  or a plain message (the right answer on ``irrelevance``, where no tool fits). Envs: simple, multiple,
  parallel, parallel-multiple, live, irrelevance; Java/JavaScript/live categories serve as OOD splits.
* :class:`MultiTurnEnv` - BFCL multi-turn: calls run against the task's simulators and their real results
  come back as tool messages; a plain message ends the user's turn, the next scripted user turn arrives, and
  the episode ends after the last one. Reward 1 when every turn left the same state as the ground truth
  and produced its results (BFCL's own criterion), else 0.
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from pivotgym import AgentEnv, InvalidAction, StepOutcome, Task
from pivotgym.types import Message, ToolCall, assistant_message, message
from pivotgym_tooluse import bfcl
from pivotgym_tooluse.matching import answer_calls, expert_call, match_answers
from pivotgym_tooluse.parsing import (
    ParsedAction,
    ParseError,
    message_problem,
    parse_action,
    render_calls,
    render_message,
)
from pivotgym_tooluse.schemas import system_prompt, to_tool, tools_note
from pivotgym_tooluse.simulator import ToolBackend

_UNCHANGED = object()


def _changed_value(value: Any) -> Any:
    """Another value of the same JSON type (``_UNCHANGED`` for values with no obvious neighbour)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value * 1.5 + 1.0
    if isinstance(value, str):
        return value + "_other" if value else "other"
    if isinstance(value, list) and value:
        return value[:-1]
    return _UNCHANGED


#: the most variants of the expert's calls ``calibration_candidates`` offers at one turn
MAX_CALIBRATION_CANDIDATES = 16


def _variants(value: Any) -> list[Any]:
    """Values to put in an argument's place for calibration: same meaning in another form, or a neighbour."""
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int):
        return [float(value), value + 1]
    if isinstance(value, float):
        return [value + 1.0]
    if isinstance(value, str) and value.strip():
        cased = value.lower() if value != value.lower() else value.upper()
        return [cased, f" {value} "] if cased != value else [f" {value} "]
    return []


ABSTAIN_TEXT = "None of the available tools can do this, so I cannot make a call for this request."
DONE_TEXT = "Done: I have completed your request."
MISSING_TEXT = "I cannot complete this with the tools and information I have; please tell me what is missing."


class ToolUseEnv(AgentEnv):
    """Shared pieces: parsing actions against the current task's tools, rendering, tool schemas."""

    error_role = "tool"
    #: one reply of tool calls: the expert's run up to ~190 tokens (parallel calls), most under 100
    max_new_tokens = 256
    #: what the ``judge`` verifier is told equivalence means here (the rule verifier compares calls by schema)
    judge_instructions = (
        "Decide whether the CANDIDATE makes the same function calls as the EXPERT action: the same functions with "
        "arguments of equal meaning (argument order, quoting, 5 vs 5.0, an optional argument left at its default "
        "do not matter; another value, another function, a missing or an extra call do)."
    )

    def _docs(self, task: Task) -> list[dict[str, Any]]:
        raise NotImplementedError

    def _language(self, task: Task) -> str:
        return task.data.get("language", "python")

    def tools_for(self, task: Task) -> list[dict[str, Any]]:
        """OpenAI-style tool schemas of a task's functions."""
        return [to_tool(d, self._language(task)) for d in self._docs(task)]

    def schemas_for(self, task: Task) -> dict[str, dict[str, Any]]:
        """``{function name: JSON-schema parameters}`` of a task (what the verifier compares with)."""
        return {t["function"]["name"]: t["function"]["parameters"] for t in self.tools_for(task)}

    def tool_schemas(self) -> list[dict[str, Any]]:
        return self.tools_for(self.task) if self.task is not None else []

    def parse(self, text: str, task: Task | None = None) -> ParsedAction:
        """Read an action for ``task`` (default: the current one); raises ParseError."""
        task = task or self.task
        order = {
            d["name"]: list(((d.get("parameters") or {}).get("properties") or {}).keys())
            for d in (self._docs(task) if task else [])
        }
        return parse_action(text, positional=order.get)

    def _parse_or_invalid(self, action: str) -> ParsedAction:
        try:
            return self.parse(action)
        except ParseError as exc:
            raise InvalidAction(str(exc), code="parse_error") from None

    def render_action(self, msg: Message) -> str:
        return render_message(msg)

    def wrong_action(self, expert_action: str) -> str | None:
        """A legal action that is not equivalent to ``expert_action`` here (the optional capability
        ``pivotgym check`` uses to catch a verifier that credits everything): the expert's calls with one
        argument changed (checked against the env's own ground truth), or fewer calls, or a call where the
        expert answered with a message. None when no such action is found."""
        try:
            parsed = self.parse(expert_action)
        except ParseError:
            return None
        if not parsed.calls:
            names = [t["function"]["name"] for t in self.tool_schemas()]
            return render_calls([ToolCall(names[0], {})]) if names else None
        for i, call in enumerate(parsed.calls):
            for param in sorted(call.arguments):
                changed = _changed_value(call.arguments[param])
                if changed is _UNCHANGED:
                    continue
                calls = list(parsed.calls)
                calls[i] = ToolCall(call.name, {**call.arguments, param: changed})
                if self._is_wrong(calls, parsed.calls):
                    return render_calls(calls)
        if len(parsed.calls) > 1 and self._is_wrong(parsed.calls[:-1], parsed.calls):
            return render_calls(parsed.calls[:-1])
        return None

    def _is_wrong(self, calls: list[ToolCall], expert_calls: list[ToolCall]) -> bool:
        raise NotImplementedError

    def calibration_candidates(self, expert_action: str) -> list[str]:
        """Variants of the expert's calls for ``pivotgym calibrate`` to judge and play out, none filtered by
        what they do: per argument, a string in another case or padded with spaces, an integer written as a
        float, a number one higher, a flipped boolean, the argument left out; the parallel calls reversed. At
        most :data:`MAX_CALIBRATION_CANDIDATES`, in that order."""
        try:
            calls = self.parse(expert_action).calls
        except ParseError:
            return []
        variants: list[list[ToolCall]] = []
        for i, call in enumerate(calls):

            def replaced(arguments: dict[str, Any], i: int = i, name: str = call.name) -> list[ToolCall]:
                return [*calls[:i], ToolCall(name, arguments), *calls[i + 1 :]]

            for param, value in call.arguments.items():
                variants += [replaced({**call.arguments, param: other}) for other in _variants(value)]
                variants.append(replaced({k: v for k, v in call.arguments.items() if k != param}))
        if len(calls) > 1:
            variants.append(list(reversed(calls)))
        texts = dict.fromkeys(render_calls(v) for v in variants)
        texts.pop(expert_action, None)
        return list(texts)[:MAX_CALIBRATION_CANDIDATES]

    @staticmethod
    def _assistant(parsed: ParsedAction) -> Message:
        return assistant_message(parsed.content, parsed.calls or None)

    def _opening(
        self, task: Task, question: Sequence[Mapping[str, Any]], tools: list[dict[str, Any]], multi_turn: bool
    ) -> list[Message]:
        prompt = system_prompt(tools, multi_turn=multi_turn)
        extra_system = [m.get("content", "") for m in question if m.get("role") == "system"]
        if extra_system:
            prompt += "\n\n" + "\n\n".join(extra_system)
        rest = [message(m["role"], str(m.get("content", ""))) for m in question if m.get("role") != "system"]
        return [message("system", prompt), *rest]


# ====================================================================================== single turn
class SingleTurnEnv(ToolUseEnv):
    """One BFCL question answered by one reply (a parse error may be retried within ``max_turns``)."""

    max_turns = 3

    def __init__(
        self,
        category: str | Sequence[str] = "simple_python",
        ood: Mapping[str, Sequence[str]] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.categories = (category,) if isinstance(category, str) else tuple(category)
        self.ood = {k: tuple(v) for k, v in (ood or {}).items()}
        self.splits = ("train", "test", *self.ood)

    def load_tasks(self, split: str) -> list[Task]:
        if split in ("train", "test"):
            entries = [
                (cat, e)
                for cat in self.categories
                for e in bfcl.load_category(cat)
                if bfcl.in_test_split(e["id"]) == (split == "test")
            ]
        else:
            entries = [(cat, e) for cat in self.ood[split] for e in bfcl.load_category(cat)]
        return [
            Task(
                id=e["id"],
                split=split,
                data={
                    "category": cat,
                    "language": bfcl.language_of(cat),
                    "question": e["question"][0],
                    "functions": e["function"],
                    "answers": e.get("answers"),
                },
            )
            for cat, e in entries
        ]

    def _docs(self, task: Task) -> list[dict[str, Any]]:
        return list(task.data["functions"])

    def initial_messages(self, task: Task) -> list[Message]:
        return self._opening(task, task.data["question"], self.tools_for(task), multi_turn=False)

    def judge(self, parsed: ParsedAction, task: Task) -> tuple[float, dict[str, Any]]:
        """Reward of a parsed reply: BFCL's answers for call tasks, a real message for irrelevance."""
        answers = task.data.get("answers")
        if not answers:
            if parsed.calls:
                return 0.0, {"judgement": "decision_mismatch", "detail": "no tool fits; a message was expected"}
            problem = message_problem(parsed.content)
            return (
                (0.0, {"judgement": "empty_message", "detail": problem})
                if problem
                else (1.0, {"judgement": "abstained"})
            )
        if not parsed.calls:
            return 0.0, {"judgement": "decision_mismatch", "detail": "a tool call was expected"}
        result = match_answers(parsed.calls, answers, self.schemas_for(task))
        return float(result.ok), {"judgement": result.reason, "detail": result.detail}

    def _is_wrong(self, calls: list[ToolCall], expert_calls: list[ToolCall]) -> bool:
        return self.judge(ParsedAction(calls=calls), self.active_task)[0] == 0.0

    def apply_action(self, action: str) -> StepOutcome:
        parsed = self._parse_or_invalid(action)
        reward, info = self.judge(parsed, self.active_task)
        assistant = self._assistant(parsed)
        obs = [
            message("tool", json.dumps({"status": "recorded"}), tool_call_id=c["id"], name=c["function"]["name"])
            for c in assistant.get("tool_calls", [])
        ]
        return StepOutcome(obs, reward=reward, terminated=True, info=info, assistant=assistant)

    def expert_actions(self, task: Task) -> list[Message] | None:
        """BFCL's answer as a call (None for the few tasks whose own answer contradicts the schema)."""
        answers = task.data.get("answers")
        if not answers:
            return [message("assistant", ABSTAIN_TEXT)]
        schemas, language = self.schemas_for(task), self._language(task)
        calls = [expert_call(name, args, schemas.get(name), language) for name, args in answer_calls(answers)]
        if not self.judge(ParsedAction(calls=calls), task)[0]:
            return None
        return [assistant_message("", calls)]


# ====================================================================================== multi turn
class MultiTurnEnv(ToolUseEnv):
    """BFCL multi-turn with the real simulators. ``expert_steps="turn"`` puts each user turn's gold calls
    in one assistant message (executed in order); ``"call"`` gives one message per call."""

    max_turns = 60
    splits = ("train", "test", "long_context", "miss_func", "miss_param")
    _OOD = {
        "long_context": "multi_turn_long_context",
        "miss_func": "multi_turn_miss_func",
        "miss_param": "multi_turn_miss_param",
    }

    def __init__(self, expert_steps: str = "turn", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if expert_steps not in ("turn", "call"):
            raise ValueError(f"expert_steps must be 'turn' or 'call', got {expert_steps!r}")
        self.expert_steps = expert_steps

    #: the episode's simulators, made by ``initial_messages``: the policy's, and the gold calls' beside it
    backend: ToolBackend
    gold: ToolBackend

    # ------------------------------------------------------------------ tasks
    def load_tasks(self, split: str) -> list[Task]:
        if split in ("train", "test"):
            entries = [
                e for e in bfcl.load_category("multi_turn_base") if bfcl.in_test_split(e["id"]) == (split == "test")
            ]
            category = "multi_turn_base"
        else:
            category = self._OOD[split]
            entries = list(bfcl.load_category(category))
        return [
            Task(
                id=e["id"],
                split=split,
                data={
                    "category": category,
                    "turns": e["question"],
                    "initial_config": e["initial_config"],
                    "involved_classes": e["involved_classes"],
                    "gold": e.get("answers") or [],
                    "missed_function": e.get("missed_function") or {},
                    "excluded_function": e.get("excluded_function") or [],
                    "long_context": "long_context" in category,
                },
            )
            for e in entries
        ]

    def _all_docs(self, task: Task) -> list[dict[str, Any]]:
        docs = bfcl.multi_turn_docs()
        excluded = set(task.data["excluded_function"])
        return [d for cls in task.data["involved_classes"] for d in docs.get(cls, ()) if d["name"] not in excluded]

    def _docs(self, task: Task) -> list[dict[str, Any]]:
        """Every function the task can ever offer (missing ones included), for parsing and comparison."""
        return self._all_docs(task)

    def _available_docs(self) -> list[dict[str, Any]]:
        return [d for d in self._all_docs(self.active_task) if d["name"] in self.available]

    def tool_schemas(self) -> list[dict[str, Any]]:
        return [to_tool(d) for d in self._available_docs()] if self.task is not None else []

    # ------------------------------------------------------------------ episode
    def _new_backend(self, task: Task) -> ToolBackend:
        return ToolBackend(
            task.data["involved_classes"],
            task.data["initial_config"],
            task.data["long_context"],
            docs={d["name"]: d for d in self._all_docs(task)},
        )

    def initial_messages(self, task: Task) -> list[Message]:
        self.backend = self._new_backend(task)
        self.gold = self._new_backend(task)
        missed = {name for names in task.data["missed_function"].values() for name in names}
        self.available = {d["name"] for d in self._all_docs(task)} - missed
        self.user_turn = 0
        self.turn_ok: list[bool] = []
        self.turn_calls: list[str] = []  # names called in the current user turn
        self.results: list[str] = []  # every tool result of the episode (BFCL's response check uses all)
        return self._opening(task, self._user_messages(0), [to_tool(d) for d in self._available_docs()], True)

    def _user_messages(self, index: int) -> list[dict[str, Any]]:
        """The scripted messages of user turn ``index``; tools held back until now are announced."""
        msgs = [dict(m) for m in self.active_task.data["turns"][index]]
        added = self.active_task.data["missed_function"].get(str(index), [])
        if added:
            self.available |= set(added)
            note = tools_note([to_tool(d) for d in self._all_docs(self.active_task) if d["name"] in added])
            users = [m for m in msgs if m.get("role") == "user"]
            if users:
                users[0]["content"] = note + "\n\n" + str(users[0].get("content", ""))
            else:
                msgs.append({"role": "user", "content": note})
        return msgs

    def gold_calls(self, task: Task, index: int) -> list[ToolCall]:
        """The ground-truth calls of user turn ``index`` (BFCL writes them in python syntax)."""
        calls: list[ToolCall] = []
        for text in task.data["gold"][index] if index < len(task.data["gold"]) else []:
            calls.extend(self.parse(text, task).calls)
        return calls

    def execute(self, backend: ToolBackend, calls: Sequence[ToolCall]) -> list[str]:
        """Run calls in order on ``backend``; a function not offered at this point returns an error."""
        out = []
        for call in calls:
            if call.name not in self.available:
                out.append(
                    f"Error during execution: tool {call.name!r} is not available; "
                    f"available tools: {', '.join(sorted(self.available))}"
                )
            else:
                out.append(backend.call(call))
        return out

    def _is_wrong(self, calls: list[ToolCall], expert_calls: list[ToolCall]) -> bool:
        """Run both on copies of the simulators: another state or a missing expert result is wrong."""
        mine, theirs = self.backend.copy(), self.backend.copy()
        got, want = self.execute(mine, calls), self.execute(theirs, expert_calls)
        return bool(mine.state_diff(theirs)) or bool(Counter(want) - Counter(got))

    def apply_action(self, action: str) -> StepOutcome:
        parsed = self._parse_or_invalid(action)
        assistant = self._assistant(parsed)
        if parsed.calls:
            results = self.execute(self.backend, parsed.calls)
            self.results.extend(results)
            self.turn_calls.extend(c.name for c in parsed.calls)
            obs = [
                message("tool", r, tool_call_id=c["id"], name=c["function"]["name"])
                for c, r in zip(assistant["tool_calls"], results)
            ]
            return StepOutcome(obs, info={"results": results}, assistant=assistant)
        return self._end_user_turn(assistant)

    def _end_user_turn(self, assistant: Message) -> StepOutcome:
        """A plain message closes the user's turn: check it as BFCL does, then script the next turn."""
        index = self.user_turn
        gold = self.gold_calls(self.active_task, index)
        if gold:
            gold_results = self.execute(self.gold, gold)
            diff = self.backend.state_diff(self.gold)
            missing = Counter(gold_results) - Counter(self.results)
            ok = not diff and not missing
            info = {"turn_ok": ok, "state_diff": diff, "missing_results": sorted(missing)[:5]}
        else:  # nothing could be done this turn: any call was wrong
            ok = not self.turn_calls
            info = {"turn_ok": ok, "state_diff": [], "missing_results": []}
        self.turn_ok.append(ok)
        self.turn_calls = []
        self.user_turn += 1
        if self.user_turn >= len(self.active_task.data["turns"]):
            reward = float(all(self.turn_ok))
            return StepOutcome(
                [], reward=reward, terminated=True, info={**info, "turns_ok": list(self.turn_ok)}, assistant=assistant
            )
        obs = [message(m["role"], str(m.get("content", ""))) for m in self._user_messages(self.user_turn)]
        return StepOutcome(obs, info=info, assistant=assistant)

    def expert_actions(self, task: Task) -> list[Message]:
        out: list[Message] = []
        for index in range(len(task.data["turns"])):
            calls = self.gold_calls(task, index)
            if not calls:
                out.append(message("assistant", MISSING_TEXT))
                continue
            groups = [calls] if self.expert_steps == "turn" else [[c] for c in calls]
            out += [assistant_message("", group) for group in groups]
            out.append(message("assistant", DONE_TEXT))
        return out

    # ------------------------------------------------------------------ state
    _STATE = (
        "backend",
        "gold",
        "available",
        "user_turn",
        "turn_ok",
        "turn_calls",
        "results",
        "task",
        "messages",
        "turn",
        "done",
        "_actions",
    )

    def snapshot(self) -> dict[str, Any]:
        """A deep copy of the simulators and the episode bookkeeping (no replay needed)."""
        if self.task is None:
            return super().snapshot()
        return copy.deepcopy({k: getattr(self, k) for k in self._STATE})

    def restore(self, snapshot: Mapping[str, Any]) -> None:
        for key, value in copy.deepcopy(dict(snapshot)).items():
            setattr(self, key, value)
