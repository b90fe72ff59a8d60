"""``pivotgym plugins``, ``pivotgym envs`` and ``pivotgym verifiers``: what the installed plugins loaded and
registered."""

from __future__ import annotations

from collections.abc import Callable

import typer

from pivotgym.cli.output import emit_json, table


def plugins_cmd(as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """List loaded plugins with their version and any load error (exit status 1 when any plugin has one)."""
    from pivotgym.registry import get_registry

    registry = get_registry()
    infos = list(registry.plugins.infos.values())
    lost: dict[str, list[dict[str, str]]] = {}
    for conflict in registry.conflicts:  # duplicate ids: which plugin lost which id to whom
        lost.setdefault(conflict["loser"], []).append(
            {"kind": conflict["kind"], "id": conflict["id"], "winner": conflict["winner"]}
        )
    failed = any(i.errors for i in infos)
    if as_json:
        emit_json([{**i.to_dict(), "lost_ids": lost.get(i.name, [])} for i in infos])
        if failed:
            raise typer.Exit(1)
        return
    rows = [
        [
            i.name,
            i.version or "-",
            i.distribution or "-",
            "ok" if not i.errors else "ERROR",
            ", ".join(f"{c['id']} (to {c['winner']})" for c in lost.get(i.name, [])) or "-",
        ]
        for i in infos
    ]
    typer.echo(table(rows, ["plugin", "version", "distribution", "status", "lost ids"]))
    for info in infos:
        for err in info.errors:
            typer.echo(f"\n{info.name}: {err}", err=True)
        for tb in info.tracebacks:
            typer.echo(tb.rstrip(), err=True)
    if failed:
        typer.echo(
            "\nhint: fix, upgrade or uninstall the failing plugin; the others loaded normally. "
            "PIVOTGYM_LOAD_PLUGINS=a,b loads only the named ones.",
            err=True,
        )
        raise typer.Exit(1)


def envs_cmd(as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """List registered environments."""
    from pivotgym.registry import list_envs

    specs = list_envs()
    if as_json:
        emit_json([s.to_dict() for s in specs])
        return
    rows = [
        [
            s.id,
            s.plugin,
            (s.verifier or "-") + (" (DISABLED: see `pivotgym plugins`)" if s.problem else ""),
            ",".join(s.resolved_splits()),
        ]
        for s in specs
    ]
    typer.echo(table(rows, ["id", "plugin", "verifier", "splits"]))


def verifiers_cmd(as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """List registered verifiers: name, plugin, description and the envs that use each."""
    from pivotgym.registry import get_registry

    registry = get_registry()
    entries = sorted(registry.verifiers.values(), key=lambda e: e.name)
    if as_json:
        emit_json([{**e.to_dict(), "envs": registry.envs_using(e.name)} for e in entries])
        return
    rows = [[e.name, e.plugin, _env_summary(registry.envs_using(e.name)), e.description[:70]] for e in entries]
    typer.echo(table(rows, ["verifier", "plugin", "envs", "description"]))
    typer.echo("(`pivotgym verifiers --json` lists every env id)")


def _entries_cmd(kind: str) -> Callable[..., None]:
    """A command listing the registered entries of ``kind`` (``samplers``, ``sandboxes``, ``user_simulators``):
    name, plugin and description, or ``--json``."""

    def command(as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
        from pivotgym.registry import get_registry

        entries = sorted(getattr(get_registry(), kind).values(), key=lambda e: e.name)
        if as_json:
            emit_json([e.to_dict() for e in entries])
            return
        typer.echo(table([[e.name, e.plugin, e.description] for e in entries], [kind[:-1], "plugin", "description"]))

    command.__doc__ = f"List registered {kind.replace('_', ' ')}: name, plugin and description."
    return command


def _env_summary(env_ids: list[str]) -> str:
    """Env ids in a table cell: one namespace with several envs is shown as ``ns/* (N)``."""
    by_namespace: dict[str, list[str]] = {}
    for env_id in env_ids:
        by_namespace.setdefault(env_id.split("/", 1)[0], []).append(env_id)
    parts = [ids[0] if len(ids) == 1 else f"{ns}/* ({len(ids)})" for ns, ids in by_namespace.items()]
    return ", ".join(parts) or "-"


def register(app: typer.Typer) -> None:
    """Add ``plugins``, ``envs``, ``verifiers``, ``samplers``, ``sandboxes`` and ``user-simulators``."""
    app.command("plugins")(plugins_cmd)
    app.command("envs")(envs_cmd)
    app.command("verifiers")(verifiers_cmd)
    app.command("samplers")(_entries_cmd("samplers"))
    app.command("sandboxes")(_entries_cmd("sandboxes"))
    app.command("user-simulators")(_entries_cmd("user_simulators"))
