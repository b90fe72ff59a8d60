"""``pivotgym profile``, ``pivotgym select`` and ``pivotgym pivots import|export``: the pivot subsystem."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from pivotgym.cli.checks import check_envs
from pivotgym.cli.eval import SAMPLER_OPTION_HELP, cli_sampler, parse_sampler_options
from pivotgym.cli.output import CLIError, emit_json, table
from pivotgym.pivot.adaptive import AdaptiveK
from pivotgym.pivot.profile import ProfileConfig

pivots_app = typer.Typer(
    help="Move pivot sets in and out of other formats (NeMo-Gym rows, HF datasets).", no_args_is_help=True
)


def _read_trajectories(path: Path) -> list[Any]:
    from pivotgym.jsonl import read_trajectories

    if not path.exists():
        raise CLIError(f"no such trajectories file: {path}", "write one with `pivotgym expert ENV_ID --out FILE`")
    trajectories = read_trajectories(path)
    if not trajectories:
        raise CLIError(f"{path} holds no trajectories")
    return trajectories


def profile_cmd(
    trajectories: Path = typer.Option(..., "--trajectories", "-t", help="Expert trajectories (JSONL)."),
    out: Path = typer.Option(..., "--out", "-o", help="Turn profiles (JSONL); also the cache a re-run resumes from."),
    model: str = typer.Option("smollm2-135m", help="Reference policy: a model alias or a local folder."),
    k: int = typer.Option(ProfileConfig.k, "--k", help="Samples per state (the maximum, with --adaptive)."),
    verifier: str = typer.Option(
        ProfileConfig.verifier, help="'functional' (the env's own), 'exact', or a verifier name."
    ),
    sampler: str = typer.Option("hf", help="Sampler backend registered by a plugin (hf, vllm, ...)."),
    sampler_option: list[str] = typer.Option([], "--sampler-option", help=SAMPLER_OPTION_HELP),
    temperature: float = typer.Option(1.0, help="Sampling temperature."),
    top_p: float = typer.Option(1.0, help="Nucleus sampling threshold."),
    max_new_tokens: int | None = typer.Option(
        None,
        min=1,
        help="A cap on tokens per sampled action; it only "
        "shortens each env's own limit (default: the env's own, as "
        "in evaluation).",
    ),
    seed: int = typer.Option(
        ProfileConfig.seed, help="Seed; each state's sampling seeds are derived from it and the state's key."
    ),
    adaptive: bool = typer.Option(
        False, "--adaptive", help="Stop sampling a state once its pivot decision is settled."
    ),
    max_mean: float = typer.Option(
        AdaptiveK.max_mean, help="λ: the mean a pivot must stay below (used by --adaptive)."
    ),
    min_pass_rate: float = typer.Option(
        AdaptiveK.min_pass_rate, help="--adaptive: the error bound covers states with this pass rate or more."
    ),
    delta: float = typer.Option(
        AdaptiveK.delta,
        help="--adaptive: at most this chance of dropping a fixed-K pivot (pass rate >= --min-pass-rate).",
    ),
    min_unanimous: int | None = typer.Option(
        None,
        help="--adaptive: stop after this many equal rewards (default: "
        "derived from the bound; refused if it breaks it).",
    ),
    block: int | None = typer.Option(None, help="Samples per sampler call (default: K, or 2 with --adaptive)."),
    executor: str = typer.Option("process", help="Where verification runs: process, serial, ray, ray:ADDRESS."),
    workers: int | None = typer.Option(None, help="Parallel verification workers (default: CPU count)."),
    timeout: float = typer.Option(
        ProfileConfig.timeout, help="Seconds one verification may take before it counts as failed."
    ),
    chunk: int = typer.Option(
        ProfileConfig.chunk, help="States profiled together per round (rows are written after each)."
    ),
    limit: int | None = typer.Option(None, help="Profile only the first N states."),
    resume: bool = typer.Option(True, "--resume/--no-resume", help="Skip states already in --out (default)."),
    as_json: bool = typer.Option(False, "--json", help="Print the run statistics as JSON."),
) -> None:
    """Profile every assistant turn with K samples from a frozen reference policy."""
    from pivotgym.execution import make_executor
    from pivotgym.pivot.profile import Profiler, profile_config

    trajs = _read_trajectories(trajectories)
    check_envs((t.env_id for t in trajs), str(trajectories))  # before the reference model loads
    if max_new_tokens is None:  # a cap no env's own limit exceeds: every env keeps its own
        from pivotgym.env import generation_cap
        from pivotgym.registry import make

        max_new_tokens = max(generation_cap(make(env_id)) for env_id in {t.env_id for t in trajs})
    try:
        adaptive_rule = (
            AdaptiveK(
                max_mean=max_mean,
                min_pass_rate=min_pass_rate,
                delta=delta,
                min_unanimous=min_unanimous,
                block=block or AdaptiveK.block,
            )
            if adaptive
            else None
        )
        config = profile_config(
            k=k,
            temperature=temperature,
            top_p=top_p,
            max_new_tokens=max_new_tokens,
            seed=seed,
            verifier=verifier,
            block=block,
            adaptive=adaptive_rule,
            timeout=timeout,
            chunk=chunk,
            pivot_max_mean=max_mean,
        )
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    try:
        pool = make_executor(executor, workers=workers, timeout=timeout)
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    reference = cli_sampler(sampler, model, parse_sampler_options(sampler_option))
    with pool:
        result = Profiler(reference, config, pool).profile(trajs, out, resume=resume, limit=limit)
    stats = {**result.stats, "out": str(out)}
    if as_json:
        emit_json(stats)
        return
    typer.echo(
        f"profiled {stats['profiled']} states ({stats['cached']} already in {out}); "
        f"{stats['samples']} samples, {stats['pivots']} pivots, "
        f"{stats['verify_failures']} failed verifications, {stats['states_per_s']} states/s"
    )


def _parse_quotas(values: list[str]) -> dict[str, int]:
    quotas = {}
    for value in values:
        env, sep, n = value.rpartition("=")
        if not sep or not n.isdigit():
            raise CLIError(f"--per-env {value!r}: write ENV_ID=N (or *=N for every env)")
        quotas[env] = int(n)
    return quotas


def select_cmd(
    profiles: Path = typer.Argument(..., help="Turn profiles written by `pivotgym profile`."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Pivot set (JSONL) to write."),
    min_var: float = typer.Option(0.0, help="Keep turns whose reward variance is above this."),
    max_mean: float = typer.Option(0.6, help="Keep turns whose mean reward is below this (λ)."),
    min_mean: float | None = typer.Option(None, help="And at least this mean (optional)."),
    top_n: int | None = typer.Option(None, help="Keep at most N pivots, lowest mean first."),
    per_env: list[str] = typer.Option([], help="Per-env quota ENV_ID=N (repeatable; *=N for all envs)."),
    trajectories: Path | None = typer.Option(
        None,
        "--trajectories",
        "-t",
        help="Only for profiles written before rows carried their state: the trajectories they were made from, "
        "so the pivot set carries its states.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Select pivots (mixed rewards, low mean) and report the share of uninformative turns per env."""
    from pivotgym.jsonl import read_profiles, write_pivot_set
    from pivotgym.pivot.select import SelectionRule, select_pivots

    if not profiles.exists():
        raise CLIError(f"no such profiles file: {profiles}", "write one with `pivotgym profile`")
    rule = SelectionRule(
        min_var=min_var, max_mean=max_mean, min_mean=min_mean, top_n=top_n, per_env=_parse_quotas(per_env)
    )
    rows = read_profiles(profiles)
    if not rows:
        raise CLIError(
            f"{profiles}: holds no turn profiles, so there is nothing to select from",
            "profile expert trajectories first: `pivotgym profile --trajectories F --out PROFILES`",
        )
    pivot_set = select_pivots(rows, rule)
    if trajectories is not None:
        from pivotgym.states import with_states

        try:
            pivot_set.pivots = with_states(pivot_set.pivots, _read_trajectories(trajectories), source=str(profiles))
        except ValueError as exc:
            raise CLIError(str(exc)) from None
    stateless = sum(p.state is None for p in pivot_set.pivots)
    if stateless:
        typer.echo(
            f"note: {stateless} pivots carry no state ({profiles} was written before rows carried it); pass "
            "--trajectories here, or to `train pivot` and `pivots export`",
            err=True,
        )
    if out is not None:
        write_pivot_set(out, pivot_set)
    per_env_stats = pivot_set.stats["per_env"]
    if as_json:
        emit_json(
            {
                "rule": pivot_set.rule,
                "per_env": per_env_stats,
                "pivots": len(pivot_set.pivots),
                "out": str(out) if out else None,
            }
        )
        return
    lines = [
        [env, s["turns"], s["all_fail"], s["all_pass"], f"{s['share_uninformative']:.1%}", s["pivots"]]
        for env, s in per_env_stats.items()
    ]
    typer.echo(table(lines, ["env", "turns", "all fail", "all pass", "uninformative", "pivots"]))
    if out is not None:
        typer.echo(f"wrote {len(pivot_set.pivots)} pivots to {out}")


@pivots_app.command("import")
def import_cmd(
    source: Path = typer.Argument(..., help="NeMo-Gym / Nemotron pivot rows (JSONL)."),
    out: Path = typer.Option(..., "--out", "-o", help="Trajectories (JSONL) to write."),
    env_id: str | None = typer.Option(None, help="The pivotgym env the states belong to (rows we exported name it)."),
    fmt: str = typer.Option("nemo", "--from", help="Source format (nemo)."),
) -> None:
    """Import pivot rows as trajectories (each row's state is the trajectory's last turn)."""
    from pivotgym.jsonl import read_jsonl, write_trajectories
    from pivotgym.pivot.formats import import_nemo_rows

    if fmt != "nemo":
        raise CLIError(f"unknown import format {fmt!r}", "supported: nemo")
    try:
        trajectories = import_nemo_rows(read_jsonl(source), env_id=env_id)
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    write_trajectories(out, trajectories)
    typer.echo(f"imported {len(trajectories)} states into {out}")


@pivots_app.command("export")
def export_cmd(
    pivots: Path = typer.Argument(..., help="Pivot set written by `pivotgym select` (its rows carry their states)."),
    trajectories: Path | None = typer.Option(
        None, "--trajectories", "-t", help="Only for pivot sets written before rows carried their state."
    ),
    out: Path = typer.Option(..., "--out", "-o", help="JSONL file (nemo) or dataset folder (hf)."),
    fmt: str = typer.Option("nemo", "--to", help="nemo: NeMo-Gym pivot rows; hf: a datasets.Dataset for TRL."),
) -> None:
    """Export a pivot set as NeMo-Gym pivot rows or as a HF dataset of prompts (TRL GRPO)."""
    from pivotgym.jsonl import read_pivot_set, write_jsonl
    from pivotgym.pivot.formats import export_nemo_rows, to_hf_dataset

    pivot_set = read_pivot_set(pivots)
    trajs = _read_trajectories(trajectories) if trajectories is not None else None
    try:
        if fmt == "nemo":
            n = write_jsonl(out, export_nemo_rows(pivot_set, trajs))
        elif fmt == "hf":
            dataset = to_hf_dataset(pivot_set, trajs)
            dataset.save_to_disk(str(out))
            n = len(dataset)
        else:
            raise CLIError(f"unknown export format {fmt!r}", "supported: nemo, hf")
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    typer.echo(f"exported {n} pivots to {out} ({fmt})")


def register(app: typer.Typer) -> None:
    """Add ``profile``, ``select`` and ``pivots`` to the ``pivotgym`` command."""
    app.command("profile")(profile_cmd)
    app.command("select")(select_cmd)
    app.add_typer(pivots_app, name="pivots")
