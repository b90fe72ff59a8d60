"""Ad-hoc turns (judged without a task of the env): what a verifier gets, and the error it gets when it asks
for env state that does not exist."""

import pytest
from core_helpers import CounterEnv

from pivotgym.errors import AdhocTurn, TaskNotFound
from pivotgym.types import Verdict
from pivotgym.verify import VerifyContext, verify_safely

MESSAGES = [{"role": "user", "content": "Reach 3 with `add K`, K in 1..3."}]
TOOLS = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]


class _StepsTheEnv:
    """Follows docs/plugins.md's execution pattern without checking ``known_task()`` first."""

    name, version = "counter/steps", "1"

    def verify(self, context, candidate):
        env = context.env()
        env.step(candidate)
        return Verdict.ok() if env.value == 3 else Verdict.fail("different_effect")


def _context(**kwargs):
    return VerifyContext.from_turn("counter-v0", MESSAGES, "add 3", tools=TOOLS, env_factory=CounterEnv, **kwargs)


def test_an_adhoc_turn_gives_the_verifier_its_messages_expert_and_tools():
    context = _context()
    assert context.adhoc and context.known_task() is None
    assert context.prefix == MESSAGES and context.expert == {"role": "assistant", "content": "add 3"}
    assert context.tools == TOOLS and context.expert_text == "add 3"  # rendering needs no task


def test_env_and_task_of_an_adhoc_turn_raise_a_message_for_the_plugin_author():
    context = _context()
    for ask in (context.env, lambda: context.task):
        with pytest.raises(AdhocTurn, match=r"counter-v0: context\.(env\(\)|task) needs one of the env's tasks"):
            ask()
    with pytest.raises(TaskNotFound):  # callers catching the old error still do
        context.env()
    verdict = verify_safely(_StepsTheEnv(), context, "add 3")
    assert not verdict.decided and "AdhocTurn" in verdict.reason and "ad-hoc" in verdict.reason
    assert "check context.known_task()" in verdict.reason and "'counter/steps'" in verdict.reason


def test_a_turn_with_its_task_id_is_positioned_as_before():
    context = _context(task_id="train-0")
    assert not context.adhoc and context.known_task().id == "train-0" and context.task.id == "train-0"
    assert verify_safely(_StepsTheEnv(), context, "add 3") == Verdict.ok()
    assert verify_safely(_StepsTheEnv(), context, "add 2").reason == "different_effect"
    unknown = _context(task_id="nope")
    assert unknown.known_task() is None and not unknown.adhoc
    with pytest.raises(TaskNotFound, match="nope") as info:
        unknown.env()
    assert not isinstance(info.value, AdhocTurn)
