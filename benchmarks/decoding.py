"""The transformers sampler's decode loop: in-place KV cache and int32 Gumbel noise against what they replace.

    python benchmarks/decoding.py [--tasks 2] [--episodes 8] [--turns 6] [--repeats 2] [--precision autocast] [--json]

On a CPU, decoding a batch of episodes (E2E RL's rollouts) spent, besides the model's own matrix products,
two overheads that grow with the batch and the history:

* transformers' ``DynamicLayer`` appends each step's keys and values with ``torch.cat``, copying every layer's
  whole cache at every step; :class:`pivotgym.sampling.kv_cache.GrowingLayer` writes into preallocated room;
* the counter-based Gumbel noise (one hash per vocabulary entry per row per step) was computed on int64
  tensors holding 32-bit values, with each 32-bit multiplication emulated in six operations; it is now int32
  arithmetic that wraps, bit for bit the same hash.

The same seeded episodes (SmolLM2-135M, bundled, temperature 1, 16 new tokens a turn, prefix reuse, ``--env``'s
train tasks) run under four variants, each ``--repeats`` rounds, alternated so a slower spell of a shared
machine hits all of them: ``baseline`` (transformers' cache, int64 noise), ``noise`` (int32 noise only),
``cache`` (in-place cache only) and ``both`` (what the sampler does). Printed: seconds per variant, the ratio of
each to the baseline, and whether every variant drew the same completions with the same logprobs (they must:
neither change touches a number). Also the noise alone, one decode step's worth (``[rows, vocab]``), per draw.

``--precision``: ``autocast`` (fp32 weights under bf16 autocast: a trainer's sampler in bf16 mixed precision,
the study's E2E RL), ``bf16`` (bf16 weights: a model loaded with ``dtype``) or ``fp32``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from collections.abc import Iterator
from typing import Any

import torch
from _smoke import parse_args, tiny_model

from pivotgym.registry import make
from pivotgym.rollout import run_episodes
from pivotgym.sampling import hf, kv_cache
from pivotgym.sampling.base import SamplingParams
from pivotgym.sampling.hf import GumbelNoise, HFSampler

MASK32 = 0xFFFFFFFF


def _mul32_int64(x: torch.Tensor, constant: int) -> torch.Tensor:
    """The replaced arithmetic: ``(x * constant) mod 2**32`` on int64 tensors, without int64 overflow."""
    low, high = constant & 0xFFFF, constant >> 16
    return (x * low + (((x * high) & 0xFFFF) << 16)) & MASK32


def _fmix32_int64(x: torch.Tensor) -> torch.Tensor:
    x = x ^ (x >> 16)
    x = _mul32_int64(x, 0x85EBCA6B)
    x = x ^ (x >> 13)
    x = _mul32_int64(x, 0xC2B2AE35)
    return x ^ (x >> 16)


def gumbel_int64(noise: GumbelNoise, step: int, vocab: int, rows: torch.Tensor | None) -> torch.Tensor:
    """The replaced :meth:`GumbelNoise.gumbel`: the same hash on int64 tensors."""
    assert noise.keys is not None
    keys = (noise.keys if rows is None else noise.keys[rows]).long() & MASK32
    columns = _mul32_int64(torch.arange(vocab, dtype=torch.long, device=keys.device), 0x9E3779B1)
    step_mix = hf._fmix32(noise._seed_mix ^ ((step * 0x27D4EB2F) & MASK32))
    x = _fmix32_int64(((keys ^ step_mix).unsqueeze(1) + columns.unsqueeze(0)) & MASK32)
    x = _fmix32_int64(x ^ step_mix)
    uniform = ((x >> 8).float() + 0.5) * (1.0 / (1 << 24))
    return -torch.log(-torch.log(uniform))


@contextlib.contextmanager
def variant(name: str) -> Iterator[None]:
    """Swap in the replaced pieces for one variant; restored on exit."""
    saved_cache, saved_gumbel = kv_cache.growing_cache, GumbelNoise.gumbel
    if name in ("baseline", "noise"):  # transformers' cache
        from transformers import DynamicCache

        kv_cache.growing_cache = lambda config=None, data=None: DynamicCache(ddp_cache_data=data, config=config)  # type: ignore[assignment]
    if name in ("baseline", "cache"):  # int64 noise
        GumbelNoise.gumbel = gumbel_int64  # type: ignore[method-assign]
    try:
        yield
    finally:
        kv_cache.growing_cache, GumbelNoise.gumbel = saved_cache, saved_gumbel  # type: ignore[method-assign]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--env", default="planning/gripper-gen-v0")
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--episodes", type=int, default=8, help="episodes per task (the group)")
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--precision", choices=("autocast", "bf16", "fp32"), default="autocast")
    parser.add_argument("--json", action="store_true")
    args = parse_args(parser, model=tiny_model, tasks=1, episodes=2, turns=2, repeats=1, new_tokens=4)

    if args.precision == "bf16":
        sampler = HFSampler(args.model, dtype="bfloat16", cache_implementation="dynamic")
    else:
        sampler = HFSampler(
            args.model,
            cache_implementation="dynamic",
            autocast_dtype="bfloat16" if args.precision == "autocast" else None,
        )
    task_ids = [t.id for t in make(args.env).tasks("train")][: args.tasks]
    params = SamplingParams(temperature=1.0, max_new_tokens=args.new_tokens)

    drawn: list[tuple[list[int], list[float]]] = []  # every completion's tokens and logprobs, in order
    sample = sampler.sample

    def recording(*args: Any, **kwargs: Any) -> Any:
        out = sample(*args, **kwargs)
        drawn.extend((c.token_ids, c.logprobs) for group in out for c in group)
        return out

    sampler.sample = recording  # type: ignore[method-assign]

    def rollout(seed: int) -> tuple[float, list[tuple[list[int], list[float]]]]:
        drawn.clear()
        start = time.perf_counter()
        run_episodes(
            sampler,
            lambda: make(args.env),
            task_ids,
            params,
            n=args.episodes,
            max_turns=args.turns,
            tokens=True,
            seeds=lambda g, turn, k: seed + 1000 * g + 10 * turn + k,
        )
        return time.perf_counter() - start, list(drawn)

    names = ("baseline", "noise", "cache", "both")
    rollout(0)  # warm-up
    seconds = dict.fromkeys(names, 0.0)
    draws: dict[str, list[Any]] = {name: [] for name in names}
    for repeat in range(args.repeats):
        for name in names:
            with variant(name):
                spent, completions = rollout(1 + repeat)
            seconds[name] += spent
            draws[name].append(completions)
    tokens = sum(len(ids) for ids, _ in draws["both"][0])

    noise = GumbelNoise(7, torch.device("cpu")).rows(0, args.tasks * args.episodes)
    vocab = sampler.model.config.vocab_size
    per_draw = {}
    for name, draw in (
        ("int64", lambda s: gumbel_int64(noise, s, vocab, None)),
        ("int32", lambda s: noise.gumbel(s, vocab, None)),
    ):
        draw(0)
        start = time.perf_counter()
        for step in range(20):
            draw(step)
        per_draw[name] = (time.perf_counter() - start) / 20

    result: dict[str, Any] = {
        "env": args.env,
        "precision": args.precision,
        "threads": torch.get_num_threads(),
        "episodes": args.tasks * args.episodes,
        "turns": args.turns,
        "repeats": args.repeats,
        "tokens_per_round": tokens,
        "seconds": {name: round(s, 2) for name, s in seconds.items()},
        "speedup": {name: round(seconds["baseline"] / seconds[name], 3) for name in names},
        "identical": all(draws[name] == draws["baseline"] for name in names),
        "completions_differing": {
            name: sum(a != b for x, y in zip(draws[name], draws["baseline"]) for a, b in zip(x, y)) for name in names
        },
        "completions": sum(len(x) for x in draws["baseline"]),
        "noise_ms_per_draw": {name: round(1000 * s, 2) for name, s in per_draw.items()},
        "noise_rows": args.tasks * args.episodes,
        "vocab": vocab,
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(
        f"{args.env}: {result['episodes']} episodes x {args.turns} turns, {tokens} tokens a round, "
        f"{args.precision}, {result['threads']} threads, {args.repeats} rounds each, alternated"
    )
    for name in names:
        print(f"  {name:9s} {seconds[name]:7.2f} s   {result['speedup'][name]:.2f}x the baseline")
    print(
        f"  same completions and logprobs in every variant: {result['identical']} "
        f"(completions differing from the baseline's, of {result['completions']}: {result['completions_differing']})"
    )
    print(
        f"  Gumbel noise [{result['noise_rows']}, {vocab}] per draw: int64 {result['noise_ms_per_draw']['int64']} ms, "
        f"int32 {result['noise_ms_per_draw']['int32']} ms "
        f"({per_draw['int64'] / per_draw['int32']:.1f}x)"
    )


if __name__ == "__main__":
    main()
