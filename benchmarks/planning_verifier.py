"""The planning verifier on large problems: exact h* table (new) vs the old per-state A* search, same run.

Workload: for each problem below, the states of the first ``--turns`` steps of an optimal plan, and at
each state every applicable action as a candidate (what the profiler asks when a policy samples widely).
Both verifiers judge the same candidates in this process:

* **new**: ``OptimalActionVerifier()`` - A* first; when it needs more than 5,000 expansions, the exact h*
  table (bit-packed states, symmetry reduction, one breadth-first pass; its build time is included), then
  table look-ups (``[]`` in the table column: A* sufficed, no table was built);
* **old**: ``OptimalActionVerifier(table_limit=0)`` - A* with the goal-count heuristic and a 100k-expansion
  budget per query, caching solved plans (what the verifier did beyond 200k reachable states).

Time is wall clock without tracing; peak memory is ``tracemalloc``'s peak over a second, traced pass (numpy
buffers included). The old search gets at most ``--old-seconds`` per problem (it exhausts its budget on the
large problems, so it would run for many minutes); its time per verification is reported over what it did.
Verdicts of the two must agree wherever the old one decided.

    .venv/bin/python benchmarks/planning_verifier.py [--turns 3] [--old-seconds 60] [--json]
"""

from __future__ import annotations

import argparse
import gc
import json
import time
import tracemalloc

from _smoke import parse_args

from pivotgym import VerifyContext
from pivotgym.types import Trajectory, message
from pivotgym_planning.env import PlanningEnv
from pivotgym_planning.verifier import OptimalActionVerifier

#: (env family, task id, reachable states without symmetry reduction, for the record)
PROBLEMS = [
    ("gripper", "gripper_test/prob06", "~2.0M (14 balls: 2 x (2^14 + 28 x 2^13 + 182 x 2^12))"),
    ("gripper", "gripper/prob07", "~10.1M (16 balls)"),
    ("logistics", "manylogistics/problem14", "-"),
    ("blocks", "blocks/problem9", "-"),
]
#: smoke mode: one small problem whose verification still builds an h* table
TOY_PROBLEMS = [("gripper", "gripper/prob03", "-")]


def candidates(family: str, task_id: str, turns: int) -> list[tuple[VerifyContext, str]]:
    """(context, candidate) for every applicable action at the first ``turns`` states of an optimal plan."""
    env = PlanningEnv(family)
    task = next(t for split in env.splits for t in env.tasks(split) if t.id == task_id)
    problem = env.problem_for(task)
    plan = problem.search_task().exact_table(problem.init, 1_000_000).plan(problem.init)
    messages = env.reset(options={"task_id": task.id})[0]
    items = []
    for i in range(min(turns, len(plan))):
        traj = Trajectory(
            id=f"bench-{task_id}",
            env_id=f"planning/{family}-v0",
            task_id=task.id,
            messages=[*messages, message("assistant", plan[i])],
        )
        ctx = VerifyContext(traj.turn(i))
        positioned = ctx.env()
        items.extend((ctx, a.text) for a in positioned.problem.applicable(positioned.state))
        obs = env.step(plan[i])[0]
        messages = [*messages, message("assistant", plan[i]), *obs]
    return items


def clear_tables(items: list[tuple[VerifyContext, str]]) -> None:
    """Drop the per-problem h* tables cached on the search tasks, so each method starts cold."""
    for ctx, _ in items[:1]:
        ctx.env().problem.search_task()._tables.clear()


def run(make, items, seconds: float | None, trace: bool) -> dict:
    clear_tables(items)
    gc.collect()
    verifier = make()
    if trace:
        tracemalloc.start()
    start = time.perf_counter()
    verdicts = []
    for ctx, text in items:
        verdicts.append(verifier.verify(ctx, text))
        if seconds is not None and time.perf_counter() - start > seconds:
            break
    elapsed = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1] if trace else 0
    if trace:
        tracemalloc.stop()
    tables = items[0][0].env().problem.search_task()._tables.values()
    return {
        "seconds": elapsed,
        "verdicts": verdicts,
        "peak_mb": peak / 2**20,
        "table_states": [t.stats.states for t in tables if t.complete],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=3, help="plan steps whose states are verified")
    parser.add_argument("--old-seconds", type=float, default=60.0, help="time cap of the old search per problem")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(problems=PROBLEMS)
    args = parse_args(parser, turns=1, old_seconds=0.5, problems=TOY_PROBLEMS)
    rows = []
    for family, task_id, raw_states in args.problems:
        items = candidates(family, task_id, args.turns)
        for ctx, _ in items:
            ctx.env()  # position every env once, outside the timed region
        new = run(OptimalActionVerifier, items, None, trace=False)
        new_mem = run(OptimalActionVerifier, items, None, trace=True)
        old = run(lambda: OptimalActionVerifier(table_limit=0), items, args.old_seconds, trace=False)
        old_mem = run(
            lambda: OptimalActionVerifier(table_limit=0), items[: len(old["verdicts"])], args.old_seconds, trace=True
        )
        for a, b in zip(new["verdicts"], old["verdicts"]):
            if not b.components.get("budget_exhausted"):
                assert a.reward == b.reward, (task_id, a.reason, b.reason)
        n_old = len(old["verdicts"])
        per_new, per_old = new["seconds"] / len(items), old["seconds"] / max(1, n_old)
        rows.append(
            {
                "task": task_id,
                "reachable_states": raw_states,
                "candidates": len(items),
                "new_seconds": round(new["seconds"], 3),
                "new_per_verification_ms": round(1000 * per_new, 2),
                "new_peak_mb": round(new_mem["peak_mb"], 1),
                "new_budget_exhausted": sum(bool(v.components.get("budget_exhausted")) for v in new["verdicts"]),
                "new_credited": sum(v.reward == 1.0 for v in new["verdicts"]),
                "old_verified": n_old,
                "old_seconds": round(old["seconds"], 3),
                "old_per_verification_ms": round(1000 * per_old, 2),
                "old_peak_mb": round(old_mem["peak_mb"], 1),
                "old_budget_exhausted": sum(bool(v.components.get("budget_exhausted")) for v in old["verdicts"]),
                "speedup_per_verification": round(per_old / per_new, 1) if per_new else None,
                "table_states": new["table_states"],
            }
        )
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    for r in rows:
        print(
            f"{r['task']} (reachable states {r['reachable_states']}), {r['candidates']} candidates; "
            f"table of {r['table_states']} canonical states"
        )
        print(
            f"  new: {r['new_seconds']:8.2f} s total, {r['new_per_verification_ms']:9.2f} ms/verification, "
            f"peak {r['new_peak_mb']:7.1f} MB, budget_exhausted {r['new_budget_exhausted']}, "
            f"credited {r['new_credited']}"
        )
        print(
            f"  old: {r['old_seconds']:8.2f} s for {r['old_verified']} verifications, "
            f"{r['old_per_verification_ms']:9.2f} ms/verification, peak {r['old_peak_mb']:7.1f} MB, "
            f"budget_exhausted {r['old_budget_exhausted']}"
        )
        print(f"  speedup per verification: {r['speedup_per_verification']}x")


if __name__ == "__main__":
    main()
