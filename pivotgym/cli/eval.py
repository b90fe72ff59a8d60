"""``pivotgym suites``, ``pivotgym eval`` and ``pivotgym compare``: score models on evaluation suites."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import typer

from pivotgym.cli.checks import check_suite
from pivotgym.cli.output import CLIError, emit_json, table

SAMPLER_OPTION_HELP = (
    "KEY=VALUE passed to the sampler backend's constructor (repeatable; VALUE read as YAML), e.g. for vllm "
    "dtype=float32, max_model_len=4096, gpu_memory_utilization=0.3; the config key is sampler_options."
)


def suites_cmd(as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """List registered evaluation suites and their members."""
    from pivotgym.registry import get_registry

    suites = sorted(get_registry().suites.values(), key=lambda s: s.name)
    if as_json:
        emit_json([s.to_dict() for s in suites])
        return
    rows = [
        [
            s.name,
            s.plugin,
            str(sum(r == "in_domain" for r in s.members.values())),
            str(sum(r == "ood" for r in s.members.values())),
            s.description[:70],
        ]
        for s in suites
    ]
    typer.echo(table(rows, ["suite", "plugin", "in-domain", "ood", "description"]))


def eval_cmd(
    suite: str = typer.Option(..., "--suite", help="Suite name (`pivotgym suites` lists them)."),
    model: str = typer.Option("smollm2-135m", help="Bundled alias, local model folder, or hub id."),
    out: Path = typer.Option(..., help="Output JSON (items are appended to OUT.items.jsonl; reruns resume)."),
    limit: int | None = typer.Option(None, help="At most N tasks per member."),
    member: list[str] = typer.Option([], "--member", help="Evaluate only this member (repeatable)."),
    max_new_tokens: int | None = typer.Option(None, help="Generation cap (default: per env)."),
    batch_size: int = typer.Option(8, help="Prompts generated together."),
    seed: int = typer.Option(0, help="Sampling seed (generation is greedy; recorded in the result)."),
    sampler: str = typer.Option("hf", "--sampler", help="Sampler backend (`pivotgym samplers` lists them)."),
    sampler_option: list[str] = typer.Option([], "--sampler-option", help=SAMPLER_OPTION_HELP),
    device: str | None = typer.Option(None, help="cpu or cuda (default: cuda when present)."),
    transcripts: bool = typer.Option(
        True,
        "--transcripts/--no-transcripts",
        help="Record each episode's messages and per-turn rewards in OUT.items.jsonl.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the result JSON."),
) -> None:
    """Score a model on every member of a suite: value, n and 95% CI per env, in-domain/OOD averages."""
    check_suite(suite, member or None)  # before the model loads: a typo costs no minutes
    backend = cli_sampler(
        sampler, model, parse_sampler_options(sampler_option), device=device, max_batch_size=max(batch_size, 16)
    )
    from pivotgym.eval import evaluate_suite

    result = evaluate_suite(
        suite,
        backend,
        out,
        limit=limit,
        members=member or None,
        transcripts=transcripts,
        max_new_tokens=max_new_tokens,
        seed=seed,
        batch_size=batch_size,
        model=model,
    )
    if as_json:
        emit_json(result)
        return
    typer.echo(format_result(result))
    typer.echo(f"wrote {out}")


#: backends that load the model's weights in-process: an unknown model name fails before they import torch
LOCAL_MODEL_SAMPLERS = ("hf", "vllm")


def parse_sampler_options(values: Sequence[str]) -> dict[str, Any]:
    """``--sampler-option KEY=VALUE`` values as keyword arguments; each VALUE is read as a YAML scalar
    (``0.3`` a float, ``true`` a bool, ``float32`` a string), as it would be in a config's ``sampler_options``."""
    import yaml

    options: dict[str, Any] = {}
    for value in values:
        key, sep, text = value.partition("=")
        if not sep or not key.strip().isidentifier():
            raise CLIError(f"--sampler-option {value!r}: write KEY=VALUE, e.g. dtype=float32")
        try:
            options[key.strip()] = yaml.safe_load(text) if text.strip() else ""
        except yaml.YAMLError:
            options[key.strip()] = text
    return options


def cli_sampler(name: str, model: str, options: Mapping[str, Any] | None = None, **defaults: Any) -> Any:
    """:func:`pivotgym.registry.make_sampler` with command-line errors: ``options`` (``--sampler-option``) all
    go to the backend's constructor, ``defaults`` (not None) only where the constructor names them. A
    ``--device`` the backend does not take is an error, as is an option it refuses or an unknown model."""
    import inspect

    from pivotgym.registry import get_registry, make_sampler, resolve
    from pivotgym.sampling.models import ModelError, resolve_model

    registry = get_registry()
    if name not in registry.samplers:
        registry.make_sampler(name)  # RegistryError: names the sampler and what is registered
    params = inspect.signature(resolve(registry.samplers[name].factory)).parameters
    if defaults.get("device") is not None and "device" not in params:
        raise CLIError(f"sampler {name!r} takes no --device", hint="leave --device out for this backend")
    try:
        if name in LOCAL_MODEL_SAMPLERS:
            resolve_model(model)  # an unknown name fails here, before torch is even imported
        return make_sampler(name, model, options, **defaults)
    except ModelError as exc:
        raise CLIError(str(exc)) from exc  # the message says how to get the model
    except TypeError as exc:
        if not options:
            raise
        raise CLIError(f"sampler {name!r} refused a --sampler-option: {exc}") from exc


def compare_cmd(
    base: Path = typer.Argument(..., help="Suite result of the base model (from `pivotgym eval`)."),
    trained: Path = typer.Argument(..., help="Suite result of the trained model."),
    allow_mismatch: bool = typer.Option(
        False, "--allow-mismatch", help="Compare even results of different suites, metrics or items."
    ),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Per-env deltas (trained - base) with their 95% intervals and the average in-domain and OOD change.

    Refuses (exit 1) results that measured different things: another suite, or a member scored with another
    metric or on other items, unless --allow-mismatch."""
    from pivotgym.eval import compare, format_comparison, load_result

    try:
        comp = compare(load_result(base), load_result(trained), allow_mismatch=allow_mismatch)
    except ValueError as exc:  # not a suite result, or a ResultMismatch (one line, with what to do)
        raise CLIError(str(exc), hint=getattr(exc, "hint", None)) from exc
    if as_json:
        emit_json(comp)
        return
    typer.echo(format_comparison(comp))
    if comp["only_base"] or comp["only_trained"]:
        typer.echo(f"not compared (scored in one file only): {comp['only_base'] + comp['only_trained']}")


def format_result(result: dict[str, Any]) -> str:
    """A suite result as a table: value, 95% CI and parse rate (share of replies with a readable answer; `-`
    where no free-text reply is judged) per member, then the role averages."""
    rows = []
    for key, s in result["scores"].items():
        lo, hi = s["ci95"]
        parsed = s.get("parse_rate")
        rows.append(
            [
                key,
                result["role"].get(key, ""),
                s["metric"],
                f"{100 * s['value']:.1f}",
                f"[{100 * lo:.1f}, {100 * hi:.1f}]",
                "-" if parsed is None else f"{100 * parsed:.1f}",
                str(s["n"]),
            ]
        )
    for role, value in result.get("averages", {}).items():
        if value is not None:
            rows.append([f"average {role}", role, "", f"{100 * value:.1f}", "", "", ""])
    return table(rows, ["env", "role", "metric", "score %", "95% CI", "parsed %", "n"])


def register(app: typer.Typer) -> None:
    """Add ``suites``, ``eval`` and ``compare``."""
    app.command("suites")(suites_cmd)
    app.command("eval")(eval_cmd)
    app.command("compare")(compare_cmd)
