"""The ``pivotgym`` command.

Core commands live here; subsystems contribute theirs through a ``register(app)`` function in the modules
listed in ``COMMAND_MODULES``. Errors print one line plus a hint and exit non-zero; ``--debug`` shows the
traceback.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Any, Optional

import typer

app = typer.Typer(
    name="pivotgym",
    help="Multi-turn text environments, functional verifiers and the PivotRL method.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

#: modules that add commands to ``app`` through ``register(app)``
COMMAND_MODULES: list[str] = [
    "pivotgym.eval_commands",
    "pivotgym.data_commands",
    "pivotgym.train.commands",
    "pivotgym.sampling.commands",
    "pivotgym.pivot.commands",
    "pivotgym.verify_commands",
]

_state: dict[str, Any] = {"debug": False}


class CLIError(Exception):
    """An error meant for the user: printed as one line with an optional hint."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


@app.callback()
def _root(debug: bool = typer.Option(False, "--debug", help="Show full tracebacks on errors.")) -> None:
    _state["debug"] = debug


def emit_json(data: Any) -> None:
    """Print stable, indented JSON to stdout (the ``--json`` output of every command)."""
    typer.echo(json.dumps(data, indent=2, ensure_ascii=False, default=str))


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [fmt.format(*header), fmt.format(*("-" * w for w in widths))]
    lines += [fmt.format(*(str(c) for c in r)) for r in rows]
    return "\n".join(line.rstrip() for line in lines)


@app.command("plugins")
def plugins_cmd(as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """List loaded plugins with their version and any load error."""
    from pivotgym.registry import get_registry

    registry = get_registry()
    infos = list(registry.plugins.infos.values())
    lost: dict[str, list[dict[str, str]]] = {}
    for conflict in registry.conflicts:  # duplicate ids: which plugin lost which id to whom
        lost.setdefault(conflict["loser"], []).append(
            {"kind": conflict["kind"], "id": conflict["id"], "winner": conflict["winner"]})
    if as_json:
        emit_json([{**i.to_dict(), "lost_ids": lost.get(i.name, [])} for i in infos])
        return
    rows = [[i.name, i.version or "-", i.distribution or "-", "ok" if not i.errors else "ERROR",
             ", ".join(f"{c['id']} (to {c['winner']})" for c in lost.get(i.name, [])) or "-"] for i in infos]
    typer.echo(_table(rows, ["plugin", "version", "distribution", "status", "lost ids"]))
    for info in infos:
        for err in info.errors:
            typer.echo(f"\n{info.name}: {err}", err=True)
        for tb in info.tracebacks:
            typer.echo(tb.rstrip(), err=True)
    if any(i.errors for i in infos):
        typer.echo("\nhint: fix, upgrade or uninstall the failing plugin; the others loaded normally. "
                   f"PIVOTGYM_LOAD_PLUGINS=a,b loads only the named ones.", err=True)


@app.command("envs")
def envs_cmd(as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """List registered environments."""
    from pivotgym.registry import list_envs

    specs = list_envs()
    if as_json:
        emit_json([s.to_dict() for s in specs])
        return
    rows = [[s.id, s.plugin, s.verifier or "-", ",".join(s.resolved_splits())] for s in specs]
    typer.echo(_table(rows, ["id", "plugin", "verifier", "splits"]))


@app.command("check")
def check_cmd(
    env_id: str = typer.Argument(..., help="Environment id, e.g. planning/blocks-v0 (`all` checks every env)."),
    verifier: Optional[str] = typer.Option(None, help="Verifier name (default: the env's functional verifier)."),
    n_experts: int = typer.Option(1, help="Expert trajectories to replay and verify."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Check an environment and its verifier against the pivotgym contracts."""
    from pivotgym.checker import check_env
    from pivotgym.registry import list_envs

    ids = [s.id for s in list_envs()] if env_id == "all" else [env_id]
    reports = [check_env(i, verifier=verifier, n_experts=n_experts) for i in ids]
    if as_json:
        emit_json([r.to_dict() for r in reports])
    else:
        for report in reports:
            typer.echo(f"{report.env_id}: {'OK' if report.ok else 'FAILED'}")
            for r in report.results:
                first_line = r.detail.splitlines()[0] if r.detail else ""
                typer.echo(f"  {r.status.upper():4}  {r.name:21} {first_line}")
    if not all(r.ok for r in reports):
        raise typer.Exit(1)


@app.command("expert")
def expert_cmd(
    env_id: str = typer.Argument(..., help="Environment id."),
    split: str = typer.Option("train", help="Task split."),
    out: Path = typer.Option(..., help="Output JSONL file of trajectories."),
    limit: Optional[int] = typer.Option(None, help="At most this many trajectories."),
) -> None:
    """Write expert trajectories for a split (from a solver or shipped data)."""
    from tqdm import tqdm

    from pivotgym.jsonl import write_trajectories
    from pivotgym.registry import make

    env = make(env_id)
    total = len(env.tasks(split)) if limit is None else min(limit, len(env.tasks(split)))
    trajs = list(tqdm(env.expert_trajectories(split, limit=limit), total=total, desc=f"expert {env_id}",
                      unit="traj", disable=None))
    write_trajectories(out, trajs)
    solved = sum(t.reward > 0 for t in trajs)
    typer.echo(f"wrote {len(trajs)} trajectories ({solved} successful) to {out}")


def _load_command_modules() -> None:
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(app)


def _hint_for(exc: BaseException) -> str | None:
    from pivotgym.jsonl import JsonlError
    from pivotgym.registry import RegistryError

    if isinstance(exc, CLIError):
        return exc.hint
    if isinstance(exc, RegistryError):
        return None  # the message already says how to list what exists
    if isinstance(exc, JsonlError):
        return None  # the message names the file, the line and the field to fix
    if isinstance(exc, FileNotFoundError):
        return "check the path"
    return "run again with --debug for the traceback"


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script: runs the app and turns exceptions into one-line errors."""
    argv = list(sys.argv[1:] if argv is None else argv)
    _state["debug"] = "--debug" in argv
    try:
        _load_command_modules()
        app(args=argv, prog_name="pivotgym", standalone_mode=False)
    except typer.Exit as exc:
        return exc.exit_code
    except (typer.Abort, KeyboardInterrupt):
        typer.echo("aborted", err=True)
        return 130
    except Exception as exc:  # noqa: BLE001 - the user gets one clear line, not a traceback
        if callable(getattr(exc, "show", None)) and isinstance(getattr(exc, "exit_code", None), int):
            exc.show()  # a usage error from click/typer: it prints its own usage line
            return exc.exit_code
        if _state["debug"]:
            raise
        message = str(exc) or type(exc).__name__
        if isinstance(exc, KeyError) and exc.args:
            message = str(exc.args[0])
        typer.echo(f"error: {message}", err=True)
        hint = _hint_for(exc)
        if hint:
            typer.echo(f"hint: {hint}", err=True)
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
