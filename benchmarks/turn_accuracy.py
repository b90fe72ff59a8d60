"""Turn accuracy over held-out expert trajectories: calls in the given order against shortest-first, one run.

    python benchmarks/turn_accuracy.py [--env planning/gripper-gen-v0] [--trajectories 40] [--json]

:func:`pivotgym.eval.turns.turn_accuracy` answers the states of a few trajectories per sampler call (about
``chunk`` states). Each call prefills the longest history of each trajectory once (the others' caches are cut
from it), left-padded to the longest in the call. Two ways over the same trajectories, same sampler:

* ``given_order``   the calls take the trajectories in the order given (how turn accuracy ran before);
* ``shortest_first`` ``turn_accuracy`` as shipped: trajectories sorted by length before they are grouped, so a
                     call holds histories of similar length.

Prints seconds per way and their ratio, and checks that both give the same per-task scores.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from _smoke import parse_args, tiny_model

from pivotgym.eval.turns import _groups, turn_accuracy
from pivotgym.execution import make_executor
from pivotgym.registry import make
from pivotgym.sampling.base import SamplingParams
from pivotgym.sampling.hf import HFSampler


def given_order(
    sampler: Any, trajectories: list[Any], params: SamplingParams, executor: Any, chunk: int
) -> list[float]:
    """Per-task scores with one ``turn_accuracy`` call per group of the given order (each call's own sort
    cannot reorder across calls, so this is the old batching)."""
    scores: list[float] = []
    for group in _groups(trajectories, chunk):
        scores += turn_accuracy(sampler, group, params, executor=executor, chunk=chunk, progress=False).per_task
    return scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--env", default="planning/gripper-gen-v0")
    parser.add_argument("--split", default="test")
    parser.add_argument("--trajectories", type=int, default=40, help="the first N successful expert plans")
    parser.add_argument("--chunk", type=int, default=32, help="states per sampler call (the experiment's default)")
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--executor", default="process", help="where verdicts run (the experiment's: process)")
    parser.add_argument("--json", action="store_true")
    args = parse_args(parser, model=tiny_model, trajectories=2, chunk=4, new_tokens=4, executor="serial")

    env = make(args.env)
    trajectories = [t for t in env.expert_trajectories(args.split) if t.reward > 0][: args.trajectories]
    sampler = HFSampler(args.model, max_batch_size=32)
    params = SamplingParams(temperature=0.0, max_new_tokens=args.new_tokens)
    executor = make_executor(args.executor, timeout=60.0)
    try:
        turn_accuracy(sampler, trajectories[:1], params, executor=executor, progress=False)  # warm workers up
        start = time.perf_counter()
        old = given_order(sampler, trajectories, params, executor, args.chunk)
        old_s = time.perf_counter() - start
        start = time.perf_counter()
        new = turn_accuracy(sampler, trajectories, params, executor=executor, chunk=args.chunk, progress=False)
        new_s = time.perf_counter() - start
    finally:
        executor.close()
    same = [round(v, 9) for v in old] == [round(v, 9) for v in new.per_task]
    result = {
        "env": args.env,
        "model": args.model,
        "trajectories": len(trajectories),
        "states": new.states,
        "given_order_s": round(old_s, 2),
        "shortest_first_s": round(new_s, 2),
        "speedup": round(old_s / new_s, 3),
        "same_scores": same,
        "score": round(new.score, 4),
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{args.env}: {result['states']} states of {len(trajectories)} expert plans, {args.model}, greedy")
        print(f"  given order     {old_s:8.1f} s")
        print(f"  shortest first  {new_s:8.1f} s   {result['speedup']:.2f}x faster")
        print(f"  same per-task scores: {same} (turn accuracy {new.score:.1%})")
    if not same:
        raise SystemExit("the two orders gave different per-task scores")


if __name__ == "__main__":
    main()
