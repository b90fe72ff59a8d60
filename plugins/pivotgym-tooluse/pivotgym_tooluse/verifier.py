"""Verifiers for the tool-use envs: a layered functional verifier and a strict exact-match ablation.

:class:`ToolCallVerifier` layers, cheapest first, stopping at the first that decides:

1. **parse** - the candidate must be readable (tool calls in any supported format, or a plain message);
2. **decision** - calling a tool vs answering with a message must agree with the expert;
3. **structure** - names and arguments, by the first of these that applies:

   * the turn is one of a single-turn env's BFCL tasks: against BFCL's acceptable answers
     (:func:`~pivotgym_tooluse.matching.match_answers`);
   * otherwise, from the **expert's calls alone** and the offered functions' schemas
     (:func:`pivotgym.verify.calls_equivalent`): argument order free, parallel calls order-free (in order
     and with exact strings where calls are executed one after another, i.e. in the multi-turn env, since
     ``" temp "`` is another folder name there), case folded for free-text strings only, an int for a number,
     ``2.0`` for an integer, a left-out parameter equal to its default (the schema's or the description's), a
     default passed explicitly (``null`` included); wrong types (``"70"`` for an integer, ``"true"`` for a
     boolean), wrong values, missing required arguments and extra calls fail, and free text that still
     differs is ``text_not_decidable`` (a synonym cannot be told from another value);
4. **execution** (multi-turn turns of the env's own tasks, when the structure differs) - candidate and
   expert calls run on two copies of the simulators positioned at this turn; credited when the states match
   and every result of the expert's calls is among the candidate's results.

The functions come from :attr:`VerifyContext.tools` when the turn carries them (an imported row, a user's
own turn built with :meth:`VerifyContext.from_turn`), else from the env's task. Every verdict's reason
starts with a :data:`ToolUseReason` code (``"argument_value: f.x: got 2, expected 3"``), also stored as
``components["code"]``; the README lists what each means.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, Literal, cast, get_args

from pivotgym.types import Task, ToolCall, Verdict, canonical_json, tool_calls_of
from pivotgym.verify import VerifyContext, calls_equivalent, normalize_whitespace
from pivotgym_tooluse.env import MultiTurnEnv
from pivotgym_tooluse.matching import match_answers
from pivotgym_tooluse.parsing import ParsedAction, ParseError, message_problem, parse_action
from pivotgym_tooluse.schemas import to_tool

#: Every reason code a tool-use verdict can carry (the part of ``Verdict.reason`` before ``": "``).
ToolUseReason = Literal[
    "equivalent:structural",  # same calls up to the equivalences listed in the module docstring
    "equivalent:execution",  # different calls, same simulator state and results from the exact state
    "equivalent:message",  # a real plain message where the expert answered with one
    "exact_match",  # tooluse/exact: the expert's calls verbatim
    "parse_error",  # the reply tries to call a tool but cannot be read (or is hostile input)
    "decision_mismatch",  # a call where a message was expected, or the reverse
    "empty_message",  # a "message" with no words (padding, control characters, empty)
    "call_count",  # more or fewer calls than the expert made
    "function_name",  # a function the expert did not call
    "missing_argument",  # a required argument, or one the expert set to a non-default value, left out
    "unexpected_argument",  # an argument the function does not have, or one the expert left unset set to a non-default
    "wrong_type",  # a value of the wrong JSON type ("70" for an integer, "true" for a boolean)
    "argument_value",  # the right type, a different value
    "text_not_decidable",  # expert calls alone: free text still differs (a synonym or another value, unknowable)
    "state_mismatch",  # execution: the simulators end in a different state
    "result_mismatch",  # execution: an expert call's result is not among the candidate's results
    "calls_differ",  # tooluse/exact: the calls are not the expert's verbatim
    "text_differs",  # tooluse/exact: the message is not the expert's
    "bad_expert",  # the expert action itself cannot be read (a broken imported row)
]
REASON_CODES: frozenset[str] = frozenset(get_args(ToolUseReason))


def reason_code(verdict: Verdict) -> ToolUseReason:
    """The :data:`ToolUseReason` of a tool-use verdict."""
    return verdict.components.get("code") or verdict.reason.split(": ", 1)[0]  # type: ignore[return-value]


def _fail(code: ToolUseReason, detail: str = "", **components: Any) -> Verdict:
    return Verdict.fail(f"{code}: {detail}" if detail else code, **components, code=code)


def _ok(code: ToolUseReason, **components: Any) -> Verdict:
    return Verdict.ok(code, **components, code=code)


def schemas_from_tools(tools: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """``{name: JSON-schema parameters}`` from offered functions in any common form: OpenAI chat tools,
    flat Responses tools, or BFCL function docs (BFCL types such as ``dict``/``float`` are mapped)."""
    out: dict[str, dict[str, Any]] = {}
    for tool in tools or []:
        if not isinstance(tool, Mapping):
            continue
        inner = tool.get("function")
        fn: Mapping[str, Any] = inner if isinstance(inner, Mapping) else tool
        if isinstance(fn.get("name"), str):
            out[fn["name"]] = to_tool(fn)["function"]["parameters"]
    return out


class _Turn:
    """What the layers need from a context, resolved once: the env, the task (None for a turn from
    elsewhere), the functions' schemas and the expert's calls."""

    def __init__(self, context: VerifyContext) -> None:
        self.env = context.fresh_env()
        self.task: Task | None = context.known_task()
        self.schemas: dict[str, dict[str, Any]] = context.memo("tooluse.schemas", self._schemas(context))
        self.sequential = hasattr(self.env, "execute")  # calls run one after another (multi-turn)

    def _schemas(self, context: VerifyContext) -> Any:
        def make() -> dict[str, dict[str, Any]]:
            if context.tools is not None:
                return schemas_from_tools(context.tools)
            if self.task is not None and hasattr(self.env, "schemas_for"):
                return self.env.schemas_for(self.task)
            return {}

        return make

    def parse(self, text: Any) -> ParsedAction:
        text = text if isinstance(text, str) else ""
        if self.task is not None and hasattr(self.env, "parse"):
            return self.env.parse(text, self.task)
        order = {name: list((schema.get("properties") or {}).keys()) for name, schema in self.schemas.items()}
        return parse_action(text, positional=order.get)


def expert_calls_of(context: VerifyContext) -> list[ToolCall]:
    """The expert's tool calls; raises ParseError when the expert message's calls cannot be read."""

    def read() -> list[ToolCall] | ParseError:
        try:
            return tool_calls_of(context.turn.expert)
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
            return ParseError(f"the expert's tool calls cannot be read ({str(exc)[:160]})")

    calls = context.memo("tooluse.expert_calls", read)
    if isinstance(calls, ParseError):
        raise calls
    return list(calls)


class ToolCallVerifier:
    """The functional verifier of every ``tooluse/*`` env (see the module docstring for the layers).

    ``execute``: ``"fallback"`` (default) runs the execution layer only when the structure differs;
    ``"always"`` runs it even for structurally equal calls; ``"never"`` stops at the structural layer.
    """

    name = "tooluse/functional"
    version = "3"

    def __init__(self, execute: str = "fallback") -> None:
        if execute not in ("fallback", "always", "never"):
            raise ValueError(f"execute must be 'fallback', 'always' or 'never', got {execute!r}")
        self.execute = execute

    def verify(self, context: VerifyContext, candidate: str) -> Verdict:
        turn = _Turn(context)
        try:
            expert_calls = expert_calls_of(context)
        except ParseError as exc:
            return _fail("bad_expert", str(exc))
        try:
            parsed = turn.parse(candidate)
        except ParseError as exc:
            return _fail("parse_error", str(exc), parse=False)
        components: dict[str, Any] = {"parse": parsed.format}

        # decision: call vs message
        if bool(parsed.calls) != bool(expert_calls):
            want = "a tool call" if expert_calls else "a plain message"
            return _fail("decision_mismatch", f"expected {want}", **components, decision=False)
        components["decision"] = True
        if not expert_calls:
            problem = message_problem(parsed.content)
            if problem:
                return _fail("empty_message", problem, **components)
            return _ok("equivalent:message", **components)

        # single turn of a BFCL task: BFCL's acceptable answers
        answers = turn.task.data.get("answers") if turn.task is not None else None
        if answers:
            result = match_answers(parsed.calls, answers, turn.schemas)
            components.update(
                structural=result.ok, names=result.reason not in ("call_count", "function_name"), layer="answers"
            )
            if result.ok:
                return _ok("equivalent:structural", **components)
            return _fail(result.reason, result.detail, **components)  # type: ignore[arg-type]

        # from the expert's calls: order-free for parallel calls, in order where calls are executed in turn
        structural = calls_equivalent(
            parsed.calls,
            expert_calls,
            schemas=turn.schemas,
            order_free=not turn.sequential,
            loose_strings=not turn.sequential,
        )
        components.update(
            structural=structural.ok,
            layer="expert_calls",
            names=structural.reason not in ("call_count", "function_name"),
        )
        can_execute = turn.sequential and turn.task is not None
        if structural.ok and not (self.execute == "always" and can_execute):
            return _ok("equivalent:structural", **components)
        if self.execute == "never" or not can_execute:
            # a failed comparison's reason is one of the core's failure codes, all of them tool-use reasons
            return _fail(cast(ToolUseReason, structural.reason), "; ".join(structural.details), **components)
        return self._execution(context, parsed.calls, expert_calls, components)

    @staticmethod
    def _execution(context: VerifyContext, calls: list, expert_calls: list, components: dict[str, Any]) -> Verdict:
        env = context.env()
        if not isinstance(env, MultiTurnEnv):
            return Verdict.undecided_because(f"not_executable: {type(env).__name__} has no tool simulators to run on")
        mine, theirs = env.backend.copy(), env.backend.copy()
        got = env.execute(mine, calls)
        want = env.execute(theirs, expert_calls)
        diff = mine.state_diff(theirs)
        missing = Counter(want) - Counter(got)
        components.update(execution=not diff and not missing, state_diff=diff[:10])
        if diff:
            return _fail("state_mismatch", f"state differs in {', '.join(diff[:5])}", **components)
        if missing:
            return _fail("result_mismatch", f"missing results: {list(missing)[:3]!r}"[:300], **components)
        return _ok("equivalent:execution", **components)


class ToolCallExactVerifier:
    """The ablation: credit only the expert's calls exactly (same order, names and argument values, no
    coercion or normalisation), whatever the syntax; a message must equal the expert's text."""

    name = "tooluse/exact"
    version = "2"

    def verify(self, context: VerifyContext, candidate: str) -> Verdict:
        turn = _Turn(context)
        try:
            expert_calls = expert_calls_of(context)
        except ParseError as exc:
            return _fail("bad_expert", str(exc))
        try:
            parsed = turn.parse(candidate)
        except ParseError as exc:
            return _fail("parse_error", str(exc))
        if not expert_calls:
            same = not parsed.calls and normalize_whitespace(parsed.content) == normalize_whitespace(
                context.turn.expert.get("content") or ""
            )
            return _ok("exact_match") if same else _fail("text_differs")
        key = [(c.name, canonical_json(c.arguments)) for c in parsed.calls]
        want = [(c.name, canonical_json(c.arguments)) for c in expert_calls]
        return _ok("exact_match") if key == want else _fail("calls_differ")
