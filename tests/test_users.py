"""Simulated users: a registered kind; the scripted one is deterministic, the LLM one speaks through a sampler."""

from __future__ import annotations

import pytest

import pivotgym
from pivotgym.errors import RegistryError
from pivotgym.users import STOP, LlmUser, Scenario, ScriptedUser

SCENARIO = Scenario(
    reason_for_call="You want to cancel order #W1.",
    known_info="You are Ann Lee, zip 10001.",
    unknown_info="You do not know your email.",
)


def test_both_are_registered_and_an_unknown_name_says_where_to_look():
    assert isinstance(pivotgym.make_user_simulator("scripted", max_turns=2), ScriptedUser)
    with pytest.raises(RegistryError, match=r"unknown user simulator 'scriptd'.*scripted.*pivotgym user-simulators"):
        pivotgym.make_user_simulator("scriptd")


def test_the_scripted_user_is_deterministic():
    user = ScriptedUser(max_turns=2)
    opening = user.opening(SCENARIO)
    assert opening == "You want to cancel order #W1. You are Ann Lee, zip 10001."
    said = [{"role": "user", "content": opening}, {"role": "assistant", "content": "Shall I cancel it?"}]
    assert user.reply(SCENARIO, said, done=False) == "Yes, please proceed."
    assert STOP in user.reply(SCENARIO, said, done=True)


@pytest.mark.slow  # loads SmolLM2
def test_the_llm_user_speaks_through_a_registered_sampler():
    user = pivotgym.make_user_simulator("llm", sampler="hf", model="smollm2-135m", max_new_tokens=24)
    assert isinstance(user, LlmUser)
    opening = user.opening(SCENARIO)
    assert opening.strip()
    reply = user.reply(
        SCENARIO, [{"role": "user", "content": opening}, {"role": "assistant", "content": "Your zip?"}], done=False
    )
    assert reply.strip() and reply != opening
