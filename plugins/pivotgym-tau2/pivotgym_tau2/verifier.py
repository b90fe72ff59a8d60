"""``tau2/functional``: credits an action at turn k that does what the expert's action did there.

Calls against a message first: a message where the expert calls a tool fails, and the reverse. A call passes
when its arguments are equivalent to the expert's under the tool's schema, or when, executed from the turn-k
state in a session of its own, it returns the same results and leaves the same database as the expert's call
(so reordered arguments, an equivalent ``calculate`` expression or another spelling of the same value pass;
another reservation, an extra write or a missing one fail). A message passes when it does for the user what
the expert's message did: it asks for confirmation where the expert's did (the policy requires one before
every write), and it carries every ``communicate_info`` item the expert's message carries.

``later_reads`` (default off): a call that reads (leaves the database as it was) and that the expert makes
later in the task's gold calls is credited too, as a step taken early rather than a wrong one. Off by default
because the turn's own purpose is what the verifier certifies: a policy that learns to read ahead is not
doing what the expert did at that turn, and the episode reward does not need it (reads never change the DB).
"""

from __future__ import annotations

from pivotgym import McpEnv, McpResultVerifier, Verdict, VerifyContext
from pivotgym.parsing import message_problem
from pivotgym.users import asks_confirmation
from pivotgym.verify import calls_equivalent
from pivotgym_tau2.env import Tau2Env, communicated, gold_calls

__all__ = ["Tau2Verifier"]


class Tau2Verifier(McpResultVerifier):
    name = "tau2/functional"
    version = "1"

    def __init__(self, later_reads: bool = False) -> None:
        self.later_reads = later_reads

    def verify(self, context: VerifyContext, candidate: str) -> Verdict:
        verdict = super().verify(context, candidate)
        if not self.later_reads or verdict.undecided is not None or verdict.reward == 1.0:
            return verdict
        if not verdict.reason.startswith(("different_effect", "decision_mismatch")):
            return verdict
        env = context.env()
        if not isinstance(env, Tau2Env):
            return verdict
        calls, _ = env.parse(candidate)
        if len(calls) != 1:
            return verdict
        done = sum(len(m.get("tool_calls") or []) for m in context.prefix if m.get("role") == "assistant")
        schemas = {t.name: t.input_schema for t in env.tools().values()}
        later = gold_calls(env.active_task)[done + 1 :]
        if not any(calls_equivalent(calls, [gold], schemas=schemas).ok for gold in later):
            return verdict
        before = env.state_digest()
        env.step(candidate)
        if env.state_digest() != before:
            return verdict
        return Verdict.ok("later_read: a read the expert makes later in the task")

    def _message(self, env: McpEnv, text: str, expert_text: str) -> Verdict:
        if not isinstance(env, Tau2Env):
            return Verdict.fail("not_a_tau2_env")
        problem = message_problem(text)
        if problem:
            return Verdict.fail(f"empty_message: {problem}")
        if asks_confirmation(expert_text) and not asks_confirmation(text):
            return Verdict.fail("no_confirmation: the expert asks the user to confirm before a write")
        criteria = env.active_task.data["task"].get("evaluation_criteria") or {}
        due = [str(i) for i in criteria.get("communicate_info") or [] if communicated(str(i), [expert_text])]
        missing = [i for i in due if not communicated(i, [text])]
        if missing:
            return Verdict.fail(f"missing_information: {missing}")
        return Verdict.ok("equivalent:message")
