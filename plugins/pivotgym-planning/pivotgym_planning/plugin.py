"""Hook implementations: the planning envs, verifiers and suites, registered through public hooks only.

Factories are ``"module:attr"`` strings, so loading this plugin imports nothing heavy.
"""

from __future__ import annotations

import pivotgym
from pivotgym_planning.catalog import OOD_FAMILIES, TRAIN_FAMILIES

ENV = "pivotgym_planning.env:PlanningEnv"
#: generated domains (:mod:`pivotgym_planning.generators`), registered as ``planning/NAME-gen-v0``
GENERATED = ("blocks", "gripper")


def env_id(name: str) -> str:
    return f"planning/{name}-v0"


@pivotgym.hookimpl
def register_environments(register):
    for name, family in TRAIN_FAMILIES.items():
        register(
            env_id(name),
            ENV,
            verifier="planning/optimal",
            exact_verifier="planning/exact",
            splits=("train", "test", "ood"),
            family=family,
            description=f"PDDL {name} (pddlgym {family}); ood split: held-out families",
        )
    for name in GENERATED:
        register(
            env_id(f"{name}-gen"),
            ENV,
            verifier="planning/optimal",
            exact_verifier="planning/exact",
            splits=("train", "test", "warmup", "ood"),
            generator=name,
            description=(
                f"generated PDDL {name} problems (pivotgym_planning.generators, seed 0: 400 train / 200 test / "
                "100 warmup, disjoint by canonical hash; optimal length in task metadata); ood split: held-out "
                "families"
            ),
        )
    for name, family in OOD_FAMILIES.items():
        register(
            env_id(name),
            ENV,
            verifier="planning/optimal",
            exact_verifier="planning/exact",
            splits=("train", "test"),
            family=family,
            ood_families=[],
            description=f"PDDL {name} (pddlgym {family}); a family held out of planning training",
        )


@pivotgym.hookimpl
def register_verifiers(register):
    register(
        "planning/optimal",
        "pivotgym_planning.verifier:OptimalActionVerifier",
        description="credits any applicable action with h*(s') = h*(s) - 1 (optimal-cost preserving)",
    )
    register(
        "planning/exact",
        "pivotgym_planning.verifier:PlanningExactVerifier",
        description="credits only the expert's ground action (format-lenient); the ablation baseline",
    )


@pivotgym.hookimpl
def register_suites(register):
    members = {env_id(n): "in_domain" for n in TRAIN_FAMILIES}
    members.update({env_id(n): "ood" for n in OOD_FAMILIES})
    register(
        "planning",
        members,
        description="planning test splits: trained families in-domain, held-out families out-of-domain",
        split="test",
    )
    generated = {env_id(f"{n}-gen"): "in_domain" for n in GENERATED}
    generated.update({env_id(n): "ood" for n in OOD_FAMILIES})
    register(
        "planning-gen",
        generated,
        description="generated planning test splits (200 problems each) in-domain, held-out families out-of-domain",
        split="test",
    )


@pivotgym.hookimpl
def register_commands(cli):
    """``pivotgym planning ...`` (:mod:`pivotgym_planning.commands`)."""
    from pivotgym_planning.commands import app

    cli.add_typer(app, name="planning")
