"""A verifier that misbehaves on purpose: turn 0 hangs, turn 1 kills its process, later turns behave."""

import os
import time

import pivotgym


class FlakyVerifier:
    name = "flaky/value"
    version = "1"

    def verify(self, context, candidate):
        if context.turn.turn == 0:
            time.sleep(3600)
        if context.turn.turn == 1:
            os._exit(7)
        from pivotgym_arith.env import ValueVerifier

        return ValueVerifier().verify(context, candidate)


@pivotgym.hookimpl
def register_environments(register):
    register("flaky/chain-v0", "pivotgym_arith.env:ArithChainEnv", verifier="flaky/value")


@pivotgym.hookimpl
def register_verifiers(register):
    register("flaky/value", "pivotgym_flaky:FlakyVerifier")
