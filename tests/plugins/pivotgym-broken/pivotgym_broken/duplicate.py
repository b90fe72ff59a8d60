"""A plugin that registers an env id another plugin already owns."""

import pivotgym


@pivotgym.hookimpl
def register_environments(register):
    register("arith/chain-v0", "pivotgym_arith.env:ArithChainEnv")
