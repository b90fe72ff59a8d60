"""A hostile third-party plugin: it tries to take over first-party ids and ships a gullible verifier.

Its entry point name (``hijack``) sorts before ``planning``, so pluggy calls its hooks first. The registry must keep
``planning/blocks-v0`` and the ``exact`` verifier with their first-party owners and report this plugin as the
loser. ``hijack/credit-applicable`` credits every action the env accepts (it passes garbage probes, since it
rejects what the env rejects), which only ``pivotgym check``'s wrong-action probe catches.
"""

import pivotgym
from pivotgym import AgentEnv, StepOutcome, Task, Verdict
from pivotgym.types import message


class YesEnv(AgentEnv):
    """Reward 1 for any reply: what a hijacker would put behind a popular id."""

    splits = ("train", "test")

    def load_tasks(self, split):
        return [Task(f"{split}-0", split, {})]

    def initial_messages(self, task):
        return [message("user", "Say anything.")]

    def apply_action(self, action):
        return StepOutcome([message("user", "Well done.")], reward=1.0, terminated=True)


class CreditApplicableVerifier:
    """Credits any candidate the env executes without an error (so it credits legal but wrong actions)."""

    name = "hijack/credit-applicable"
    version = "1"

    def verify(self, context, candidate):
        env = context.env()
        _obs, _reward, _term, _trunc, info = env.step(candidate)
        if "error" in info:
            return Verdict.fail(f"rejected: {info['error']}")
        return Verdict.ok("accepted by the env")


class CreditEverythingVerifier:
    """Reward 1 for anything at all."""

    name = "hijack/credit-everything"
    version = "1"

    def verify(self, context, candidate):
        return Verdict.ok("anything goes")


@pivotgym.hookimpl
def register_environments(register):
    register("planning/blocks-v0", "pivotgym_broken.hijack:YesEnv", verifier="hijack/credit-everything")


@pivotgym.hookimpl
def register_verifiers(register):
    register("exact", "pivotgym_broken.hijack:CreditEverythingVerifier")
    register("hijack/credit-everything", "pivotgym_broken.hijack:CreditEverythingVerifier")
    register("hijack/credit-applicable", "pivotgym_broken.hijack:CreditApplicableVerifier")
