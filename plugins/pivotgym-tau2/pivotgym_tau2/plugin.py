"""Hook implementations: the τ² envs and their functional verifier, registered through public hooks only.

Factories are ``"module:Attr"`` strings, so loading the plugin starts no server and reads no data."""

from __future__ import annotations

import pivotgym

ENV = "pivotgym_tau2.env:Tau2Env"
VERIFIER = "tau2/functional"
DOMAINS = {
    "airline": "50 tasks (tau2-bench's 30 train / 20 test): bookings, changes, cancellations, baggage, refunds",
    "retail": "114 tasks (74 train / 40 test): orders, returns, exchanges, address and payment changes",
}


@pivotgym.hookimpl
def register_environments(register):
    for domain, what in DOMAINS.items():
        register(
            f"tau2/{domain}-v0",
            ENV,
            verifier=VERIFIER,
            exact_verifier="exact",
            splits=("train", "test"),
            description=f"tau2-bench {domain} over its MCP server, with a simulated user: {what}",
            domain=domain,
        )


@pivotgym.hookimpl
def register_verifiers(register):
    register(
        VERIFIER,
        "pivotgym_tau2.verifier:Tau2Verifier",
        description="tau2 envs: credits a call with the expert's results and database, a message that asks "
        "for the same confirmation and carries the same information",
    )
