"""K samples per state: HFSampler's shared prefill against transformers' generate, in one run.

    python benchmarks/sampling.py [--prompts P] [--prompt-tokens L] [--k 8] [--new-tokens M] [--json]

Profiling a pivot state means K samples from the same (long) history. Three ways, same model and sizes,
every sequence forced to exactly M new tokens (EOS ignored) so the work is identical:

* ``separate``   K separate ``model.generate`` calls per prompt (batch 1): K prefills + K decode loops;
* ``generate_n`` one ``model.generate(num_return_sequences=K)`` over all P prompts (batch P*K): transformers
                 expands the prompts before the prefill, so it still runs P*K prefills;
* ``shared``     ``HFSampler.sample(prompts, n=K)``: P prefills, cache repeated K times, batch P*K decode.

Prints states/s (prompts fully sampled per second), generated tokens/s, and the ratios of ``shared`` to
both baselines. Defaults: CPU fp32 (2 prompts x 256 tokens, 16 new) or CUDA bf16 (64 x 512, 128 new).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import torch
from _smoke import parse_args, tiny_model

from pivotgym.sampling.base import SamplingParams
from pivotgym.sampling.hf import HFSampler

FILLER = (
    "The agent called search_flights(origin='SFO', destination='JFK', date='2025-03-14') and the tool "
    "returned three options with prices, layovers and seat availability. "
)


def make_prompts(sampler: HFSampler, count: int, length: int) -> list[list[int]]:
    """``count`` distinct token-id prompts of exactly ``length`` tokens, chat-templated like real states."""
    prompts = []
    for i in range(count):
        history = [
            {"role": "system", "content": f"Session {i}: you are a travel booking agent."},
            {"role": "user", "content": FILLER * (length // 20 + 2)},
        ]
        ids = sampler.encode(history)
        prompts.append(ids[: length - 5] + ids[-5:])  # keep the generation prompt at the end
    return prompts


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed(fn: Any, device: torch.device) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process). On a shared CPU the CPU seconds are the fairer figure."""
    sync(device)
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    sync(device)
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    cuda = torch.cuda.is_available()
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--prompts", type=int, default=64 if cuda else 2)
    parser.add_argument("--prompt-tokens", type=int, default=512 if cuda else 256)
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=128 if cuda else 16)
    parser.add_argument("--skip-separate", action="store_true", help="skip the slowest baseline")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parse_args(parser, model=tiny_model, prompts=2, prompt_tokens=32, k=2, new_tokens=4)

    sampler = HFSampler(args.model, max_batch_size=args.prompts * args.k)
    sampler.eos_ids = set()  # fixed-length generations: identical work for every method
    model, device = sampler.model, sampler.device
    pad = sampler.pad_id
    prompts = make_prompts(sampler, args.prompts, args.prompt_tokens)
    P, K, M = args.prompts, args.k, args.new_tokens
    fixed = dict(
        max_new_tokens=M, min_new_tokens=M, do_sample=True, temperature=1.0, top_p=1.0, top_k=0, pad_token_id=pad
    )
    params = SamplingParams(max_new_tokens=M, temperature=1.0, seed=0)

    def shared() -> None:
        sampler.sample(prompts, n=K, params=params)

    def generate_n() -> None:
        ids = torch.tensor(prompts, device=device)
        with torch.no_grad():
            model.generate(ids, attention_mask=torch.ones_like(ids), num_return_sequences=K, **fixed)

    def separate() -> None:
        with torch.no_grad():
            for p in prompts:
                ids = torch.tensor([p], device=device)
                for _ in range(K):
                    model.generate(ids, attention_mask=torch.ones_like(ids), **fixed)

    # warm-up (kernels, allocator, compilation) on a small slice
    sampler.sample(prompts[:1], n=K, params=SamplingParams(max_new_tokens=4, seed=0))
    with torch.no_grad():
        model.generate(
            torch.tensor(prompts[:1], device=device),
            max_new_tokens=4,
            min_new_tokens=4,
            do_sample=True,
            pad_token_id=pad,
        )

    methods = {"shared": shared, "generate_n": generate_n}
    if not args.skip_separate:
        methods["separate"] = separate
    seconds, cpu_seconds = {}, {}
    for name, fn in methods.items():
        seconds[name], cpu_seconds[name] = timed(fn, device)
        print(f"[{name}: {seconds[name]:.2f} s wall, {cpu_seconds[name]:.2f} s CPU]", file=sys.stderr, flush=True)
    result: dict[str, Any] = {
        "device": str(device),
        "dtype": str(next(model.parameters()).dtype).removeprefix("torch."),
        "threads": torch.get_num_threads(),
        "prompts": P,
        "prompt_tokens": args.prompt_tokens,
        "k": K,
        "new_tokens": M,
        "methods": {
            name: {
                "seconds": round(s, 3),
                "cpu_seconds": round(cpu_seconds[name], 3),
                "states_per_s": round(P / s, 4),
                "tokens_per_s": round(P * K * M / s, 1),
            }
            for name, s in seconds.items()
        },
    }
    for base in ("generate_n", "separate"):
        if base in seconds:
            result[f"speedup_vs_{base}"] = round(seconds[base] / seconds["shared"], 2)
            result[f"cpu_speedup_vs_{base}"] = round(cpu_seconds[base] / cpu_seconds["shared"], 2)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(
        f"{result['device']} {result['dtype']}, {P} prompts x {args.prompt_tokens} tokens, K={K}, {M} new tokens each"
    )
    for name, row in result["methods"].items():
        print(
            f"  {name:<11} {row['seconds']:>8.2f} s ({row['cpu_seconds']:>7.2f} s CPU)  "
            f"{row['states_per_s']:>8.3f} states/s  {row['tokens_per_s']:>9.1f} tok/s"
        )
    for base, label in (("separate", "K separate generate calls"), ("generate_n", "generate(num_return_sequences=K)")):
        if f"speedup_vs_{base}" in result:
            print(
                f"shared prefill vs {label}: {result[f'speedup_vs_{base}']:.2f}x states/s "
                f"({result[f'cpu_speedup_vs_{base}']:.2f}x per CPU second)"
            )


if __name__ == "__main__":
    main()
