"""``pivotgym calibrate``: how often does an env's verifier agree with what happens when the episode goes on?

See :mod:`pivotgym.calibration` for the method: candidates at expert states (from a model, or the env's own
when no model is given) are judged by the functional and the exact-match verifier and played out with the
expert's remaining actions or the env's optimal continuation; the command prints each verifier's confusion
matrix against the outcomes, with 95% intervals and the disagreeing examples.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from pivotgym.cli.output import CLIError, emit_json


def calibrate_cmd(
    env_id: str = typer.Argument(..., help="Environment id, e.g. planning/gripper-v0 (`pivotgym envs` lists them)."),
    model: str | None = typer.Option(
        None, "--model", help="Sample candidates from this model (bundled alias, folder or hub id); default: none."
    ),
    k: int = typer.Option(4, "--k", help="Candidates sampled per state with --model."),
    continuation: str | None = typer.Option(
        None,
        "--continuation",
        help="expert (the expert's remaining actions) or optimal (the env's continuation_actions); "
        "default: optimal where the env provides it, else expert.",
    ),
    split: str | None = typer.Option(None, help="Split of the expert trajectories (default: test, else the first)."),
    limit: int = typer.Option(10, help="At most N expert trajectories."),
    verifier: str = typer.Option(
        "functional",
        help="The verifier to calibrate: functional, judge (a model, $PIVOTGYM_JUDGE_MODEL), a name or a composition; "
        "the exact-match one runs beside it, and the env's functional one too when another is calibrated.",
    ),
    sampler: str = typer.Option("hf", "--sampler", help="Sampler backend for --model (`pivotgym samplers`)."),
    device: str | None = typer.Option(None, help="cpu or cuda for --model (default: cuda when present)."),
    seed: int = typer.Option(0, help="Sampling seed with --model (each state derives its own from it)."),
    examples: int = typer.Option(5, help="Disagreeing examples shown per verifier."),
    out: Path | None = typer.Option(None, help="Also write the whole result (every judged candidate) as JSON."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Calibrate an env's verifier: verdicts against played-out outcomes, with intervals (see docs/pivot.md)."""
    from pivotgym.calibration import CONTINUATIONS, calibrate, format_calibration, provides_continuation
    from pivotgym.registry import get_registry

    registry = get_registry()
    registry.env_spec(env_id)  # an unknown id fails here, with the list of ids
    if continuation is not None and continuation not in CONTINUATIONS:
        raise CLIError(f"--continuation must be one of {', '.join(CONTINUATIONS)}, got {continuation!r}")
    if limit < 1 or k < 1:
        raise CLIError("--limit and --k must be at least 1")
    env = registry.make(env_id)
    split = split or ("test" if "test" in env.splits else env.splits[0])
    if split not in env.splits:
        raise CLIError(f"{env_id} has no split {split!r}; its splits are {list(env.splits)}")
    if continuation is None:
        continuation = "optimal" if provides_continuation(env) else "expert"
    verifiers = {
        label: registry.make_verifier(registry.verifier_name_for(env_id, label))
        for label in dict.fromkeys([verifier, "functional", "exact"])
    }
    backend = None
    if model is not None:
        from pivotgym.cli.eval import cli_sampler

        backend = cli_sampler(sampler, model, device=device)
    try:
        trajectories = list(env.expert_trajectories(split, limit=limit))
    except NotImplementedError as exc:
        raise CLIError(f"{env_id}: {exc}", hint="calibration needs expert trajectories") from None
    result = calibrate(
        env_id,
        trajectories,
        verifiers,
        continuation=continuation,
        sampler=backend,
        k=k,
        seed=seed,
        split=split,
        progress=not as_json,
    )
    data = result.to_dict(examples=examples)
    if out is not None:
        full = {**result.to_dict(examples=examples), "all_rows": [r.to_dict() for r in result.rows]}
        Path(out).write_text(json.dumps(full, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    if as_json:
        emit_json(data)
        return
    typer.echo(format_calibration(result, examples=examples))
    if out is not None:
        typer.echo(f"\nwrote {out}")


def register(app: typer.Typer) -> None:
    """Add ``calibrate``."""
    app.command("calibrate")(calibrate_cmd)
