"""Agreement and per-verdict latency of the tool-use functional verifier, against exact match in the same run.

**Agreement.** Labelled equivalence pairs (:mod:`pivotgym_tooluse.pairs`: BFCL items the project does not ship,
each expert call transformed in a way whose label is fixed by the transformation) are judged from expert calls
alone, through ``VerifyContext.from_turn``, by ``tooluse/functional`` and by ``tooluse/exact``. Printed: the
share of pairs where the verdict equals the label, with a 95 % Wilson interval, overall and per
transformation; the same for a second, held-out set made the same way from the shipped categories.

**Latency.** Microseconds per verdict, median over ``--repeat`` passes, for each verifier on the same pairs,
and the ratio functional / exact. Then the layers on the envs' own turns: single-turn BFCL tasks (the answers
layer) and multi-turn turns with ``execute="always"`` (the execution layer), each against exact match on the
same turns. ``--json`` prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections import Counter
from typing import Any

os.environ.setdefault("PIVOTGYM_LOAD_PLUGINS", "tooluse")

from _smoke import parse_args

import pivotgym
from pivotgym.verify import VerifyContext
from pivotgym_tooluse.pairs import context_for, generate, wilson
from pivotgym_tooluse.verifier import ToolCallExactVerifier, ToolCallVerifier


def agreement(verifier: Any, items: list[tuple[VerifyContext, str, bool, str]]) -> dict[str, Any]:
    agree, per, total = 0, Counter(), Counter()
    for ctx, text, label, kind in items:
        ok = (verifier.verify(ctx, text).reward == 1.0) == label
        agree += ok
        per[kind] += ok
        total[kind] += 1
    low, high = wilson(agree, len(items))
    return {
        "agree": agree,
        "n": len(items),
        "rate": round(agree / len(items), 4),
        "ci95": [round(low, 4), round(high, 4)],
        "per_transform": {k: f"{per[k]}/{total[k]}" for k in sorted(total)},
    }


def latency_us(verifier: Any, items: list[tuple[VerifyContext, str]], repeat: int) -> float:
    """Median over ``repeat`` passes of the mean microseconds per verdict."""
    for ctx, text in items[:20]:
        verifier.verify(ctx, text)  # warm caches (task lookup, env positioning)
    passes = []
    for _ in range(repeat):
        start = time.perf_counter()
        for ctx, text in items:
            verifier.verify(ctx, text)
        passes.append((time.perf_counter() - start) / len(items) * 1e6)
    return statistics.median(passes)


def env_turns(env_id: str, n_traj: int) -> list[tuple[VerifyContext, str]]:
    env = pivotgym.make(env_id)
    out = []
    for traj in env.expert_trajectories("train", limit=n_traj):
        for turn in traj.turns():
            ctx = VerifyContext(turn, env_factory=lambda: env)
            out.append((ctx, ctx.expert_text))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5, help="timed passes per measurement (median reported)")
    parser.add_argument("--every", type=int, default=1, help="keep every K-th pair (1: all)")
    parser.add_argument("--trajectories", type=int, default=100, help="expert trajectories per single-turn env")
    parser.add_argument("--multi-turn", type=int, default=20, help="expert trajectories of the multi-turn env")
    parser.add_argument("--json", action="store_true")
    args = parse_args(parser, repeat=1, every=20, trajectories=5, multi_turn=2)

    env = pivotgym.make("tooluse/bfcl-simple-v0")
    functional, exact = ToolCallVerifier(), ToolCallExactVerifier()
    results: dict[str, Any] = {}
    for source in ("unshipped", "shipped"):
        pairs = generate(source=source)[:: args.every]
        items = [(context_for(p, env_factory=lambda: env), p.candidate, p.label, p.transform) for p in pairs]
        f_us = latency_us(functional, [(c, t) for c, t, _, _ in items], args.repeat)
        e_us = latency_us(exact, [(c, t) for c, t, _, _ in items], args.repeat)
        results[f"pairs_{source}"] = {
            "functional": agreement(functional, items),
            "exact": agreement(exact, items),
            "us_per_verdict": {"functional": round(f_us, 1), "exact": round(e_us, 1), "ratio": round(f_us / e_us, 3)},
        }

    single = [
        it
        for env_id in ("tooluse/bfcl-simple-v0", "tooluse/bfcl-multiple-v0", "tooluse/bfcl-parallel-v0")
        for it in env_turns(env_id, args.trajectories)
    ]
    multi = [
        it for it in env_turns("tooluse/bfcl-multi-turn-v0", args.multi_turn) if it[0].turn.expert.get("tool_calls")
    ]
    for ctx, _ in multi:
        ctx.env()  # position every context once so both verifiers time only the verification
    for layer, items, verifier in (
        ("answers_layer", single, functional),
        ("execution_layer", multi, ToolCallVerifier(execute="always")),
    ):
        f_us, e_us = latency_us(verifier, items, args.repeat), latency_us(exact, items, args.repeat)
        credited = sum(verifier.verify(c, t).reward for c, t in items) / len(items)
        results[layer] = {
            "n": len(items),
            "expert_credited": credited,
            "us_per_verdict": {"functional": round(f_us, 1), "exact": round(e_us, 1), "ratio": round(f_us / e_us, 3)},
        }

    if args.json:
        print(json.dumps(results, indent=2))
        return
    for source in ("unshipped", "shipped"):
        r = results[f"pairs_{source}"]
        print(f"pairs ({source}, judged from expert calls alone), n={r['functional']['n']}")
        for name in ("functional", "exact"):
            a = r[name]
            print(
                f"  {name:10s} agreement {a['rate']:.4f}  95% CI [{a['ci95'][0]:.4f}, {a['ci95'][1]:.4f}]  "
                f"({a['agree']}/{a['n']})"
            )
        lat = r["us_per_verdict"]
        print(
            f"  latency    functional {lat['functional']:.1f} us/verdict, exact {lat['exact']:.1f} us/verdict, "
            f"ratio {lat['ratio']:.2f}x"
        )
        misses = {k: v for k, v in r["exact"]["per_transform"].items() if v.split("/")[0] != v.split("/")[1]}
        print(f"  exact match misses: {misses}")
    for layer in ("answers_layer", "execution_layer"):
        r = results[layer]
        lat = r["us_per_verdict"]
        print(
            f"{layer:15s} n={r['n']:4d}  functional {lat['functional']:.1f} us/verdict, exact {lat['exact']:.1f} "
            f"us/verdict, ratio {lat['ratio']:.2f}x  (expert credited {r['expert_credited']:.0%})"
        )


if __name__ == "__main__":
    main()
