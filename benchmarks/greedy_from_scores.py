"""Turn accuracy by generation against greedy answers decoded on the likelihood scoring pass, one run.

    python benchmarks/greedy_from_scores.py --model runs/study/models/warmup-s0 [--trajectories 40] [--json]

Where the env enumerates its legal actions, one forward per trajectory scores every legal action
(:func:`pivotgym.sampling.action_scores.chain_scores`: the longest history as a trunk, the actions hanging off it) and,
with ``decode=True``, goes on to decode every state's greedy answer on that forward's key/value cache instead
of prefilling the history again. Three timings over the same held-out states and model:

* ``generate``  :func:`pivotgym.eval.turns.turn_accuracy` generating every answer (the sampler's own greedy
                decoding, which already prefills each trajectory's longest history once);
* ``scores``    :func:`pivotgym.eval.likelihood.likelihood_scores` alone (p_credited, p_legal);
* ``both``      the scores with ``decode=True``, then ``turn_accuracy`` judging those answers (``answers=``).

Prints the ratios ``generate / both`` (turn accuracy alone) and ``(generate + scores) / both`` (an evaluation
with ``eval.likelihood: true``, which ran both before), and fails unless every state's reward and every
per-task score equal generation's (the two decoders can differ only where two logits tie within float
rounding). Floors are measured first and not timed (an experiment measures them once per run).
"""

from __future__ import annotations

import argparse
import json
import time

from _smoke import parse_args, tiny_model

from pivotgym.eval.floors import floors
from pivotgym.eval.likelihood import likelihood_scores
from pivotgym.eval.turns import turn_accuracy
from pivotgym.execution import make_executor
from pivotgym.registry import make
from pivotgym.sampling.base import SamplingParams
from pivotgym.sampling.hf import HFSampler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m", help="a model alias or folder (a trained one)")
    parser.add_argument("--env", default="planning/gripper-gen-v0")
    parser.add_argument("--split", default="test")
    parser.add_argument("--trajectories", type=int, default=40, help="the first N successful expert plans")
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--executor", default="process", help="where verdicts run (the experiment's: process)")
    parser.add_argument("--json", action="store_true")
    args = parse_args(parser, model=tiny_model, trajectories=2, new_tokens=4, executor="serial")

    env = make(args.env)
    trajectories = [t for t in env.expert_trajectories(args.split) if t.reward > 0][: args.trajectories]
    sampler = HFSampler(args.model, max_batch_size=32)
    params = SamplingParams(temperature=0.0, max_new_tokens=args.new_tokens)
    executor = make_executor(args.executor, timeout=60.0)
    try:
        measured = floors(env, trajectories=trajectories, executor=executor, progress=False)
        start = time.perf_counter()
        generated = turn_accuracy(sampler, trajectories, params, executor=executor, chunk=32, progress=False)
        generate_s = time.perf_counter() - start
        start = time.perf_counter()
        likelihood_scores(sampler, measured, env, cap=args.new_tokens, progress=False)
        scores_s = time.perf_counter() - start
        start = time.perf_counter()
        scores = likelihood_scores(sampler, measured, env, cap=args.new_tokens, decode=True, progress=False)
        answers = [s.greedy for s in scores.states if s.greedy is not None]
        read = turn_accuracy(
            sampler, trajectories, params, executor=executor, chunk=32, progress=False, answers=answers
        )
        both_s = time.perf_counter() - start
    finally:
        executor.close()
    wrong = sorted(
        k for k in generated.rewards.keys() | read.rewards.keys() if generated.rewards.get(k) != read.rewards.get(k)
    )
    same = [round(v, 9) for v in generated.per_task] == [round(v, 9) for v in read.per_task]
    result = {
        "env": args.env,
        "model": args.model,
        "trajectories": len(trajectories),
        "states": generated.states,
        "answered": read.answered,
        "generate_s": round(generate_s, 2),
        "scores_s": round(scores_s, 2),
        "both_s": round(both_s, 2),
        "speedup_turn_accuracy": round(generate_s / both_s, 3),
        "speedup_with_likelihood": round((generate_s + scores_s) / both_s, 3),
        "disagreements": len(wrong),
        "same_scores": same,
        "score": round(read.score, 4),
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{args.env}: {result['states']} states of {len(trajectories)} expert plans, {args.model}, greedy")
        print(f"  generate every state          {generate_s:8.1f} s")
        print(f"  likelihood scores alone        {scores_s:8.1f} s")
        print(f"  scores decoding greedy, judged {both_s:8.1f} s   ({read.answered} of {read.states} states answered)")
        print(
            f"  turn accuracy alone: {result['speedup_turn_accuracy']:.2f}x faster; with likelihood on: "
            f"{result['speedup_with_likelihood']:.2f}x faster"
        )
        print(f"  same per-task scores: {same} (turn accuracy {read.score:.1%}); disagreeing states: {len(wrong)}")
    if wrong or not same:
        raise SystemExit(f"scores and generation disagree at {len(wrong)} states: {wrong[:5]}")


if __name__ == "__main__":
    main()
