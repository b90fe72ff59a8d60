"""Likelihood scores of legal actions: one forward per state against one forward per trajectory, one run.

    python benchmarks/likelihood.py [--env planning/gripper-gen-v0] [--trajectories 40] [--json]

:func:`pivotgym.eval.likelihood.likelihood_scores` teacher-forces every legal action of every held-out expert
state. Two ways over the same states, same model:

* ``per_state``  ``action_logprobs`` for each state: its prompt runs once, its actions (x stop tokens) batched
                 on the prompt's cache (the fallback for prompts that do not chain);
* ``tree``       ``chain_logprobs`` as shipped: one forward per trajectory over its longest prompt with every
                 state's actions hung off it under a 4D mask.

Prints seconds per way and their ratio, and checks that both give the same log-probabilities.
"""

from __future__ import annotations

import argparse
import json
import math
import time

from _smoke import parse_args, tiny_model

from pivotgym.eval.floors import floors
from pivotgym.execution import make_executor
from pivotgym.registry import make
from pivotgym.sampling.action_scores import action_logprobs, action_tokens, chain_logprobs, model_parts
from pivotgym.sampling.hf import HFSampler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--env", default="planning/gripper-gen-v0")
    parser.add_argument("--split", default="test")
    parser.add_argument("--trajectories", type=int, default=40, help="the first N expert plans of the split")
    parser.add_argument("--new-tokens", type=int, default=16, help="the generation cap (as the experiment's)")
    parser.add_argument("--executor", default="process", help="where verdicts run (the experiment's: process)")
    parser.add_argument("--json", action="store_true")
    args = parse_args(parser, model=tiny_model, trajectories=2, new_tokens=4, executor="serial")

    env = make(args.env)
    with make_executor(args.executor, timeout=60.0) as executor:
        measured = floors(env, args.split, args.trajectories, executor=executor, progress=False)
    sampler = HFSampler(args.model, max_batch_size=32)
    model, tokenizer, stops = model_parts(sampler)
    chains: dict[str, tuple[list[list[int]], list[list[list[int]]]]] = {}
    for s in (s for s in measured.states if s.judged):
        messages = env.prompt_messages(s.state.turn.prefix)
        prompt = sampler.encode(messages)
        prompts, actions = chains.setdefault(s.trajectory_id, ([], []))
        prompts.append(prompt)
        actions.append([action_tokens(tokenizer, messages, prompt, a, stops)[0] for a in s.legal])
    states = sum(len(p) for p, _ in chains.values())
    pairs = sum(len(a) for _, acts in chains.values() for a in acts)

    start = time.perf_counter()
    alone = [
        action_logprobs(model, p, a, stops, args.new_tokens) for ps, acts in chains.values() for p, a in zip(ps, acts)
    ]
    per_state_s = time.perf_counter() - start
    start = time.perf_counter()
    tree = [row for ps, acts in chains.values() for row in chain_logprobs(model, ps, acts, stops, args.new_tokens)]
    tree_s = time.perf_counter() - start

    gaps = [0.0 if a == b == -math.inf else abs(a - b) for want, got in zip(alone, tree) for a, b in zip(want, got)]
    worst = max(gaps, default=0.0)
    result = {
        "env": args.env,
        "model": args.model,
        "trajectories": len(chains),
        "states": states,
        "actions": pairs,
        "per_state_s": round(per_state_s, 2),
        "tree_s": round(tree_s, 2),
        "speedup": round(per_state_s / tree_s, 3),
        "max_abs_logp_gap": worst,
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{args.env}: {pairs} legal actions at {states} states of {len(chains)} expert plans, {args.model}")
        print(f"  one forward per state       {per_state_s:8.1f} s")
        print(f"  one forward per trajectory  {tree_s:8.1f} s   {result['speedup']:.2f}x faster")
        print(f"  largest |log p| gap between the two: {worst:.2e}")
    if not worst < 1e-3:
        raise SystemExit(f"the two ways disagree: largest log-probability gap {worst:.3g}")


if __name__ == "__main__":
    main()
