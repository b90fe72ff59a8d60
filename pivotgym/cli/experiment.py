"""``pivotgym experiment CONFIG``: the whole comparison for one domain, from one YAML file."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from pivotgym.cli.output import CLIError, emit_json


def experiment_cmd(
    config: Path = typer.Argument(..., help="Experiment YAML (see examples/configs/quickstart.yaml)."),
    out: Optional[Path] = typer.Option(None, help="Run folder (default: runs/<name>)."),
    stages: Optional[str] = typer.Option(None, help="Comma-separated stages to run (default: all)."),
    seeds: Optional[str] = typer.Option(
        None, help="Comma-separated training seeds, replacing the config's `seeds` (e.g. 0,1,2). Finished "
                   "seeds of the run folder are kept, so this adds seeds to a finished run."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary JSON."),
) -> None:
    """Run the whole comparison for one domain: base eval, expert data, SFT, pivots, PivotRL, E2E RL,
    evaluation of each, and a Markdown report with plots (resumable: finished stages are skipped)."""
    import yaml

    from pivotgym.declarative import yaml_syntax_error
    from pivotgym.experiment import ExperimentError, check_ids, load_experiment, run_experiment

    try:
        cfg = load_experiment(config)
        if seeds:
            cfg.seeds = parse_seeds(seeds)
    except yaml.YAMLError as exc:
        raise CLIError(yaml_syntax_error(config, exc)) from None
    except ExperimentError as exc:
        raise CLIError(str(exc)) from None  # the message names the file and the field to fix
    except FileNotFoundError as exc:
        raise CLIError(str(exc), hint="see examples/configs/quickstart.yaml for the format") from exc
    try:  # load_experiment already checked every value's type, naming the field
        check_ids(cfg)  # before the run folder exists
    except ExperimentError as exc:
        raise CLIError(str(exc)) from None  # the message says how to list the installed ids
    summary = run_experiment(cfg, out_dir=out, stages=stages.split(",") if stages else None)
    if as_json:
        emit_json(summary)
        return
    typer.echo(f"report: {summary['report']}")


def parse_seeds(text: str) -> list[int]:
    """``"0,1,2"`` -> ``[0, 1, 2]`` (order kept, repeats dropped); anything else is an ExperimentError."""
    from pivotgym.experiment import ExperimentError

    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ExperimentError(f"--seeds: expected comma-separated integers such as 0,1,2, got {text!r}") from None
    if not values:
        raise ExperimentError("--seeds: give at least one seed, e.g. --seeds 0,1,2")
    return list(dict.fromkeys(values))


def register(app: typer.Typer) -> None:
    """Add ``experiment``."""
    app.command("experiment")(experiment_cmd)
