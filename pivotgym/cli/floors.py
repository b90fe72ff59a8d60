"""``pivotgym floors``: the floor and ceiling of turn accuracy per env, and with ``--model`` the model's exact
probability of a credited action (:mod:`pivotgym.eval.floors`, :mod:`pivotgym.eval.likelihood`)."""

from __future__ import annotations

import math
from typing import Any

import typer

from pivotgym.cli.checks import check_envs
from pivotgym.cli.eval import SAMPLER_OPTION_HELP, cli_sampler, parse_sampler_options
from pivotgym.cli.output import CLIError, emit_json, table
from pivotgym.eval.floors import floor_label

#: how each metric is labelled and printed (``pct``: as a percentage; else a count)
LABELS: dict[str, tuple[str, bool]] = {
    "random_legal": (floor_label("legal"), True),
    "expert": ("always expert (ceiling)", True),
    "multi_credit": ("states crediting >= 2 actions", True),
    "legal": ("legal actions per state", False),
    "credited": ("credited actions per state", False),
    "p_credited": ("P(credited action)", True),
    "p_legal": ("P(legal action)", True),
    "p_credited_given_legal": ("P(credited | legal)", True),
}


def _cell(value: float | None, pct: bool) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    return f"{100 * value:.1f}%" if pct else f"{value:.2f}"


#: the labels that change where the floors judged the env's candidate actions instead of its legal ones
CANDIDATE_LABELS: dict[str, str] = {
    "random_legal": floor_label("candidate"),
    "legal": "candidate actions per state",
}


def _rows(metrics: dict[str, dict[str, Any]], action_set: str = "legal") -> list[list[str]]:
    rows = []
    for name, interval in metrics.items():
        label, pct = LABELS.get(name, (name, True))
        if action_set == "candidate":
            label = CANDIDATE_LABELS.get(name, label)
        low, high = interval["low"], interval["high"]
        ci = f"[{_cell(low, pct)}, {_cell(high, pct)}]" if low is not None and high is not None else "-"
        rows.append([label, _cell(interval["mean"], pct), ci, str(interval["n"])])
    return rows


def floors_cmd(
    envs: list[str] = typer.Argument(..., help="Env ids (`pivotgym envs` lists them); each is measured in turn."),
    split: str = typer.Option("test", help="The split whose expert trajectories give the states."),
    limit: int | None = typer.Option(None, help="Only the first N expert trajectories of the split."),
    model: str | None = typer.Option(
        None, help="Also score this model's probability of credited and legal actions (bundled alias, folder, hub id)."
    ),
    sampler: str = typer.Option("hf", "--sampler", help="Sampler backend for --model (likelihoods need hf)."),
    sampler_option: list[str] = typer.Option([], "--sampler-option", help=SAMPLER_OPTION_HELP),
    device: str | None = typer.Option(None, help="cpu or cuda for --model (default: cuda when present)."),
    verifier: str = typer.Option("functional", help="functional (the env's own), exact, or a verifier name."),
    executor: str = typer.Option("process", help="Where verification runs: process, serial, ray, ray:ADDRESS."),
    workers: int | None = typer.Option(None, help="Parallel verification workers (default: CPU count)."),
    timeout: float = typer.Option(60.0, help="Seconds one verification may take before it counts as failed."),
    interval: str = typer.Option("t", help="Interval over problems: t (Student's t) or bca (BCa bootstrap)."),
    states: bool = typer.Option(False, "--states", help="With --json, include every state's row."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Print each env's turn-accuracy floor (a random legal action) and ceiling (the expert's own action), the
    share of states where the verifier credits two or more actions and, with --model, the model's probability
    of a credited action; exit 1 when an env has no state that could be judged."""
    from pivotgym.eval.floors import floors
    from pivotgym.eval.likelihood import likelihood_scores
    from pivotgym.execution import make_executor

    if interval not in ("t", "bca"):
        raise CLIError(f"--interval {interval!r}: use t or bca")
    check_envs(envs, "floors")  # before any model loads
    try:
        pool = make_executor(executor, workers=workers, timeout=timeout)
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    backend = (
        cli_sampler(sampler, model, parse_sampler_options(sampler_option), device=device) if model is not None else None
    )
    results: list[dict[str, Any]] = []
    empty: list[str] = []
    with pool:
        for env_id in envs:
            measured = floors(env_id, split, limit, executor=pool, verifier=verifier, timeout=timeout)
            out = measured.to_dict(states=states, method=interval)
            if backend is not None and measured.judged and measured.action_set == "legal":
                scored = likelihood_scores(backend, measured)
                out["likelihood"] = scored.to_dict(states=states, method=interval)
            elif backend is not None and measured.judged:
                out["likelihood_skipped"] = f"{env_id} has candidate actions, not legal ones: no likelihood scores"
                typer.echo(out["likelihood_skipped"], err=True)
            if not measured.judged:
                empty.append(_why_not_judged(env_id, out))
            results.append(out)
    if as_json:
        emit_json(results if len(results) > 1 else results[0])
    else:
        for out in results:
            _print(out)
    if empty:
        typer.echo("FAILED: no state could be judged:\n" + "\n".join(f"  {line}" for line in empty), err=True)
        raise typer.Exit(1)


def _why_not_judged(env_id: str, out: dict[str, Any]) -> str:
    """Why no state of ``env_id`` was judged, and what to do about it."""
    if out["states"] and out["no_legal"] == out["states"]:
        from pivotgym.registry import get_registry

        cls = type(get_registry().make(env_id)).__qualname__
        return (
            f"{env_id}: its env ({cls}) offers no actions to judge at any state; implement `legal_actions()` "
            "(every action it accepts, one canonical text each) or `candidate_actions()` (a finite set of "
            "plausible ones) on it (see pivotgym.env.AgentEnv)"
        )
    if not out["states"]:
        return f"{env_id}: the split has no expert states (no expert trajectories, or none with a turn)"
    return f"{env_id}: every verification was undecided ({out['failed']} of {out['states']} states)"


def _print(out: dict[str, Any]) -> None:
    typer.echo(
        f"{out['env_id']} [{out['split']}]: {out['problems']} problems, {out['judged_states']} of {out['states']} "
        f"states judged ({out['no_legal']} without legal actions, {out['failed']} with an undecided verification); "
        f"verifier {out['verifier']}"
    )
    metrics = out["metrics"]
    method = next(iter(metrics.values()))["method"] if metrics else "t"
    rows = _rows(metrics, out.get("action_set", "legal"))
    if out.get("action_set_description"):
        typer.echo(f"candidate actions (no finite legal set): {out['action_set_description']}")
    if "likelihood" in out:
        rows += _rows(out["likelihood"]["metrics"])
    typer.echo(table(rows, ["metric", "mean over problems", f"95% CI ({method})", "problems"]))
    if "likelihood" in out:
        tok = out["likelihood"]["tokenization"]
        typer.echo(
            f"model {out['likelihood']['model'].get('model')}: actions tokenised by the chat template "
            f"{tok.get('template', 0)}, as plain text {tok.get('plain', 0)}; {tok.get('over_cap', 0)} over the "
            "generation cap"
        )
    typer.echo("")


def register(app: typer.Typer) -> None:
    """Add ``floors``."""
    app.command("floors")(floors_cmd)
