"""Simulated users: who the agent talks to in a conversational env (a registered kind, like samplers).

A user simulator opens the conversation and answers each agent message; it ends the conversation by writing
:data:`STOP`. It plays a :class:`Scenario` (τ²-bench's shape: persona, reason for calling, known and unknown
information, task instructions). Plugins register more through ``register_user_simulators``; two are built in:

* ``scripted`` (the default, deterministic, offline): opens with the reason for calling and the known
  information; answers a request for confirmation with yes; answers the first question with the known
  information again and later ones with what it does not know; says it is done (and stops) once the env
  reports the task done; stops after ``max_turns`` replies. It cannot negotiate, change its mind, follow
  the task's conditional instructions ("if there is no clicky keyboard, take one without backlight"),
  refuse a wrong action, or say anything its scenario does not hold: an agent that needs those gets no help
  from it.
* ``llm``: any registered sampler (``openai`` against a served model, ``vllm``, ``hf``) plays the user from
  τ²-bench's kind of prompt: the scenario (persona, reason for calling, known and unknown information, task
  instructions) and the rules of the role, with the stop token.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pivotgym.errors import ConfigError
from pivotgym.sampling.base import SamplingParams
from pivotgym.types import Message

STOP = "###STOP###"

__all__ = ["STOP", "LlmUser", "Scenario", "ScriptedUser", "UserSimulator", "asks_confirmation"]


@dataclass(frozen=True)
class Scenario:
    """What a task tells its user (τ²-bench's ``user_scenario``: ``instructions`` and ``persona``)."""

    reason_for_call: str
    known_info: str = ""
    unknown_info: str = ""
    task_instructions: str = ""
    persona: str = ""

    @classmethod
    def of(cls, task: Mapping[str, Any]) -> Scenario:
        """The scenario of a task written as τ²-bench writes one (``{"user_scenario": {...}}``)."""
        scenario = task.get("user_scenario") or {}
        instructions = scenario.get("instructions") or {}
        if isinstance(instructions, str):
            return cls(reason_for_call=instructions, persona=str(scenario.get("persona") or ""))
        return cls(
            reason_for_call=str(instructions.get("reason_for_call") or ""),
            known_info=str(instructions.get("known_info") or ""),
            unknown_info=str(instructions.get("unknown_info") or ""),
            task_instructions=str(instructions.get("task_instructions") or ""),
            persona=str(scenario.get("persona") or ""),
        )


class UserSimulator(Protocol):
    """The user of a conversational env."""

    name: str

    def opening(self, scenario: Scenario) -> str:
        """The user's first message."""
        ...

    def reply(self, scenario: Scenario, conversation: Sequence[Message], done: bool) -> str:
        """The answer to the last agent message of ``conversation`` (roles as the agent sees them); ``done``
        says whether the env finds the task complete. Contains :data:`STOP` to end the conversation."""
        ...


_CONFIRM = re.compile(r"\b(confirm|proceed|go ahead|shall i|should i|yes/no|\(yes\)|would you like me to)\b", re.I)


def asks_confirmation(text: str) -> bool:
    """Whether an agent message asks the user to confirm an action (what the scripted user answers yes to)."""
    return bool(_CONFIRM.search(text))


class ScriptedUser:
    """The deterministic user (see the module docstring for what it can and cannot do)."""

    name = "scripted"

    def __init__(self, max_turns: int = 10) -> None:
        self.max_turns = max_turns

    def opening(self, scenario: Scenario) -> str:
        return " ".join(p for p in (scenario.reason_for_call, scenario.known_info) if p).strip() or "Hello."

    def reply(self, scenario: Scenario, conversation: Sequence[Message], done: bool) -> str:
        replies = sum(m.get("role") == "user" for m in conversation)
        said = str(conversation[-1].get("content") or "") if conversation else ""
        if done:
            return f"Thank you, that is all I needed. {STOP}"
        if replies > self.max_turns:
            return f"I have to go now. {STOP}"
        if asks_confirmation(said):
            return "Yes, please proceed."
        if "?" in said:
            repeated = any(m.get("role") == "user" and m.get("content") == scenario.known_info for m in conversation)
            if scenario.known_info and not repeated:
                return scenario.known_info
            return f"{scenario.unknown_info} That is all I know.".strip() if scenario.unknown_info else "I do not know."
        return f"Could you please help me with my request? {scenario.reason_for_call}".strip()


USER_PROMPT = """You are playing a customer who contacts a customer service agent. Stay in this role.

Your scenario:
{scenario}

Rules:
- Write one short message at a time, as the customer would, in plain text.
- Give only the information the scenario holds, and only when it is asked for or needed; do not invent any.
- If the agent asks for something you do not know, say that you do not know it.
- When your request is fully handled, or the agent cannot handle it, write {stop} alone to end the conversation.
"""


class LlmUser:
    """A user played by a registered sampler (see the module docstring)."""

    name = "llm"

    def __init__(
        self,
        sampler: str = "hf",
        model: str = "smollm2-135m",
        max_new_tokens: int = 128,
        temperature: float = 0.0,
        **sampler_options: Any,
    ) -> None:
        from pivotgym.registry import make_sampler

        self.sampler = make_sampler(sampler, model, sampler_options)
        self.params = SamplingParams(temperature=temperature, max_new_tokens=max_new_tokens)

    def _system(self, scenario: Scenario) -> Message:
        lines = [
            f"{label}: {value}"
            for label, value in (
                ("Persona", scenario.persona),
                ("Reason for calling", scenario.reason_for_call),
                ("What you know", scenario.known_info),
                ("What you do not know", scenario.unknown_info),
                ("How to behave", scenario.task_instructions),
            )
            if value
        ]
        return {"role": "system", "content": USER_PROMPT.format(scenario="\n".join(lines), stop=STOP)}

    def _say(self, messages: list[Message]) -> str:
        text = self.sampler.sample([messages], n=1, params=self.params)[0][0].text.strip()
        if not text:
            raise ConfigError(
                "the user simulator returned an empty message",
                hint="check the user model (a larger one, or a higher max_new_tokens)",
            )
        return text

    def opening(self, scenario: Scenario) -> str:
        return self._say(
            [self._system(scenario), {"role": "user", "content": "(The agent greets you.) Hello, how can I help you?"}]
        )

    def reply(self, scenario: Scenario, conversation: Sequence[Message], done: bool) -> str:
        # the roles flip: the agent's messages are what the user reads, the user's own are its replies
        flipped: list[Message] = [self._system(scenario)]
        for m in conversation:
            if m.get("role") == "assistant" and m.get("content"):
                flipped.append({"role": "user", "content": str(m["content"])})
            elif m.get("role") == "user":
                flipped.append({"role": "assistant", "content": str(m.get("content") or "")})
        return self._say(flipped)
