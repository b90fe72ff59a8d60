"""The core's default plugin: built-in pieces registered through the same hooks any plugin uses."""

from __future__ import annotations

from pivotgym.hookspecs import Register, hookimpl


@hookimpl
def register_verifiers(register: Register) -> None:
    register("exact", "pivotgym.verify:ExactMatchVerifier",
             description="reward 1 only for the expert's exact text (whitespace-normalised); the ablation baseline")
