"""The turns of expert trajectories as prompts: prefix-shared prefill against per-prompt prefill, in one run.

    python benchmarks/trajectory_prefill.py [--env planning/blocks-v0] [--split test] [--k 1] [--json]

Turn accuracy and profiling sample from every state of a trajectory, and state t's prompt is state t-1's
prompt plus one expert action and one observation. Three ways over the same prompts, same sampler:

* ``call_order`` batches of ``max_batch_size // k`` prompts in the order given, each prompt prefilled in full
                 (how HFSampler batched before prompts were grouped);
* ``by_length``  the same, with prompts of similar length batched together (less left-padding);
* ``shared``     ``HFSampler.sample`` as shipped: only the longest prompt of each family of prompts that
                 extend one another is prefilled; the others' caches are cut from it.

Prints seconds, prefilled tokens and the ratios, and checks that all three give the same completions.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from _smoke import parse_args, tiny_model

import pivotgym.sampling.hf as hf
from pivotgym.registry import make
from pivotgym.sampling.base import SamplingParams


def states(env_id: str, split: str, limit: int | None) -> list[Any]:
    env = make(env_id)
    return [
        env.prompt_messages(turn.prefix)
        for traj in env.expert_trajectories(split, limit=limit)
        for turn in traj.turns()
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--env", default="planning/blocks-v0")
    parser.add_argument("--split", default="test")
    parser.add_argument("--trajectories", type=int, default=None, help="at most this many (default: all)")
    parser.add_argument("--k", type=int, default=1, help="samples per state")
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--batch", type=int, default=32, help="the sampler's max_batch_size")
    parser.add_argument("--json", action="store_true")
    args = parse_args(parser, model=tiny_model, trajectories=1, new_tokens=4, batch=4)

    prompts = states(args.env, args.split, args.trajectories)
    sampler = hf.HFSampler(args.model, max_batch_size=args.batch)
    encoded = [sampler.encode(p) for p in prompts]
    params = SamplingParams(temperature=0.0 if args.k == 1 else 1.0, max_new_tokens=args.new_tokens)
    seeds = list(range(len(prompts)))
    per_group = max(1, args.batch // args.k)
    sharing = hf.prefix_hosts

    def no_sharing(items: Any) -> list[int]:
        return list(range(len(items)))

    def call_order() -> list[Any]:
        hf.prefix_hosts = no_sharing
        try:  # one call per group of the old batching: the grouping inside a call is then irrelevant
            return [
                c
                for i in range(0, len(prompts), per_group)
                for c in sampler.sample(
                    prompts[i : i + per_group], n=args.k, params=params, seeds=seeds[i : i + per_group]
                )
            ]
        finally:
            hf.prefix_hosts = sharing

    def by_length() -> list[Any]:
        hf.prefix_hosts = no_sharing
        try:
            return sampler.sample(prompts, n=args.k, params=params, seeds=seeds)
        finally:
            hf.prefix_hosts = sharing

    def shared() -> list[Any]:
        return sampler.sample(prompts, n=args.k, params=params, seeds=seeds)

    sampler.sample(prompts[:2], n=1, params=SamplingParams(temperature=0.0, max_new_tokens=2))  # warm-up
    seconds, outputs = {}, {}
    for name, fn in (("shared", shared), ("by_length", by_length), ("call_order", call_order)):
        start = time.perf_counter()
        outputs[name] = fn()
        seconds[name] = time.perf_counter() - start
        print(f"[{name}: {seconds[name]:.1f} s]", file=sys.stderr, flush=True)
    hosts = sharing(encoded)
    padded_call_order = sum(
        max(len(encoded[j]) for j in range(i, min(i + per_group, len(encoded))))
        * (min(i + per_group, len(encoded)) - i)
        for i in range(0, len(encoded), per_group)
    )
    same = {
        name: sum(a.token_ids == b.token_ids for ga, gb in zip(outputs["shared"], out) for a, b in zip(ga, gb))
        for name, out in outputs.items()
        if name != "shared"
    }
    result = {
        "env": args.env,
        "split": args.split,
        "states": len(prompts),
        "k": args.k,
        "new_tokens": args.new_tokens,
        "prompt_tokens": sum(map(len, encoded)),
        "prefilled_tokens_shared": sum(len(encoded[h]) for h in set(hosts)),
        "padded_tokens_call_order": padded_call_order,
        "seconds": {k: round(v, 2) for k, v in seconds.items()},
        "speedup_vs_by_length": round(seconds["by_length"] / seconds["shared"], 2),
        "speedup_vs_call_order": round(seconds["call_order"] / seconds["shared"], 2),
        "identical_completions": {k: f"{v}/{len(prompts) * args.k}" for k, v in same.items()},
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(
        f"{args.env} {args.split}: {len(prompts)} states, {result['prompt_tokens']} prompt tokens "
        f"({result['padded_tokens_call_order']} padded in call order, {result['prefilled_tokens_shared']} "
        f"prefilled when shared), k={args.k}, {args.new_tokens} new tokens"
    )
    for name, s in seconds.items():
        print(f"  {name:<11} {s:>7.1f} s")
    print(
        f"shared prefill vs length-sorted batches: {result['speedup_vs_by_length']:.2f}x; "
        f"vs call-order batches: {result['speedup_vs_call_order']:.2f}x; identical completions "
        + ", ".join(f"{k} {v}" for k, v in result["identical_completions"].items())
    )


if __name__ == "__main__":
    main()
