"""Fail-fast id checks that commands run before any slow work (loading a model, creating a run folder)."""

from __future__ import annotations

from collections.abc import Iterable

from pivotgym.cli.output import CLIError


def check_suite(suite: str, members: list[str] | None = None) -> None:
    """Fail fast, before a model loads: ``suite`` must be registered, ``members`` must be among its members
    and every chosen member's env must be installed. Raises a one-line error naming the unknown id."""
    from pivotgym.eval import suite_members
    from pivotgym.registry import RegistryError, get_registry

    name, all_members = suite_members(suite)  # RegistryError: names the suite and `pivotgym suites`
    keys = [m.key for m in all_members]
    unknown = sorted(set(members or ()) - set(keys))
    if unknown:
        raise CLIError(f"suite {name!r} has no member(s) {unknown}; it has {keys}")
    registry = get_registry()
    for m in all_members:
        if members is None or m.key in members:
            try:
                registry.env_spec(m.env_id)
            except RegistryError as exc:
                raise CLIError(f"suite {name!r} member {m.key!r}: {exc}") from None


def check_envs(env_ids: Iterable[str], source: str) -> None:
    """Fail fast, before a model loads, when ``source`` (a file) names an env that is not installed."""
    from pivotgym.registry import RegistryError, get_registry

    registry = get_registry()
    for env_id in sorted(set(env_ids)):
        try:
            registry.env_spec(env_id)
        except RegistryError as exc:
            raise CLIError(f"{source}: {exc}") from None
