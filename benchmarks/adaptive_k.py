"""Adaptive K against fixed K: the same pivots, fewer samples (simulated sample streams, exact decision rules).

Each simulated state has a per-sample pass rate p and one Bernoulli(p) reward stream of length K. Fixed K
reads all K rewards and calls the state a pivot when they are mixed and their mean is below λ. Adaptive K
(:class:`pivotgym.pivot.AdaptiveK`, the profiler's own rule object, with its unanimity run derived from the
stated bound) reads the *same* stream in blocks and stops by its rules. Printed, per K, in one run:

* ``agreement`` - of the states fixed K calls pivots, the share adaptive K also calls pivots (goal >= 95%);
* ``extra``     - adaptive pivots that fixed K does not call (0: the certain rules never disagree);
* ``samples``   - total samples drawn, and the ratio fixed / adaptive (how many times fewer samples);
* the share of states that are pivots, and the rule's bound (miss probability <= delta for p >= p_min).

Pass rates: ``--rates mixture`` (default) draws a realistic profile: a share of states the reference never
solves (p = 0) and always solves (p = 1), the rest spread with most mass at low pass rates (Beta(0.6, 1.2)),
which puts ~70% of turns uninformative at K=8, as the paper reports. ``--rates FILE`` uses the pass rates
(``mean``) of real profile rows from ``pivotgym profile`` instead.

    python benchmarks/adaptive_k.py                       # K = 8 and 16, 20,000 states each
    python benchmarks/adaptive_k.py --rates runs/x/data/profiles-functional-s0.jsonl --k 16
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _smoke import goal_met, parse_args

from pivotgym.pivot import AdaptiveK


def pass_rates(source: str, n: int, rng: random.Random, zero: float, one: float) -> list[float]:
    """``n`` pass rates: the realistic mixture, or drawn (with replacement) from a profile file's means."""
    if source != "mixture":
        rows = [json.loads(line) for line in Path(source).read_text().splitlines() if line.strip()]
        means = [float(r["mean"]) for r in rows]
        if not means:
            raise SystemExit(f"{source} holds no profile rows")
        return [rng.choice(means) for _ in range(n)]
    out = []
    for _ in range(n):
        u = rng.random()
        out.append(0.0 if u < zero else 1.0 if u < zero + one else rng.betavariate(0.6, 1.2))
    return out


def is_pivot(rewards: list[float], max_mean: float) -> bool:
    return bool(rewards) and max(rewards) > min(rewards) and sum(rewards) / len(rewards) < max_mean


def adaptive_read(stream: list[float], rule: AdaptiveK, k: int) -> list[float]:
    """The prefix of ``stream`` adaptive K reads: blocks of ``rule.block`` until a rule stops it."""
    n = 0
    while n < k:
        n = min(k, n + rule.block)
        if rule.stop_reason(stream[:n], k) is not None:
            break
    return stream[:n]


def run(k: int, rates: list[float], rule: AdaptiveK, rng: random.Random) -> dict[str, float]:
    fixed_pivots = both = extra = 0
    fixed_samples = adaptive_samples = 0
    for p in rates:
        stream = [1.0 if rng.random() < p else 0.0 for _ in range(k)]
        read = adaptive_read(stream, rule, k)
        fixed, adaptive = is_pivot(stream, rule.max_mean), is_pivot(read, rule.max_mean)
        fixed_pivots += fixed
        both += fixed and adaptive
        extra += adaptive and not fixed
        fixed_samples += k
        adaptive_samples += len(read)
    m = rule.unanimous_after(k)
    return {
        "k": k,
        "states": len(rates),
        "fixed_pivots": fixed_pivots,
        "pivot_share": fixed_pivots / len(rates),
        "agreement": both / max(1, fixed_pivots),
        "extra": extra,
        "fixed_samples": fixed_samples,
        "adaptive_samples": adaptive_samples,
        "ratio": fixed_samples / max(1, adaptive_samples),
        "min_unanimous": m,
        "miss_bound": rule.miss_bound(m, k) if m else 0.0,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--k", type=int, action="append", help="K values (default: 8 and 16)")
    parser.add_argument("--states", type=int, default=20000)
    parser.add_argument("--rates", default="mixture", help="'mixture' or a profile JSONL file")
    parser.add_argument("--zero", type=float, default=0.45, help="mixture: share of never-solved states")
    parser.add_argument("--one", type=float, default=0.15, help="mixture: share of always-solved states")
    parser.add_argument("--max-mean", type=float, default=0.6)
    parser.add_argument("--min-pass-rate", type=float, default=0.1)
    parser.add_argument("--delta", type=float, default=0.05)
    parser.add_argument("--block", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parse_args(parser, states=500)
    rule = AdaptiveK(max_mean=args.max_mean, min_pass_rate=args.min_pass_rate, delta=args.delta, block=args.block)
    rng = random.Random(args.seed)
    results = []
    for k in args.k or [8, 16]:
        rates = pass_rates(args.rates, args.states, rng, args.zero, args.one)
        results.append(run(k, rates, rule, rng))
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(
        f"adaptive vs fixed K on the same streams: rates={args.rates}, λ={args.max_mean}, "
        f"p_min={args.min_pass_rate}, δ={args.delta}, block={args.block}, seed={args.seed}"
    )
    print(
        f"{'K':>3} {'states':>7} {'pivots':>7} {'agree':>7} {'extra':>5} {'m':>3} {'bound':>6} "
        f"{'fixed samples':>13} {'adaptive':>9} {'fixed/adaptive':>14}"
    )
    for r in results:
        print(
            f"{r['k']:>3} {r['states']:>7} {r['pivot_share']:>7.1%} {r['agreement']:>7.2%} {r['extra']:>5} "
            f"{str(r['min_unanimous'] or '-'):>3} {r['miss_bound']:>6.3f} {r['fixed_samples']:>13} "
            f"{r['adaptive_samples']:>9} {r['ratio']:>13.2f}x"
        )
    worst = min(r["agreement"] for r in results)
    print(f"agreement on fixed-K pivots: worst {worst:.2%} (goal >= 95%)")
    return 0 if goal_met(worst >= 0.95, "agreement >= 95%") else 1


if __name__ == "__main__":
    raise SystemExit(main())
