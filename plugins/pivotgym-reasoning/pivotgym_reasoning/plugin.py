"""Hook implementations: the reasoning envs, their verifier and the ``ood-reasoning`` suite.

Factories are ``"module:Attr"`` strings, so loading the plugin imports neither reasoning-gym nor torch.
"""

from __future__ import annotations

import pivotgym
from pivotgym_reasoning.tasks import TASKS, TEST_SIZE, env_id

ENV = "pivotgym_reasoning.env:ReasoningEnv"
VERIFIER = "reasoning/answer"
SUITE = "ood-reasoning"


@pivotgym.hookimpl
def register_environments(register):
    for name, spec in TASKS.items():
        register(
            env_id(name),
            ENV,
            verifier=VERIFIER,
            exact_verifier="exact",
            splits=("train", "test"),
            description=f"reasoning-gym {spec.dataset} at {spec.level}: {spec.description} (single turn, chat)",
            task=name,
        )


@pivotgym.hookimpl
def register_verifiers(register):
    register(
        VERIFIER,
        "pivotgym_reasoning.verifier:ReasoningVerifier",
        description="reasoning envs: credits any reply whose answer reasoning-gym's own scorer gives full marks",
    )


@pivotgym.hookimpl
def register_suites(register):
    members = {f"{env_id(name)}@test": "ood" for name, spec in TASKS.items() if spec.in_suite}
    register(
        SUITE,
        members,
        description=f"procedurally generated reasoning (reasoning-gym), {TEST_SIZE} test items per task, "
        "generation-based in the chat format, at difficulties where the base model is above chance and below "
        "ceiling (pivotgym_reasoning.calibrate)",
    )


@pivotgym.hookimpl
def register_commands(cli):
    """``pivotgym reasoning ...`` (:mod:`pivotgym_reasoning.commands`)."""
    from pivotgym_reasoning.commands import app

    cli.add_typer(app, name="reasoning")
