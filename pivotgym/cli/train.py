"""``pivotgym train {pivot,sft,e2e} --config cfg.yaml``: the trainers from the command line.

Options given on the command line override the config file (``--steps``, ``--output-dir``, ``--model``,
``--resume``). Runs under ``accelerate launch`` / ``torchrun`` unchanged. Prints the run summary (counters,
eval curve) at the end; ``--json`` prints it as JSON.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from pivotgym.cli.output import CLIError, emit_json

TRAINERS = {
    "pivot": "PivotRL: GRPO on the pivot states of a pivot set.",
    "sft": "Supervised fine-tuning on expert trajectories (assistant tokens only).",
    "e2e": "End-to-end multi-turn RL through env episodes with outcome reward.",
}


def run_training(kind: str, config_path: Path, **overrides: Any) -> dict[str, Any]:
    """Load the config for ``kind``, build its trainer and fit; returns the summary."""
    from pivotgym.train import trainer_class
    from pivotgym.train.config import load_config

    config = load_config(config_path, kind, **overrides)
    return trainer_class(kind)(config).fit()


def register(app: typer.Typer) -> None:
    """Add the ``train`` group: one command per trainer."""
    train_app = typer.Typer(help="Train a policy: pivot (PivotRL), sft, or e2e (end-to-end RL).",
                            no_args_is_help=True)

    def make_command(kind: str) -> None:
        @train_app.command(kind, help=TRAINERS[kind])
        def command(
            config: Path = typer.Option(..., "--config", "-c", help="YAML config (keys = the trainer's Config fields)."),
            steps: Optional[int] = typer.Option(None, help="Override `steps`."),
            output_dir: Optional[str] = typer.Option(None, help="Override `output_dir`."),
            model: Optional[str] = typer.Option(None, help="Override `model` (alias or local folder)."),
            resume: Optional[str] = typer.Option(None, help="auto | never | a checkpoint folder."),
            as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
        ) -> None:
            from pivotgym.train.config import ConfigError

            try:
                summary = run_training(kind, config, steps=steps, output_dir=output_dir, model=model, resume=resume)
            except ConfigError as exc:
                raise CLIError(str(exc)) from None  # one line: the message names the file and the field
            if as_json:
                emit_json(summary)
                return
            counters = summary["counters"]
            final = summary.get("final_eval") or {}
            typer.echo(f"{kind}: {summary['steps']} steps in {counters['wall_seconds']:.1f}s -> {summary['output_dir']}")
            typer.echo(f"  turns: {counters['rollout_turns']} trained, {counters['filtered_turns']} filtered, "
                       f"{counters['profiling_turns']} profiling (total {counters['total_turns']})")
            typer.echo(f"  tokens: {counters['tokens_generated']} generated, {counters['tokens_trained']} trained")
            typer.echo("  seconds: " + ", ".join(f"{p} {counters['seconds_' + p]:.1f}" for p in
                                                 ("generation", "verification", "fwd_bwd", "eval", "other")))
            if summary.get("final_model"):
                typer.echo(f"  model: {summary['final_model']}  (load it with `pivotgym eval --model PATH`)")
            if final:
                typer.echo(f"  eval score: {final.get('score'):.4f} at step {final.get('step')}")

    for kind in TRAINERS:
        make_command(kind)
    app.add_typer(train_app, name="train")
