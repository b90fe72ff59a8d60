"""``tau2/functional``: credits an action at turn k that does what the expert's action did there.

Calls against a message first: a message where the expert calls a tool fails, and the reverse. A call passes
when its arguments are equivalent to the expert's under the tool's schema, or when, executed from the turn-k
state in a session of its own, it returns the same results and leaves the same database as the expert's call
(so reordered arguments, an equivalent ``calculate`` expression or another spelling of the same value pass;
another reservation, an extra write or a missing one fail). A message passes when it does for the user what
the expert's message did: it asks for confirmation where the expert's did (the policy requires one before
every write), and it carries every ``communicate_info`` item the expert's message carries.
"""

from __future__ import annotations

from pivotgym import McpEnv, McpResultVerifier, Verdict
from pivotgym.parsing import message_problem
from pivotgym.users import asks_confirmation
from pivotgym_tau2.env import Tau2Env, communicated

__all__ = ["Tau2Verifier"]


class Tau2Verifier(McpResultVerifier):
    name = "tau2/functional"
    version = "1"

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
