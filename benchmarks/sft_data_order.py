"""How much does SFT's result depend on the order of its data? The same SFT from the same start model, with
only the data-order seed changed, under the experiment's schedule and under alternatives.

It reuses a finished experiment run folder (its config, warm-up model, expert trajectories and curve tasks): for
each variant and each data-order seed it trains SFT from the run's RL start model (``rl_model``) and scores the
final model on the curve tasks (turn accuracy, the run's in-domain measurement). Printed per variant: the score
of each order, their mean and SD, and the mean SD of the per-task scores across orders (the per-problem effect of
data order); then each variant's SD as a ratio to the baseline variant's, measured in the same run.

    python benchmarks/sft_data_order.py runs/quickstart                     # constant vs cosine, 3 orders
    python benchmarks/sft_data_order.py runs/quickstart --orders 0,1,2,3,4,5 --variants constant,cosine,full

Variants (the run's SFT section, then):
- ``constant``: as configured (the baseline);
- ``cosine``: the same steps, batches and peak rate with a cosine decay to 0, so the last batches barely move
  the weights;
- ``full``: every trajectory in every step (full batch: no order at all) for as many steps, the same rate.

A few orders give a rough SD (its own relative standard error is about ``1 / sqrt(2 (n - 1))``: 50% at n = 3).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _smoke import skip, smoke

VARIANTS = ("constant", "cosine", "full")


def variant_section(section: dict[str, Any], variant: str, trajectories: int) -> dict[str, Any]:
    """The SFT section of ``variant`` (see the module docstring) from the run's own ``section``."""
    if variant == "constant":
        return dict(section)
    if variant == "cosine":
        return {**section, "lr_schedule": "cosine"}
    if variant == "full":
        return {**section, "trajectories_per_step": trajectories}
    raise SystemExit(f"unknown variant {variant!r}; choose from {', '.join(VARIANTS)}")


def sft_score(run: Any, section: dict[str, Any], order: int, out: Path) -> dict[str, Any]:
    """Train SFT with data-order seed ``order`` from the run's start model; its curve point on the curve tasks."""
    from pivotgym.experiment.stages import trainer_kwargs
    from pivotgym.train import SFTConfig, SFTTrainer

    seed = run.config.seeds[0]
    model = run.rl_model(seed) if run.config.rl_init == "warmup" else None
    kwargs = {**trainer_kwargs(run, section, order, out, model), "trajectories": str(run.layout.expert)}
    with SFTTrainer(SFTConfig.from_dict({**kwargs, "progress": False})) as trainer:
        trainer.fit()
        return run.curve_point(trainer.sampler)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "run", type=Path, nargs="?", default=Path("runs/quickstart"), help="a finished experiment run folder"
    )
    parser.add_argument("--orders", default="0,1,2", help="data-order seeds, comma-separated")
    parser.add_argument(
        "--variants", default="constant,cosine", help=f"of {', '.join(VARIANTS)}; the first is the baseline"
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    if smoke():
        skip("needs a finished experiment run (runs/quickstart: `make demo`) and trains SFT on its model per order")
    if not (args.run / "config.json").exists() or not (args.run / "data" / "expert.jsonl").exists():
        print(f"skipped: {args.run} holds no experiment run with expert data; run `make demo` first", file=sys.stderr)
        return 0

    from pivotgym.experiment import ExperimentConfig
    from pivotgym.experiment.run import Run
    from pivotgym.jsonl import read_trajectories

    recorded = json.loads((args.run / "config.json").read_text())
    config = ExperimentConfig(**{k: v for k, v in recorded.items() if k not in ("path", "provenance")})
    run = Run(config, args.run)
    trajectories = len(read_trajectories(run.layout.expert))
    orders = [int(o) for o in args.orders.split(",")]
    results: dict[str, dict[str, Any]] = {}
    scratch = tempfile.TemporaryDirectory(prefix="sft-order-")  # trainer output: metrics and checkpoints
    try:
        for variant in args.variants.split(","):
            section = variant_section(dict(config.sft), variant, trajectories)
            points, started = [], time.perf_counter()
            for order in orders:
                out = Path(scratch.name) / f"{variant}-o{order}"
                points.append(sft_score(run, section, order, out))
                print(f"{variant} order {order}: {100 * points[-1]['score']:.1f}", file=sys.stderr, flush=True)
            scores = [p["score"] for p in points]
            per_task = list(zip(*(p["per_task"] for p in points)))
            results[variant] = {
                "scores": scores,
                "mean": statistics.fmean(scores),
                "sd": statistics.stdev(scores) if len(scores) > 1 else 0.0,
                "per_task_sd": statistics.fmean(statistics.pstdev(t) for t in per_task) if per_task else 0.0,
                "seconds": time.perf_counter() - started,
            }
    finally:
        run.close()
        scratch.cleanup()
    baseline = results[next(iter(results))]
    for r in results.values():
        r["sd_ratio"] = r["sd"] / baseline["sd"] if baseline["sd"] else None
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    for variant, r in results.items():
        ratio = "-" if r["sd_ratio"] is None else f"{r['sd_ratio']:.2f}x"
        scores = ", ".join(f"{100 * s:.1f}" for s in r["scores"])
        print(
            f"{variant:9s} turn accuracy {scores}: mean {100 * r['mean']:.1f}, SD over orders {100 * r['sd']:.1f} "
            f"({ratio} the baseline's), per-task SD {100 * r['per_task_sd']:.1f}, {r['seconds']:.0f} s"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
