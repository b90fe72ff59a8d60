"""Hook implementations: the tool-use envs, verifiers and suite, registered through public hooks only.

Factories are ``"module:Attr"`` strings so that loading the plugin imports nothing heavy.
"""

from __future__ import annotations

import pivotgym

ENV = "pivotgym_tooluse.env:SingleTurnEnv"
FUNCTIONAL, EXACT = "tooluse/functional", "tooluse/exact"

#: env id -> (BFCL category or categories for train/test, {OOD split: categories}, description)
SINGLE_TURN = {
    "tooluse/bfcl-simple-v0": (
        "simple_python",
        {"java": ["simple_java"], "javascript": ["simple_javascript"], "live": ["live_simple"]},
        "one call to the one given function",
    ),
    "tooluse/bfcl-multiple-v0": ("multiple", {"live": ["live_multiple"]}, "pick the right one of several functions"),
    "tooluse/bfcl-parallel-v0": ("parallel", {"live": ["live_parallel"]}, "several calls of one function at once"),
    "tooluse/bfcl-parallel-multiple-v0": (
        "parallel_multiple",
        {"live": ["live_parallel_multiple"]},
        "several calls of several functions at once",
    ),
    "tooluse/bfcl-live-v0": (
        ["live_simple", "live_multiple", "live_parallel", "live_parallel_multiple"],
        {"java": ["simple_java"], "javascript": ["simple_javascript"]},
        "user-contributed (live) functions and questions",
    ),
    "tooluse/bfcl-irrelevance-v0": (
        "irrelevance",
        {"live": ["live_irrelevance"]},
        "no function fits: a plain message (abstaining) is correct",
    ),
}


@pivotgym.hookimpl
def register_environments(register):
    for env_id, (category, ood, description) in SINGLE_TURN.items():
        register(
            env_id,
            ENV,
            verifier=FUNCTIONAL,
            exact_verifier=EXACT,
            splits=("train", "test", *ood),
            description=f"BFCL {category if isinstance(category, str) else '+'.join(category)}: {description}",
            category=category,
            ood=ood,
        )
    register(
        "tooluse/bfcl-multi-turn-v0",
        "pivotgym_tooluse.env:MultiTurnEnv",
        verifier=FUNCTIONAL,
        exact_verifier=EXACT,
        description="BFCL multi-turn with executable simulators (file system, "
        "trading, travel, vehicle, messaging...); long_context/miss_func/miss_param as OOD splits",
    )


@pivotgym.hookimpl
def register_verifiers(register):
    register(
        FUNCTIONAL,
        "pivotgym_tooluse.verifier:ToolCallVerifier",
        description="parse, call-vs-message, names, structural arguments vs BFCL answers, execution equivalence",
    )
    register(
        EXACT,
        "pivotgym_tooluse.verifier:ToolCallExactVerifier",
        description="the expert's calls exactly (order, names, raw values); the ablation baseline",
    )


@pivotgym.hookimpl
def register_suites(register):
    members = {env_id: "in_domain" for env_id in SINGLE_TURN if env_id != "tooluse/bfcl-live-v0"}
    members["tooluse/bfcl-multi-turn-v0"] = "in_domain"
    members["tooluse/bfcl-live-v0"] = "ood"
    register("tooluse", members, description="BFCL tool use: in-domain categories, live functions as OOD")
