"""``pivotgym experiment CONFIG``: the whole comparison for one domain, from one YAML file."""

from __future__ import annotations

from pathlib import Path

import typer

from pivotgym.cli.eval import SAMPLER_OPTION_HELP, parse_sampler_options
from pivotgym.cli.output import CLIError, emit_json


def experiment_cmd(
    config: Path = typer.Argument(..., help="Experiment YAML (see examples/configs/quickstart.yaml)."),
    out: Path | None = typer.Option(None, help="Run folder (default: runs/<name>)."),
    stages: str | None = typer.Option(None, help="Comma-separated stages to run (default: all)."),
    seeds: str | None = typer.Option(
        None,
        help="Comma-separated training seeds, replacing the config's `seeds` (e.g. 0,1,2). Finished "
        "seeds of the run folder are kept, so this adds seeds to a finished run.",
    ),
    rerun: list[str] | None = typer.Option(
        None,
        "--rerun",
        help="Recompute this stage and every stage downstream of it, although they finished "
        "(repeatable); needed after a config change that touches a finished stage.",
    ),
    sampler: str | None = typer.Option(
        None, help="Replace the config's `sampler` for every generation of the run (hf or vllm)."
    ),
    sampler_option: list[str] = typer.Option([], "--sampler-option", help=SAMPLER_OPTION_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print the summary JSON."),
) -> None:
    """Run the whole comparison for one domain: base eval, expert data, SFT, pivots, PivotRL, E2E RL,
    evaluation of each, and a Markdown report with plots (resumable: finished stages are skipped, and a
    finished stage whose config changed stops the run until told --rerun STAGE)."""
    from pivotgym.errors import ConfigError, StageChanged
    from pivotgym.experiment import check_ids, load_experiment, run_experiment

    try:
        cfg = load_experiment(config)
        if seeds:
            cfg.seeds = parse_seeds(seeds)
        if sampler:
            cfg.sampler = sampler
        cfg.sampler_options = {**cfg.sampler_options, **parse_sampler_options(sampler_option)}
        check_ids(cfg)  # before the run folder exists
    except ConfigError as exc:  # the message names the file, the line and the field to fix
        raise CLIError(str(exc), hint=exc.hint) from None
    try:
        summary = run_experiment(cfg, out_dir=out, stages=stages.split(",") if stages else None, rerun=rerun or ())
    except (StageChanged, ConfigError) as exc:
        raise CLIError(str(exc), hint=exc.hint) from None
    if as_json:
        emit_json(summary)
        return
    if "report" in summary:
        typer.echo(f"report: {summary['report']}")
    else:  # --stages without report: the stages ran, the report was not asked for
        typer.echo(f"stages done in {summary['root']}; write the report with --stages report")


def parse_seeds(text: str) -> list[int]:
    """``"0,1,2"`` -> ``[0, 1, 2]`` (order kept, repeats dropped); anything else is a ConfigError."""
    from pivotgym.errors import ConfigError

    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ConfigError(f"--seeds: expected comma-separated integers such as 0,1,2, got {text!r}") from None
    if not values:
        raise ConfigError("--seeds: give at least one seed, e.g. --seeds 0,1,2")
    return list(dict.fromkeys(values))


def register(app: typer.Typer) -> None:
    """Add ``experiment``."""
    app.command("experiment")(experiment_cmd)
