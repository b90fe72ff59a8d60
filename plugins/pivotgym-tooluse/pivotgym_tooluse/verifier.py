"""Verifiers for the tool-use envs: a layered functional verifier and a strict exact-match ablation.

:class:`ToolCallVerifier` layers, cheapest first, stopping at the first that decides:

1. **parse** - the candidate must be readable (tool calls in any supported format, or a plain message);
2. **decision** - calling a tool vs answering with a message must agree with the expert;
3. **names** and **arguments** - single-turn: against BFCL's acceptable answers (types coerced, strings
   normalised, omitted/explicit defaults, parallel calls order-free); multi-turn: against the expert's calls
   (order-sensitive, exact strings, since they will be executed);
4. **execution** (multi-turn, when the structure differs) - candidate and expert calls run on two copies of
   the simulators positioned at this turn; credited when the states match and every result of the expert's
   calls is among the candidate's results (so a different but state-equivalent sequence counts, a wrong
   value, wrong function or an extra side effect does not).

Every verdict carries a reason tag (``parse_error``, ``decision_mismatch``, ``call_count``,
``function_name``, ``argument_value``, ``missing_argument``, ``unexpected_argument``, ``state_mismatch``,
``result_mismatch``, ``equivalent:...``) and per-layer ``components``.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from pivotgym.types import Verdict, canonical_json, tool_calls_of
from pivotgym.verify import VerifyContext, calls_equivalent, normalize_whitespace

from pivotgym_tooluse.matching import match_answers
from pivotgym_tooluse.parsing import ParseError, message_problem


def _fail(tag: str, detail: str = "", **components: Any) -> Verdict:
    return Verdict.fail(f"{tag}: {detail}" if detail else tag, **components)


class ToolCallVerifier:
    """The functional verifier of every ``tooluse/*`` env (see the module docstring for the layers).

    ``execute``: ``"fallback"`` (default) runs the execution layer only when the structure differs;
    ``"always"`` runs it even for structurally equal calls; ``"never"`` stops at the structural layer.
    """

    name = "tooluse/functional"
    version = "1"

    def __init__(self, execute: str = "fallback") -> None:
        if execute not in ("fallback", "always", "never"):
            raise ValueError(f"execute must be 'fallback', 'always' or 'never', got {execute!r}")
        self.execute = execute

    def verify(self, context: VerifyContext, candidate: str) -> Verdict:
        env = context.fresh_env()
        task = env.get_task(context.turn.task_id)
        try:
            parsed = env.parse(candidate if isinstance(candidate, str) else "", task)
        except ParseError as exc:
            return _fail("parse_error", str(exc), parse=False)
        components: dict[str, Any] = {"parse": parsed.format}
        expert_calls = tool_calls_of(context.turn.expert)

        # decision: call vs message
        if bool(parsed.calls) != bool(expert_calls):
            want = "a tool call" if expert_calls else "a plain message"
            return _fail("decision_mismatch", f"expected {want}", **components, decision=False)
        components["decision"] = True
        if not expert_calls:
            problem = message_problem(parsed.content)
            if problem:
                return _fail("empty_message", problem, **components)
            return Verdict.ok("equivalent:message", **components)

        # single turn: BFCL's acceptable answers
        answers = task.data.get("answers")
        if answers:
            result = match_answers(parsed.calls, answers, env.schemas_for(task))
            components.update(structural=result.ok, names=result.reason not in ("call_count", "function_name"))
            if result.ok:
                return Verdict.ok("equivalent:structural", **components)
            return _fail(result.reason, result.detail, **components)

        # multi turn: structure against the expert's calls, then execution from the exact state
        structural = calls_equivalent(parsed.calls, expert_calls, schemas=env.schemas_for(task),
                                      order_free=False, loose_strings=False)
        components["structural"] = structural.ok
        if structural.ok and self.execute != "always":
            return Verdict.ok("equivalent:structural", **components)
        if self.execute == "never":
            return _fail(structural.reason, "; ".join(structural.details), **components)
        return self._execution(context, parsed.calls, expert_calls, components)

    @staticmethod
    def _execution(context: VerifyContext, calls: list, expert_calls: list, components: dict[str, Any]) -> Verdict:
        env = context.env()
        if getattr(env, "backend", None) is None:
            return _fail("no_executor", "this env has no executable tools", **components)
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
        return Verdict.ok("equivalent:execution", **components)


class ToolCallExactVerifier:
    """The ablation: credit only the expert's calls exactly (same order, names and argument values, no
    coercion or normalisation), whatever the syntax; a message must equal the expert's text."""

    name = "tooluse/exact"
    version = "1"

    def verify(self, context: VerifyContext, candidate: str) -> Verdict:
        env = context.fresh_env()
        task = env.get_task(context.turn.task_id)
        try:
            parsed = env.parse(candidate if isinstance(candidate, str) else "", task)
        except ParseError as exc:
            return _fail("parse_error", str(exc))
        expert_calls = tool_calls_of(context.turn.expert)
        if not expert_calls:
            same = not parsed.calls and normalize_whitespace(parsed.content) == \
                normalize_whitespace(context.turn.expert.get("content") or "")
            return Verdict.ok("exact_match") if same else _fail("text_differs")
        key = [(c.name, canonical_json(c.arguments)) for c in parsed.calls]
        want = [(c.name, canonical_json(c.arguments)) for c in expert_calls]
        return Verdict.ok("exact_match") if key == want else _fail("calls_differ")
