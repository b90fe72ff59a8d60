"""fp32 against bf16 on this machine: a training step, a scoring forward and greedy sampling, one run.

    python benchmarks/precision.py [--trajectories 2] [--repeats 2] [--tasks 2] [--turns 3] [--json]

Whether bf16 pays on a CPU depends on the CPU: with AMX (Intel Sapphire Rapids and later) or AVX512-BF16 its
matrix products run several times faster than fp32; without them it is emulated and slower. This prints the
CPU's flags and five ratios on the bundled SmolLM2-135M and real expert conversations (gripper plans):

* ``train``   forward + backward of SFT on the conversations, fp32 against bf16 autocast (``mixed_precision:
              bf16``: fp32 weights, what a trainer does);
* ``score``   a no-grad forward of the same conversations, fp32 weights against bf16 weights (``sampler_options:
              {dtype: bfloat16}``: what evaluation and profiling load);
* ``sample``  greedy answers to each turn's prompt, fp32 against the fp32 model under bf16 autocast
              (``half_precision_sampler: false``);
* ``copy``    the same answers under bf16 autocast against a bf16 copy of the weights (what a trainer samples
              from under bf16 with ``half_precision_sampler: true``), which skips autocast's cast of every
              weight at every forward;
* ``rollout`` E2E RL's rollouts (``--tasks`` x 8 episodes of ``--turns`` turns at temperature 1, prefix reuse,
              16 new tokens a turn), under autocast against the bf16 copy, per generated token, ``--repeats``
              rounds alternated.

It also prints how far bf16 moves the SFT loss and how many greedy answers change, so the speed is read
beside what it costs.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from _smoke import parse_args, tiny_model

from pivotgym.registry import make
from pivotgym.rollout import run_episodes
from pivotgym.sampling.base import SamplingParams
from pivotgym.sampling.hf import HFSampler
from pivotgym.sampling.logprobs import sequence_logprobs
from pivotgym.train.losses import nll_sum
from pivotgym.train.policy_sampler import sampling_copy
from pivotgym.train.sft import build_examples


def _timed(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    fn()  # warm-up: first-call allocations and kernel selection
    start = time.perf_counter()
    for _ in range(repeats):
        out = fn()
    return (time.perf_counter() - start) / repeats, out


def _cpu_flags() -> list[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    return sorted({f for f in ("amx_bf16", "avx512_bf16", "avx512f") if f" {f}" in text})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--env", default="planning/gripper-gen-v0")
    parser.add_argument("--trajectories", type=int, default=2, help="the first N successful train expert plans")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--tasks", type=int, default=2, help="rollout: train tasks, 8 episodes each")
    parser.add_argument("--turns", type=int, default=3, help="rollout: turns per episode")
    parser.add_argument("--json", action="store_true")
    args = parse_args(parser, model=tiny_model, env="planning/blocks-v0", trajectories=1, repeats=1, tasks=1, turns=1)

    env = make(args.env)
    plans = [t for t in env.expert_trajectories("train") if t.reward > 0][: args.trajectories]
    fp32 = HFSampler(args.model)
    bf16 = HFSampler(args.model, dtype="bfloat16")
    mixed = HFSampler(fp32.model, fp32.tokenizer, autocast_dtype="bfloat16")
    copied = HFSampler(sampling_copy(fp32.model, torch.bfloat16), fp32.tokenizer)
    examples = [e for t in plans for e in build_examples(t, fp32.tokenizer, env, max_length=8192)]
    prompts = [
        fp32.encode(env.prompt_messages(t.messages[:i]))
        for t in plans
        for i, m in enumerate(t.messages)
        if m["role"] == "assistant"
    ]
    greedy = SamplingParams(temperature=0.0, max_new_tokens=16)

    def train(autocast: bool) -> float:
        model = fp32.model
        model.train()
        model.zero_grad(set_to_none=True)
        total = 0.0
        for e in examples:
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                logp, mask = sequence_logprobs(model, [e.input_ids], 0, [e.loss_mask[1:]])
            loss = nll_sum(logp, mask)
            loss.backward()
            total += float(loss.detach())
        model.eval()
        return total / sum(e.n_loss_tokens for e in examples)

    def score(sampler: HFSampler) -> None:
        with torch.no_grad():
            for e in examples:
                sampler.model(input_ids=torch.tensor([e.input_ids]), logits_to_keep=1)

    def sample(sampler: HFSampler) -> list[list[int]]:
        return [g[0].token_ids for g in sampler.sample(prompts, n=1, params=greedy)]

    task_ids = [t.id for t in env.tasks("train")][: args.tasks]
    sampled = SamplingParams(temperature=1.0, max_new_tokens=16)

    def rollout(sampler: HFSampler, seed: int) -> tuple[float, int]:
        """Seconds and tokens generated of one round of episodes."""
        start = time.perf_counter()
        groups = run_episodes(
            sampler,
            lambda: make(args.env),
            task_ids,
            sampled,
            n=8,
            max_turns=args.turns,
            tokens=True,
            seeds=lambda g, turn, k: seed + 1000 * g + 10 * turn + k,
        )
        return time.perf_counter() - start, sum(len(c) for g in groups for e in g for _, c in e.turns)

    result: dict[str, Any] = {"model": args.model, "cpu_flags": _cpu_flags(), "threads": torch.get_num_threads()}
    result["examples"], result["tokens"], result["prompts"] = (
        len(examples),
        sum(len(e.input_ids) for e in examples),
        len(prompts),
    )
    train_fp32, loss_fp32 = _timed(lambda: train(False), args.repeats)
    train_bf16, loss_bf16 = _timed(lambda: train(True), args.repeats)
    score_fp32, _ = _timed(lambda: score(fp32), args.repeats)
    score_bf16, _ = _timed(lambda: score(bf16), args.repeats)
    sample_fp32, answers_fp32 = _timed(lambda: sample(fp32), args.repeats)
    sample_bf16, answers_bf16 = _timed(lambda: sample(mixed), args.repeats)
    sample_copy, answers_copy = _timed(lambda: sample(copied), args.repeats)
    rollouts = {"autocast": [0.0, 0], "copy": [0.0, 0]}
    rollout(mixed, 0)  # warm-up
    rollout(copied, 0)
    for repeat in range(args.repeats):  # alternated, so a slower spell of a shared machine hits both
        for name, sampler in (("autocast", mixed), ("copy", copied)):
            seconds, tokens = rollout(sampler, 1 + repeat)
            rollouts[name][0] += seconds
            rollouts[name][1] += tokens
    (rollout_mixed, tokens_mixed), (rollout_copy, tokens_copy) = rollouts["autocast"], rollouts["copy"]
    for name, a, b in (
        ("train", train_fp32, train_bf16),
        ("score", score_fp32, score_bf16),
        ("sample", sample_fp32, sample_bf16),
    ):
        result[f"{name}_fp32_s"], result[f"{name}_bf16_s"] = round(a, 2), round(b, 2)
        result[f"{name}_speedup"] = round(a / b, 3)
    result["copy_s"], result["copy_speedup"] = round(sample_copy, 2), round(sample_bf16 / sample_copy, 3)
    result["rollout_autocast_s"], result["rollout_copy_s"] = round(rollout_mixed, 2), round(rollout_copy, 2)
    result["rollout_autocast_tokens"], result["rollout_copy_tokens"] = int(tokens_mixed), int(tokens_copy)
    # per generated token: at temperature 1 the two precisions sample slightly different episodes
    result["rollout_speedup"] = round((rollout_mixed / tokens_mixed) / (rollout_copy / tokens_copy), 3)
    result["loss_fp32"], result["loss_bf16"] = round(loss_fp32, 5), round(loss_bf16, 5)
    result["greedy_answers_changed"] = sum(a != b for a, b in zip(answers_fp32, answers_bf16))
    result["copy_answers_changed"] = sum(a != b for a, b in zip(answers_bf16, answers_copy))
    if args.json:
        print(json.dumps(result))
        return
    print(
        f"{args.model}, {torch.get_num_threads()} threads, CPU flags: {', '.join(result['cpu_flags']) or 'none'}; "
        f"{result['examples']} conversations ({result['tokens']} tokens), {result['prompts']} turn prompts"
    )
    for name, what in (
        ("train", "SFT forward + backward"),
        ("score", "scoring forward"),
        ("sample", "greedy answers (16 tokens)"),
    ):
        print(
            f"  {what:28s} fp32 {result[f'{name}_fp32_s']:7.2f} s   bf16 {result[f'{name}_bf16_s']:7.2f} s   "
            f"{result[f'{name}_speedup']:.2f}x"
        )
    print(
        f"  {'the same, bf16 weights copy':28s} autocast {sample_bf16:7.2f} s   copy {sample_copy:7.2f} s   "
        f"{result['copy_speedup']:.2f}x"
    )
    print(
        f"  {'rollouts, per token':28s} autocast {rollout_mixed:7.2f} s   copy {rollout_copy:7.2f} s   "
        f"{result['rollout_speedup']:.2f}x ({int(tokens_mixed)} and {int(tokens_copy)} tokens, {args.repeats} rounds)"
    )
    print(
        f"  SFT loss per token: fp32 {loss_fp32:.4f}, bf16 autocast {loss_bf16:.4f}; greedy answers that changed: "
        f"{result['greedy_answers_changed']} of {len(prompts)} (fp32 to autocast), "
        f"{result['copy_answers_changed']} (autocast to the bf16 copy)"
    )


if __name__ == "__main__":
    main()
