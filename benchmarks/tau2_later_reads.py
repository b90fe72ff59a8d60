"""What ``tau2/functional``'s ``later_reads`` option changes: at every tool-call turn of a τ² domain's expert
trajectories, each read the expert makes *later* in the task (a gold call that leaves the database as it was,
not the call of this turn nor one already made) is judged with the option off (the default) and on.

Printed: the tool-call states, the later-read candidates, how many each setting credits, and the share of
states where the option credits more (the baseline is the default setting, measured in the same run).

    .venv/bin/python benchmarks/tau2_later_reads.py [--domain airline] [--split train] [--tasks 30] [--json]
"""

from __future__ import annotations

import argparse
import json
import time

from _smoke import parse_args
from pivotgym_tau2.verifier import Tau2Verifier

import pivotgym
from pivotgym.parsing import render_calls
from pivotgym.verify import VerifyContext


def measure(domain: str, split: str, tasks: int) -> dict[str, object]:
    env = pivotgym.make(f"tau2/{domain}-v0")
    default, option = Tau2Verifier(), Tau2Verifier(later_reads=True)
    start = time.perf_counter()
    states = candidates = credited_default = credited_option = changed_states = 0
    try:
        for trajectory in env.expert_trajectories(split, limit=tasks):
            steps = env.gold(env.get_task(trajectory.task_id))["steps"]
            assistant = [m for m in trajectory.messages if m["role"] == "assistant"]
            made = 0  # gold calls made before this turn
            for n, msg in enumerate(assistant):
                calls = msg.get("tool_calls") or []
                if not calls:
                    continue
                states += 1
                context = VerifyContext.from_trajectory(trajectory, n)
                changed = False
                for step in steps[made + len(calls) :]:
                    if step["writes"]:
                        continue
                    candidate = render_calls([step["call"]])
                    off, on = default.verify(context, candidate).reward, option.verify(context, candidate).reward
                    candidates += 1
                    credited_default += int(off)
                    credited_option += int(on)
                    changed |= on != off
                changed_states += changed
                made += len(calls)
    finally:
        env.close()
    return {
        "domain": domain,
        "split": split,
        "tool_call_states": states,
        "later_read_candidates": candidates,
        "credited_default": credited_default,
        "credited_later_reads": credited_option,
        "states_where_the_option_credits_more": changed_states,
        "share_of_states": round(changed_states / states, 3) if states else None,
        "seconds": round(time.perf_counter() - start, 1),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--domain", default="airline", choices=("airline", "retail"))
    parser.add_argument("--split", default="train")
    parser.add_argument("--tasks", type=int, default=None, help="the first N tasks of the split (default: all)")
    parser.add_argument("--json", action="store_true")
    args = parse_args(parser, argv, tasks=2)
    result = measure(args.domain, args.split, args.tasks)
    if args.json:
        print(json.dumps(result))
        return
    for key, value in result.items():
        print(f"{key}: {value}")
    states = result["tool_call_states"] or 1
    print(
        f"ratio: the option credits more at {result['states_where_the_option_credits_more']}/{states} states "
        f"({result['credited_later_reads']} of {result['later_read_candidates']} later reads vs "
        f"{result['credited_default']} by default)"
    )


if __name__ == "__main__":
    main()
