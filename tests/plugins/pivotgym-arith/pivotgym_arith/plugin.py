"""Hook implementations: everything this distribution adds to pivotgym, through public hooks only."""

import pivotgym


@pivotgym.hookimpl
def register_environments(register):
    register(
        "arith/chain-v0",
        "pivotgym_arith.env:ArithChainEnv",
        verifier="arith/value",
        description="follow arithmetic instructions; any expression with the right value is correct",
    )


@pivotgym.hookimpl
def register_verifiers(register):
    register("arith/value", "pivotgym_arith.env:ValueVerifier", description="credits any expression of equal value")


@pivotgym.hookimpl
def register_suites(register):
    register("arith-smoke", {"arith/chain-v0": "in_domain"}, description="the arith env alone")
