"""``pivotgym swe`` (and the ``pivotgym-swe`` script): rebuild the shipped task sets, evaluate SWE-bench predictions.

``pivotgym swe synth`` rebuilds ``pivotgym_swe/data/<set>.jsonl`` (seeded; the same seed gives the same
instances). ``pivotgym swe audit`` judges every task's reference fix and bug (after a change to the judge or the
sandbox). ``pivotgym swe swebench-eval`` runs real SWE-bench instances on the docker backend.
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from pivotgym_swe.tasks import DATA_DIR, TASK_SETS

app = typer.Typer(name="pivotgym-swe", help="SWE tasks for pivotgym.", no_args_is_help=True, add_completion=False)


@app.command("synth")
def synth_cmd(
    sets: list[str] = typer.Argument(None, help=f"Task sets to build (default: all of {', '.join(TASK_SETS)})."),
    out_dir: Path = typer.Option(DATA_DIR, help="Where to write <set>.jsonl."),
    seed: int = typer.Option(0, help="Random seed of the mutation order."),
    train: int | None = typer.Option(None, help="Train instances per set (default: per-set quota)."),
    test: int | None = typer.Option(None, help="Test instances per set (default: per-set quota)."),
    max_tries: int = typer.Option(150, help="Mutants tried per project at most."),
    as_json: bool = typer.Option(False, "--json", help="Print counts as JSON."),
) -> None:
    """Synthesise verified bug-fix instances from the default projects (SWE-smith style)."""
    import json

    from pivotgym import write_jsonl
    from pivotgym_swe.synth import DEFAULT_QUOTAS, SynthConfig, synth_set

    counts = {}
    for name in sets or list(TASK_SETS):
        if name not in TASK_SETS:
            raise typer.BadParameter(f"unknown set {name!r}; choose from {', '.join(TASK_SETS)}")
        quotas = (
            train if train is not None else DEFAULT_QUOTAS[name][0],
            test if test is not None else DEFAULT_QUOTAS[name][1],
        )
        rows = synth_set(
            name,
            quotas,
            SynthConfig(seed=seed, max_tries=max_tries),
            progress=lambda msg: typer.echo(f"  {msg}", err=True),
        )
        write_jsonl(out_dir / f"{name}.jsonl", rows)
        counts[name] = {s: sum(r["split"] == s for r in rows) for s in ("train", "test")}
        if not as_json:
            typer.echo(
                f"{name}: {counts[name]['train']} train, {counts[name]['test']} test -> {out_dir / (name + '.jsonl')}"
            )
    if as_json:
        typer.echo(json.dumps(counts, indent=2))


@app.command("swebench-eval")
def swebench_eval_cmd(
    instances: Path = typer.Argument(..., help="SWE-bench instances (.json, .jsonl or .parquet)."),
    predictions: Path = typer.Argument(..., help="Predictions JSONL: {instance_id, model_patch}."),
    limit: int | None = typer.Option(None, help="Evaluate at most this many."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Evaluate predictions on real SWE-bench instances with the swebench test specs (needs Docker)."""
    import json

    from pivotgym import read_jsonl
    from pivotgym_swe.swebench import evaluate_prediction, load_instances

    preds = {r["instance_id"]: r.get("model_patch", "") for r in read_jsonl(predictions)}
    rows = [i for i in load_instances(instances) if i["instance_id"] in preds][:limit]
    reports = [evaluate_prediction(i, preds[i["instance_id"]]) for i in rows]
    if as_json:
        typer.echo(json.dumps(reports, indent=2))
    else:
        for r in reports:
            typer.echo(f"{r['instance_id']}: {'RESOLVED' if r['resolved'] else 'not resolved'}")


@app.command("audit")
def audit_cmd(
    sets: list[str] = typer.Argument(None, help=f"Task sets to audit (default: all of {', '.join(TASK_SETS)})."),
    tasks_path: Path | None = typer.Option(None, "--tasks", help="A task file (JSONL) instead of shipped sets."),
    sandbox: str | None = typer.Option(None, help="Sandbox backend (default: PIVOTGYM_SANDBOX or bwrap)."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Judge every task's reference fix (must be solved) and its bug (must not be): exit 1 if any is wrong."""
    import json

    from pivotgym.sandbox import get_sandbox
    from pivotgym_swe.audit import audit_tasks

    for name in sets or []:
        if name not in TASK_SETS:
            raise typer.BadParameter(f"unknown set {name!r}; choose from {', '.join(TASK_SETS)}")
    box = get_sandbox(sandbox)
    results, seconds = audit_tasks(
        list(sets or TASK_SETS), box, tasks_path=str(tasks_path) if tasks_path else None, progress=not as_json
    )
    wrong = [r for r in results if not r.ok]
    tests_only = [r for r in results if not r.host_rejects]
    if as_json:
        typer.echo(
            json.dumps(
                {"sandbox": box.name, "tasks": len(results), "wrong": len(wrong), "seconds": round(seconds, 1),
                 "host_rejects": len(results) - len(tests_only), "results": [r.to_dict() for r in results]},
                indent=2,
            )
        )  # fmt: skip
    else:
        for r in wrong:
            typer.echo(f"WRONG {r.task_set}/{r.instance_id}: {r.detail}")
        typer.echo(f"{len(results) - len(wrong)} of {len(results)} tasks judged right on {box.name} ({seconds:.0f} s)")
        typer.echo(
            f"the host-observed oracle alone rejects {len(results) - len(tests_only)} of {len(results)} bugs"
            + (f"; the tests decide alone on: {', '.join(r.instance_id for r in tests_only)}" if tests_only else "")
        )
    if wrong:
        raise typer.Exit(1)


def main(argv: list[str] | None = None) -> int:
    try:
        code = app(args=argv, prog_name="pivotgym-swe", standalone_mode=False)
    except Exception as exc:
        import click

        if isinstance(exc, click.exceptions.Exit):
            return exc.exit_code
        if isinstance(exc, click.ClickException):
            exc.show()
            return exc.exit_code
        typer.echo(f"error: {exc}", err=True)
        return 1
    return code if isinstance(code, int) else 0  # a command's `typer.Exit(n)` comes back as n here


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
