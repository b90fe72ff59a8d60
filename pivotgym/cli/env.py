"""``pivotgym check``, ``pivotgym expert`` and ``pivotgym tasks``: commands on one registered environment."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from pivotgym.cli.output import CLIError, emit_json, error_line, table

if TYPE_CHECKING:
    from pivotgym.checker import CheckReport


def check_cmd(
    env_id: str = typer.Argument(..., help="Environment id, e.g. planning/blocks-v0 (`all` checks every env)."),
    verifier: str | None = typer.Option(None, help="Verifier name (default: the env's functional verifier)."),
    n_experts: int = typer.Option(1, help="Expert trajectories to replay and verify."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Check an environment and its verifier against the pivotgym contracts."""
    from pivotgym.checker import check_env
    from pivotgym.registry import list_envs

    if env_id == "all":  # one env that cannot be built or judged is a failed report; the others still run
        reports = [_check_or_fail(s.id, verifier=verifier, n_experts=n_experts) for s in list_envs()]
    else:
        reports = [check_env(env_id, verifier=verifier, n_experts=n_experts)]
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


def _check_or_fail(env_id: str, **options: Any) -> CheckReport:
    """:func:`~pivotgym.checker.check_env`, or a report failing ``setup`` when the env or its verifier cannot
    even be made (a disabled env, a broken factory)."""
    from pivotgym.checker import CheckReport, CheckResult, check_env
    from pivotgym.errors import PivotgymError

    try:
        return check_env(env_id, **options)
    except PivotgymError as exc:
        return CheckReport(env_id, [CheckResult("setup", "fail", error_line(exc).removeprefix("error: "))])


def expert_cmd(
    env_id: str = typer.Argument(..., help="Environment id."),
    split: str = typer.Option("train", help="Task split."),
    out: Path = typer.Option(..., help="Output JSONL file of trajectories."),
    limit: int | None = typer.Option(None, help="At most this many trajectories."),
) -> None:
    """Write expert trajectories for a split (from a solver or shipped data)."""
    from tqdm import tqdm

    from pivotgym.jsonl import write_trajectories
    from pivotgym.registry import make

    env = make(env_id)
    total = len(env.tasks(split)) if limit is None else min(limit, len(env.tasks(split)))
    trajs = list(
        tqdm(
            env.expert_trajectories(split, limit=limit), total=total, desc=f"expert {env_id}", unit="traj", disable=None
        )
    )
    write_trajectories(out, trajs)
    solved = sum(t.reward > 0 for t in trajs)
    typer.echo(f"wrote {len(trajs)} trajectories ({solved} successful) to {out}")


def tasks_cmd(
    env_id: str = typer.Argument(..., help="Environment id."),
    split: list[str] = typer.Option([], "--split", help="Only this split (repeatable; default: every split)."),
    limit: int | None = typer.Option(None, help="At most this many tasks per split."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """List an env's task ids by split (the ids `reset(options={"task_id": ...})` and `verify` take)."""
    from pivotgym.registry import make

    env = make(env_id)
    unknown = [s for s in split if s not in env.splits]
    if unknown:
        raise CLIError(f"{env_id} has no split(s) {unknown}; its splits are {list(env.splits)}")
    rows = [{"id": task.id, "split": name} for name in (split or env.splits) for task in env.tasks(name)[:limit]]
    if as_json:
        emit_json(rows)
        return
    typer.echo(table([[r["id"], r["split"]] for r in rows], ["task id", "split"]))


def register(app: typer.Typer) -> None:
    """Add ``check``, ``expert`` and ``tasks``."""
    app.command("check")(check_cmd)
    app.command("expert")(expert_cmd)
    app.command("tasks")(tasks_cmd)
