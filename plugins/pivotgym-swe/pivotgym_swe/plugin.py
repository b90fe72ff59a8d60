"""Hook implementations: the SWE envs and verifiers, registered through pivotgym's public hooks only."""

from __future__ import annotations

import pivotgym

SETS = {
    "swe/toolz-v0": ("toolz", "bugs synthesised in toolz 1.1.0 (tests from its wheel)"),
    "swe/more-itertools-v0": ("more-itertools", "bugs synthesised in more-itertools 10.5.0 (sdist with tests)"),
    "swe/humanevalfix-v0": ("humanevalfix", "HumanEvalFix-style: a bug in a HumanEval canonical solution"),
}


@pivotgym.hookimpl
def register_environments(register):
    for env_id, (task_set, description) in SETS.items():
        register(
            env_id,
            "pivotgym_swe.env:SWEEnv",
            verifier="swe/functional",
            exact_verifier="exact",
            splits=("train", "test"),
            description=description,
            task_set=task_set,
        )


@pivotgym.hookimpl
def register_verifiers(register):
    register(
        "swe/functional",
        "pivotgym_swe.verifier:FunctionalVerifier",
        description="tool category, target, then edit equivalence (normalised AST or same hidden-test outcomes)",
    )
    register("swe/name", "pivotgym_swe.verifier:NameVerifier", description="coarse: same tool name as the expert")


@pivotgym.hookimpl
def register_suites(register):
    register(
        "swe",
        {"swe/toolz-v0": "in_domain", "swe/more-itertools-v0": "in_domain", "swe/humanevalfix-v0": "ood"},
        description="repository repair",
    )


@pivotgym.hookimpl
def register_commands(cli):
    """``pivotgym swe synth`` and ``pivotgym swe swebench-eval`` (also the ``pivotgym-swe`` script)."""
    from pivotgym_swe.commands import app

    cli.add_typer(app, name="swe", help="The SWE domain: synthesise task sets, evaluate SWE-bench predictions.")
