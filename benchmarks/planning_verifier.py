"""Verifications per second of the planning functional verifier, with the per-state h* cache vs without.

Workload (the profiler's access pattern): for expert trajectories of a few planning envs, at every turn draw
K candidate actions (with repeats) from the applicable actions plus the expert's own, and verify each. The
same candidates are verified, in the same run, by a verifier with the h* cache (default: exact table for
small state spaces, else A* seeded by cached values), with the per-state cache but no table, and without any
cache (every verification searches h*(s) and h*(s') from scratch); verdicts must agree.

    .venv/bin/python benchmarks/planning_verifier.py [--k 8] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import time

import pivotgym
from pivotgym import VerifyContext
from pivotgym_planning.verifier import OptimalActionVerifier

WORKLOAD = [("planning/blocks-v0", "test", 2), ("planning/gripper-v0", "train", 1),
            ("planning/miconic-v0", "train", 2), ("planning/depot-v0", "train", 1)]


def build_workload(k: int, seed: int = 0) -> list[tuple[VerifyContext, str]]:
    rng = random.Random(seed)
    items = []
    for env_id, split, limit in WORKLOAD:
        env = pivotgym.make(env_id)
        for traj in env.expert_trajectories(split, limit=limit):
            for turn in traj.turns():
                ctx = VerifyContext(turn)
                positioned = ctx.env()
                options = [a.text for a in positioned.problem.applicable(positioned.state)]
                options.append(ctx.expert_text)
                items.extend((ctx, rng.choice(options)) for _ in range(k))
    return items


def run(verifier: OptimalActionVerifier, items: list[tuple[VerifyContext, str]]) -> tuple[float, list]:
    start = time.perf_counter()
    verdicts = [verifier.verify(ctx, text) for ctx, text in items]
    return time.perf_counter() - start, [(v.reward, v.reason) for v in verdicts]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, default=8, help="candidates per turn")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args()
    items = build_workload(args.k)
    for ctx, _ in items:  # position every env once, outside the timed region (both runs reuse them)
        ctx.env()
    cached_s, cached = run(OptimalActionVerifier(), items)
    astar_cache_s, astar_cached = run(OptimalActionVerifier(table_limit=0), items)
    plain_s, plain = run(OptimalActionVerifier(use_cache=False), items)
    assert cached == plain == astar_cached, "cached and uncached verdicts differ"
    credited = sum(r for r, _ in cached)
    result = {
        "verifications": len(items),
        "credited": int(credited),
        "with_cache_per_s": round(len(items) / cached_s, 1),
        "astar_cache_only_per_s": round(len(items) / astar_cache_s, 1),
        "without_cache_per_s": round(len(items) / plain_s, 1),
        "speedup": round(plain_s / cached_s, 2),
        "speedup_astar_cache_only": round(plain_s / astar_cache_s, 2),
        "envs": [w[0] for w in WORKLOAD],
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{result['verifications']} verifications ({result['credited']} credited) over {', '.join(result['envs'])}")
        print(f"  with h* cache:    {result['with_cache_per_s']:>9.1f} verifications/s")
        print(f"  with h* cache, no exhaustive table (A* per new state): "
              f"{result['astar_cache_only_per_s']:.1f} verifications/s")
        print(f"  without h* cache: {result['without_cache_per_s']:>9.1f} verifications/s")
        print(f"  speedup: {result['speedup']}x (A* cache only: {result['speedup_astar_cache_only']}x)")


if __name__ == "__main__":
    main()
