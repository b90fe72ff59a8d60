"""``pivotgym planning ...``: the planning domain's data commands, each with its own argparse options."""

from __future__ import annotations

import argparse
import json
import time

import typer

app = typer.Typer(help="The planning domain's data: generated problems and the pddlgym manifest.", no_args_is_help=True)

#: the arguments after the command go to its own parser (``--help`` included)
PASSED_ON = {"allow_extra_args": True, "ignore_unknown_options": True}


@app.command("generate", context_settings=PASSED_ON, add_help_option=False)
def generate(ctx: typer.Context) -> None:
    """Generate (and cache) planning problem splits; --stats measures them (--help for the options)."""
    generate_main(ctx.args, prog="pivotgym planning generate")


@app.command("manifest", context_settings=PASSED_ON, add_help_option=False)
def manifest(ctx: typer.Context) -> None:
    """Rebuild the problem manifest of the pddlgym families (--help for the options)."""
    from pivotgym_planning.catalog import main

    main(ctx.args, prog="pivotgym planning manifest")


def generate_main(argv: list[str] | None = None, prog: str | None = None) -> None:
    """``pivotgym planning generate``: generate (and cache) the splits of each domain, or with ``--stats``
    measure them (:func:`pivotgym_planning.stats.domain_stats`)."""
    from pivotgym_planning.generators import DOMAINS, SPLITS, cache_path, generated_splits
    from pivotgym_planning.stats import domain_stats

    parser = argparse.ArgumentParser(
        prog=prog, description="Generate (and cache) planning problem splits; --stats measures them."
    )
    parser.add_argument("domains", nargs="*", default=sorted(DOMAINS), help=f"domains ({', '.join(sorted(DOMAINS))})")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train", type=int, default=400)
    parser.add_argument("--test", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--stats", action="store_true", help="measure lengths, legal and credited actions")
    args = parser.parse_args(argv)
    for name in args.domains:
        start = time.monotonic()
        splits = generated_splits(name, args.seed, args.train, args.test, args.warmup)
        if args.stats:
            print(json.dumps(domain_stats(name, args.seed, args.train, args.test, args.warmup)))
        else:
            print(
                f"{name}: " + ", ".join(f"{len(splits[s])} {s}" for s in SPLITS) + " in "
                f"{time.monotonic() - start:.1f} s -> {cache_path(name, 'SPLIT', args.seed, 0).parent}"
            )
