"""How much power the probability of a credited action adds over greedy turn accuracy, on a finished run.

    python scripts/likelihood_power.py runs/study --config examples/configs/study.yaml --seeds 0,1 [--json]

Greedy turn accuracy scores one action per held-out state, 0 or 1. ``eval.likelihood`` scores every legal
action's probability instead (:mod:`pivotgym.eval.likelihood`), the expected turn accuracy at temperature 1: a
continuous value per state, so a paired difference between two models should vary less from problem to
problem. This script measures that on models a run saved (``models/warmup-s<seed>``, ``models/sft-s<seed>``;
the RL stages keep no model): it scores ``p_credited`` on the run's held-out states for each, and prints the
paired t interval and the minimum detectable difference (80% power) of SFT minus warm-up on both metrics,
over the same problems and seeds, the effect in units of that difference (the two metrics differ in scale,
so their MDDs alone do not compare), and the seconds each scoring took.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from pivotgym.experiment.config import load_experiment
from pivotgym.experiment.report import _items
from pivotgym.experiment.run import Run
from pivotgym.experiment.stats import difference_text, paired_item_difference


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run", help="a run folder whose warm-up and SFT models were saved")
    parser.add_argument("--config", required=True, help="the experiment config the run was made with")
    parser.add_argument("--seeds", default="0", help="comma-separated seeds")
    parser.add_argument("--pair", default="sft,warmup", help="two saved models' tags: A,B scores A - B")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    config = load_experiment(args.config)
    run = Run(config, args.run)
    seeds = [int(s) for s in args.seeds.split(",")]
    a, b = args.pair.split(",")
    member = f"{config.env}@test"
    greedy: dict[str, list[dict[str, float]]] = {a: [], b: []}
    credited: dict[str, list[dict[str, float]]] = {a: [], b: []}
    seconds: list[float] = []
    try:
        run.floors_result()  # the legal actions and their verdicts, once
        for seed in seeds:
            for tag in (a, b):
                items = _items(run.layout, tag, seed, "in_domain", {member: "in_domain"})
                if items is None or not run.layout.model_saved(tag, seed):
                    raise SystemExit(f"{args.run}: no evaluation or no saved model of {tag} (seed {seed})")
                greedy[tag].append({k.split("::", 1)[1]: v for k, v in items.items()})
                started = time.perf_counter()
                scored: dict[str, Any] = run.likelihood_scores(run.make_sampler(run.layout.model(tag, seed)))
                seconds.append(time.perf_counter() - started)
                credited[tag].append(dict(zip(scored["task_ids"], scored["p_credited"])))
    finally:
        run.close()
    result = {
        "pair": f"{a} - {b}",
        "seeds": seeds,
        "greedy": paired_item_difference(greedy[a], greedy[b]),
        "p_credited": paired_item_difference(credited[a], credited[b]),
        "seconds_per_model": round(sum(seconds) / len(seconds), 1),
    }
    for metric in ("greedy", "p_credited"):  # the two metrics have different scales: compare effect / MDD
        result[metric]["effect_over_mdd"] = result[metric]["diff"] / result[metric]["mdd"]
    if args.json:
        print(json.dumps(result))
        return
    print(f"{a} - {b}, seeds {args.seeds}:")
    print(f"  greedy turn accuracy     {difference_text(result['greedy'], 'test tasks', verdict=False)}")
    print(f"  P(credited action)       {difference_text(result['p_credited'], 'test tasks', verdict=False)}")
    print(
        f"  effect / detectable difference: greedy {result['greedy']['effect_over_mdd']:.2f}, "
        f"likelihood {result['p_credited']['effect_over_mdd']:.2f} (the metrics differ in scale; above 1 is resolved)"
    )
    print(f"  likelihood scoring: {result['seconds_per_model']} s per model")


if __name__ == "__main__":
    main()
