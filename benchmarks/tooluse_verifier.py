"""Verifications per second of the tool-use verifier's structural and execution layers.

Baseline, measured in the same run: the core's exact-match verifier on the same candidates. Structural:
single-turn BFCL turns (simple/multiple/parallel) against BFCL's acceptable answers. Execution: multi-turn
turns verified with ``execute="always"`` (candidate and expert calls run on copies of the simulators at that
turn). Prints ratios against the baseline and, with ``--json``, one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("PIVOTGYM_LOAD_PLUGINS", "tooluse")

import pivotgym  # noqa: E402
from pivotgym.verify import ExactMatchVerifier, VerifyContext  # noqa: E402
from pivotgym_tooluse.verifier import ToolCallVerifier  # noqa: E402


def contexts(env_id: str, n_traj: int) -> list[tuple[VerifyContext, str]]:
    env = pivotgym.make(env_id)
    out = []
    for traj in env.expert_trajectories("train", limit=n_traj):
        for turn in traj.turns():
            ctx = VerifyContext(turn, env_factory=lambda: env)
            out.append((ctx, ctx.expert_text))
    return out


def rate(verifier, items, repeat: int) -> tuple[float, float]:
    for ctx, text in items[:5]:  # warm caches (env positioning happens once per context)
        verifier.verify(ctx, text)
    start, n, credited = time.perf_counter(), 0, 0
    for _ in range(repeat):
        for ctx, text in items:
            credited += verifier.verify(ctx, text).reward
            n += 1
    elapsed = time.perf_counter() - start
    return n / elapsed, credited / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    single = [item for env_id in ("tooluse/bfcl-simple-v0", "tooluse/bfcl-multiple-v0", "tooluse/bfcl-parallel-v0")
              for item in contexts(env_id, 100)]
    multi = [item for item in contexts("tooluse/bfcl-multi-turn-v0", 20)]
    multi_calls = [item for item in multi if item[0].turn.expert.get("tool_calls")]
    for ctx, _ in multi:  # position every context once so both verifiers time only the verification
        ctx.env()
    exact = ExactMatchVerifier()
    results = {}
    base_s, _ = rate(exact, single, 20)
    struct_s, ok_s = rate(ToolCallVerifier(), single, 20)
    base_m, _ = rate(exact, multi_calls, 20)
    exec_m, ok_m = rate(ToolCallVerifier(execute="always"), multi_calls, 20)
    results = {
        "structural": {"verifications_per_s": round(struct_s), "baseline_exact_per_s": round(base_s),
                       "ratio_vs_exact": round(struct_s / base_s, 3), "n": len(single), "credited": ok_s},
        "execution": {"verifications_per_s": round(exec_m), "baseline_exact_per_s": round(base_m),
                      "ratio_vs_exact": round(exec_m / base_m, 3), "n": len(multi_calls), "credited": ok_m},
    }
    if args.json:
        print(json.dumps(results, indent=2))
        return
    for layer, r in results.items():
        print(f"{layer:10s} {r['verifications_per_s']:>8,d} verifications/s  (exact-match baseline "
              f"{r['baseline_exact_per_s']:,d}/s, ratio {r['ratio_vs_exact']:.3f}x, n={r['n']}, credited {r['credited']:.0%})")


if __name__ == "__main__":
    main()
