"""CLI: ``pivotgym eval``, ``pivotgym compare``, ``pivotgym suites`` and ``pivotgym experiment``."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Optional

import typer


def register(app: typer.Typer) -> None:
    from pivotgym.cli import CLIError, _table, emit_json

    @app.command("suites")
    def suites_cmd(as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
        """List registered evaluation suites and their members."""
        from pivotgym.registry import get_registry

        suites = sorted(get_registry().suites.values(), key=lambda s: s.name)
        if as_json:
            emit_json([s.to_dict() for s in suites])
            return
        rows = [[s.name, s.plugin, str(sum(r == "in_domain" for r in s.members.values())),
                 str(sum(r == "ood" for r in s.members.values())), s.description[:70]] for s in suites]
        typer.echo(_table(rows, ["suite", "plugin", "in-domain", "ood", "description"]))

    @app.command("eval")
    def eval_cmd(
        suite: str = typer.Option(..., "--suite", help="Suite name (`pivotgym suites` lists them)."),
        model: str = typer.Option("smollm2-135m", help="Bundled alias, local model folder, or hub id."),
        out: Path = typer.Option(..., help="Output JSON (items are appended to OUT.items.jsonl; reruns resume)."),
        limit: Optional[int] = typer.Option(None, help="At most N tasks per member."),
        member: list[str] = typer.Option([], "--member", help="Evaluate only this member (repeatable)."),
        max_new_tokens: Optional[int] = typer.Option(None, help="Generation cap (default: per env)."),
        batch_size: int = typer.Option(8, help="Prompts generated together."),
        seed: int = typer.Option(0, help="Sampling seed (generation is greedy; recorded in the result)."),
        device: Optional[str] = typer.Option(None, help="cpu or cuda (default: cuda when present)."),
        as_json: bool = typer.Option(False, "--json", help="Print the result JSON."),
    ) -> None:
        """Score a model on every member of a suite: value, n and 95% CI per env, in-domain/OOD averages."""
        from pivotgym.sampling.hf import HFSampler
        from pivotgym.sampling.models import ModelError
        from pivotgym.suite import evaluate_suite

        check_suite(suite, member or None)  # before the model loads: a typo costs no minutes
        try:
            sampler = HFSampler(model, device=device, max_batch_size=max(batch_size, 16))
        except ModelError as exc:
            raise CLIError(str(exc), hint="`pivotgym model pull` prepares the bundled model") from exc
        result = evaluate_suite(suite, sampler, out, limit=limit, members=member or None,
                                max_new_tokens=max_new_tokens, seed=seed, batch_size=batch_size, model=model)
        if as_json:
            emit_json(result)
            return
        typer.echo(format_result(result))
        typer.echo(f"wrote {out}")

    @app.command("compare")
    def compare_cmd(
        base: Path = typer.Argument(..., help="Suite result of the base model (from `pivotgym eval`)."),
        trained: Path = typer.Argument(..., help="Suite result of the trained model."),
        as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
    ) -> None:
        """Per-env deltas (trained - base) and the average in-domain and OOD change."""
        from pivotgym.suite import compare, format_comparison, load_result

        try:
            comp = compare(load_result(base), load_result(trained))
        except ValueError as exc:
            raise CLIError(str(exc)) from exc
        if as_json:
            emit_json(comp)
            return
        typer.echo(format_comparison(comp))
        if comp["only_base"] or comp["only_trained"]:
            typer.echo(f"not compared (scored in one file only): {comp['only_base'] + comp['only_trained']}")

    @app.command("experiment")
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
        except (ExperimentError, FileNotFoundError) as exc:
            raise CLIError(str(exc), hint="see examples/configs/quickstart.yaml for the format") from exc
        try:
            check_experiment_types(cfg)  # a mistyped value fails now, naming the field, not stages later
            check_ids(cfg)  # before the run folder exists
        except ExperimentError as exc:
            raise CLIError(str(exc)) from None  # the message says how to list the installed ids
        summary = run_experiment(cfg, out_dir=out, stages=stages.split(",") if stages else None)
        if as_json:
            emit_json(summary)
            return
        typer.echo(f"report: {summary['report']}")


def check_experiment_types(cfg: Any) -> None:
    """Check an experiment config's values, and those of its ``sft``, ``pivot`` and ``e2e`` trainer sections,
    against the annotated field types; raises ``ExperimentError`` ``FILE: SECTION.FIELD: expected ..``."""
    import dataclasses

    from pivotgym.experiment import ExperimentError
    from pivotgym.train.config import E2EConfig, PivotConfig, SFTConfig
    from pivotgym.types import RecordError, check_fields

    where = f"{cfg.path}: " if cfg.path else ""
    try:
        check_fields(type(cfg), {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.name != "path"},
                     required=False)
    except RecordError as exc:
        raise ExperimentError(f"{where}{exc}") from None
    for section, config_class in (("sft", SFTConfig), ("pivot", PivotConfig), ("e2e", E2EConfig)):
        try:
            check_fields(config_class, getattr(cfg, section), required=False)
        except RecordError as exc:
            raise ExperimentError(f"{where}{section}.{exc}") from None


def check_suite(suite: str, members: list[str] | None = None) -> None:
    """Fail fast, before a model loads: ``suite`` must be registered, ``members`` must be among its members
    and every chosen member's env must be installed. Raises a one-line error naming the unknown id."""
    from pivotgym.cli import CLIError
    from pivotgym.registry import RegistryError, get_registry
    from pivotgym.suite import suite_members

    name, all_members = suite_members(suite)  # RegistryError: names the suite and `pivotgym suites`
    keys = [m.key for m in all_members]
    unknown = sorted(set(members or ()) - set(keys))
    if unknown:
        raise CLIError(f"suite {name!r} has no member(s) {unknown}; it has {keys}")
    registry = get_registry()
    for m in all_members:
        if members is None or m.key in members:
            try:
                registry.env_spec(m.env_id)
            except RegistryError as exc:
                raise CLIError(f"suite {name!r} member {m.key!r}: {exc}") from None


def check_envs(env_ids: Iterable[str], source: str) -> None:
    """Fail fast, before a model loads, when ``source`` (a file) names an env that is not installed."""
    from pivotgym.cli import CLIError
    from pivotgym.registry import RegistryError, get_registry

    registry = get_registry()
    for env_id in sorted(set(env_ids)):
        try:
            registry.env_spec(env_id)
        except RegistryError as exc:
            raise CLIError(f"{source}: {exc}") from None


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


def format_result(result: dict[str, Any]) -> str:
    """A suite result as a table: value and 95% CI per member, then the role averages."""
    from pivotgym.cli import _table

    rows = []
    for key, s in result["scores"].items():
        lo, hi = s["ci95"]
        rows.append([key, result["role"].get(key, ""), s["metric"], f"{100 * s['value']:.1f}",
                     f"[{100 * lo:.1f}, {100 * hi:.1f}]", str(s["n"])])
    for role, value in result.get("averages", {}).items():
        if value is not None:
            rows.append([f"average {role}", role, "", f"{100 * value:.1f}", "", ""])
    return _table(rows, ["env", "role", "metric", "score %", "95% CI", "n"])
