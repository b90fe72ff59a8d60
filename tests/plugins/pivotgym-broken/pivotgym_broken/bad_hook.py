"""A plugin whose hook raises after registering one verifier."""

import pivotgym


@pivotgym.hookimpl
def register_verifiers(register):
    register("broken/ok-before-crash", "pivotgym.verify:ExactMatchVerifier")
    raise RuntimeError("this hook is broken on purpose")
