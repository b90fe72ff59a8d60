"""``pivotgym train {pivot,sft,e2e} --config cfg.yaml``: the trainers from the command line.

Options given on the command line override the config file (``--steps``, ``--output-dir``, ``--model``,
``--resume``, ``--sampler``; ``--sampler-option KEY=VALUE`` adds to ``sampler_options``). Runs under
``accelerate launch`` / ``torchrun`` unchanged. Prints the run summary (counters, eval curve) at the end;
``--json`` prints it as JSON.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from pivotgym.cli.eval import SAMPLER_OPTION_HELP, parse_sampler_options
from pivotgym.cli.output import CLIError, emit_json

TRAINERS = {
    "pivot": "PivotRL: GRPO on the pivot states of a pivot set.",
    "sft": "Supervised fine-tuning on expert trajectories (assistant tokens only).",
    "e2e": "End-to-end multi-turn RL through env episodes with outcome reward.",
}


#: config fields that name input files, and the command that writes each
DATA_FIELDS = {"pivots": "pivotgym select", "trajectories": "pivotgym expert", "profiles": "pivotgym profile"}


def run_training(
    kind: str, config_path: Path, sampler_options: dict[str, Any] | None = None, **overrides: Any
) -> dict[str, Any]:
    """Load the config for ``kind``, check its inputs, build its trainer and fit; returns the summary.
    ``sampler_options`` are added over the file's ``sampler_options``."""
    from pivotgym.train import trainer_class
    from pivotgym.train.config import load_config

    config = load_config(config_path, kind, **overrides)
    if sampler_options:
        config = config.replace(sampler_options={**config.sampler_options, **sampler_options})
    check_inputs(config, config_path)  # before the trainer loads a model: a typo costs no minutes
    return trainer_class(kind)(config).fit()


def check_inputs(config: Any, config_path: Path) -> None:
    """Fail fast on what the config names but this machine lacks: a data file (``pivots``, ``trajectories``,
    ``profiles``) or an env id (``env_id``). The error is ``FILE:LINE: field: what is wrong``."""
    from pivotgym.config import read_yaml
    from pivotgym.errors import RegistryError
    from pivotgym.registry import get_registry

    problem: tuple[str, str, str | None] | None = None
    for name, command in DATA_FIELDS.items():
        value = getattr(config, name, None)
        if value and not Path(value).is_file():
            what = "is a folder, not a file" if Path(value).is_dir() else "does not exist"
            problem = (name, f"{value} {what}", f"check the path; `{command}` writes this file")
            break
    env_id = getattr(config, "env_id", None)
    if problem is None and env_id:
        try:
            get_registry().env_spec(env_id)
        except RegistryError as exc:
            problem = ("env_id", str(exc), None)
    if problem is None:
        problem = _sampler_problem(config.sampler)
    if problem is not None:
        field, message, hint = problem
        _data, source = read_yaml(config_path)
        raise source.error([field], message, hint=hint)


def _sampler_problem(name: str) -> tuple[str, str, str | None] | None:
    """Why the trainer could not sample with sampler ``name`` (unknown, or unable to follow the policy)."""
    from pivotgym.errors import RegistryError
    from pivotgym.registry import get_registry, resolve
    from pivotgym.train.policy_sampler import follows_weights

    registry = get_registry()
    if name not in registry.samplers:
        try:
            registry.make_sampler(name)  # RegistryError: names the sampler and what is registered
        except RegistryError as exc:
            return ("sampler", str(exc), None)
    if not follows_weights(name, resolve(registry.samplers[name].factory)):
        return ("sampler", f"{name!r} cannot be given the policy's weights as training changes them", "use hf or vllm")
    return None


def register(app: typer.Typer) -> None:
    """Add the ``train`` group: one command per trainer."""
    train_app = typer.Typer(help="Train a policy: pivot (PivotRL), sft, or e2e (end-to-end RL).", no_args_is_help=True)

    def make_command(kind: str) -> None:
        @train_app.command(kind, help=TRAINERS[kind])
        def command(
            config: Path = typer.Option(
                ..., "--config", "-c", help="YAML config (keys = the trainer's Config fields)."
            ),
            steps: int | None = typer.Option(None, help="Override `steps`."),
            output_dir: str | None = typer.Option(None, help="Override `output_dir`."),
            model: str | None = typer.Option(None, help="Override `model` (alias or local folder)."),
            resume: str | None = typer.Option(None, help="auto | never | a checkpoint folder."),
            sampler: str | None = typer.Option(None, help="Override `sampler`: hf (the live policy) or vllm."),
            sampler_option: list[str] = typer.Option([], "--sampler-option", help=SAMPLER_OPTION_HELP),
            as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
        ) -> None:
            from pivotgym.train.config import ConfigError

            try:
                summary = run_training(
                    kind,
                    config,
                    parse_sampler_options(sampler_option),
                    steps=steps,
                    output_dir=output_dir,
                    model=model,
                    resume=resume,
                    sampler=sampler,
                )
            except ConfigError as exc:
                raise CLIError(str(exc), hint=exc.hint) from None  # one line: the message names file and field
            if as_json:
                emit_json(summary)
                return
            counters = summary["counters"]
            final = summary.get("final_eval") or {}
            typer.echo(
                f"{kind}: {summary['steps']} steps in {counters['wall_seconds']:.1f}s -> {summary['output_dir']}"
            )
            typer.echo(
                f"  turns: {counters['rollout_turns']} trained, {counters['filtered_turns']} filtered, "
                f"{counters['profiling_turns']} profiling (total {counters['total_turns']})"
            )
            typer.echo(f"  tokens: {counters['tokens_generated']} generated, {counters['tokens_trained']} trained")
            typer.echo(
                "  seconds: "
                + ", ".join(
                    f"{p} {counters['seconds_' + p]:.1f}"
                    for p in ("generation", "verification", "fwd_bwd", "eval", "other")
                )
            )
            if summary.get("final_model"):
                typer.echo(f"  model: {summary['final_model']}  (load it with `pivotgym eval --model PATH`)")
            if final:
                typer.echo(f"  eval score: {final.get('score'):.4f} at step {final.get('step')}")

    for kind in TRAINERS:
        make_command(kind)
    app.add_typer(train_app, name="train")
