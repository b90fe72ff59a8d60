"""Trainer forward/backward throughput: shared-prefix vs per-sample, on the same batch.

A pivot group is G completions of one long prompt. The per-sample form runs ``prompt + completion`` G
times; the shared-prefix form runs the prompt once and the completions on its repeated KV cache. Both
compute the same loss and gradients (tests/train/test_update.py); this prints completion tokens per second
of forward+backward for each and the ratio (goal >= 2x). On CUDA it repeats the measurement in bf16 and
reports peak memory.

    python benchmarks/trainer.py [--prompt 256] [--completion 32] [--group 8] [--repeats 2] [--layers N]

The model has SmolLM2-135M's architecture (random init: throughput does not depend on the weights).
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from _smoke import parse_args


def smollm2_like(layers: int | None) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=49152,
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=layers or 30,
        num_attention_heads=9,
        num_key_value_heads=3,
        max_position_embeddings=8192,
        tie_word_embeddings=True,
        rope_theta=100000.0,
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(config)


def measure(
    model: torch.nn.Module, shared: bool, args: argparse.Namespace, device: str, dtype: torch.dtype
) -> dict[str, float]:
    from pivotgym.sampling.logprobs import completion_logprobs

    gen = torch.Generator().manual_seed(1)
    prompt = torch.randint(10, 40000, (args.prompt,), generator=gen).tolist()
    completions = [torch.randint(10, 40000, (args.completion,), generator=gen).tolist() for _ in range(args.group)]
    tokens = args.group * args.completion

    def once() -> None:
        with torch.autocast(device_type=device, dtype=dtype, enabled=dtype != torch.float32):
            logp, mask = completion_logprobs(model, prompt, completions, shared_prefix=shared)
        (-(logp * mask).sum() / mask.sum()).backward()
        model.zero_grad(set_to_none=True)

    once()  # warm-up
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    for _ in range(args.repeats):
        once()
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = (time.perf_counter() - start) / args.repeats
    row = {"tokens_per_s": tokens / seconds, "seconds_per_group": seconds}
    if device == "cuda":
        row["peak_memory_gib"] = torch.cuda.max_memory_allocated() / 2**30
    return row


def run(device: str, dtype: torch.dtype, args: argparse.Namespace) -> dict[str, object]:
    model = smollm2_like(args.layers).to(device)
    model.train()
    per_sample = measure(model, False, args, device, dtype)
    shared = measure(model, True, args, device, dtype)
    return {
        "device": device,
        "dtype": str(dtype).removeprefix("torch."),
        "per_sample": per_sample,
        "shared_prefix": shared,
        "speedup": shared["tokens_per_s"] / per_sample["tokens_per_s"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompt", type=int, default=512)
    parser.add_argument("--completion", type=int, default=32)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--layers", type=int, default=None, help="fewer layers for a quicker run (default 30)")
    parser.add_argument("--json", action="store_true")
    args = parse_args(parser, prompt=64, completion=8, group=2, repeats=1, layers=1)
    results = [run("cpu", torch.float32, args)]
    if torch.cuda.is_available():
        results.append(run("cuda", torch.bfloat16, args))
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"batch: G={args.group} completions of {args.completion} tokens after a {args.prompt}-token prompt")
    for r in results:
        ps, sh = r["per_sample"], r["shared_prefix"]
        mem = (
            f", peak {ps.get('peak_memory_gib', 0):.2f} vs {sh.get('peak_memory_gib', 0):.2f} GiB"
            if r["device"] == "cuda"
            else ""
        )
        print(
            f"{r['device']} {r['dtype']}: per-sample {ps['tokens_per_s']:.1f} tok/s, shared-prefix "
            f"{sh['tokens_per_s']:.1f} tok/s -> {r['speedup']:.2f}x{mem}"
        )


if __name__ == "__main__":
    main()
