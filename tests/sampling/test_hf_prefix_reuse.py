"""Prefix reuse across calls in the transformers sampler: a prompt that extends a kept one prefills only its new
tokens, and every sample is what a full prefill draws (tokens identical, logprobs equal to float precision)."""

from __future__ import annotations

import pytest

from pivotgym.sampling.base import SamplingParams
from pivotgym.sampling.hf import HFSampler
from pivotgym.sampling.testing import tiny_llama

PARAMS = SamplingParams(temperature=1.0, max_new_tokens=4)


def _episode(sampler: HFSampler, first: list[list[int]], n: int, turns: int) -> list[list[tuple]]:
    """``turns`` lockstep turns from each first prompt: turn 0 samples each prompt ``n`` times, later turns
    extend each episode's prompt by its reply and a fixed observation; returns every (tokens, logprobs)."""
    episodes = [[list(p)] for p in first for _ in range(n)]
    drawn: list[list[tuple]] = [[] for _ in episodes]
    out = sampler.sample(first, n=n, params=PARAMS, seeds=[7 * i for i in range(len(first))])
    replies = [c for group in out for c in group]
    for turn in range(1, turns + 1):
        for e, reply in enumerate(replies):
            drawn[e].append((reply.token_ids, reply.logprobs))
            episodes[e].append(episodes[e][-1] + reply.token_ids + [1000 + turn, 2000 + e])
        if turn == turns:
            break
        prompts = [ep[-1] for ep in episodes]
        replies = [
            g[0] for g in sampler.sample(prompts, params=PARAMS, seeds=[100 * turn + e for e in range(len(prompts))])
        ]
    return drawn


def test_samples_are_the_same_with_and_without_prefix_reuse():
    model, tokenizer = tiny_llama(seed=4)
    sampler = HFSampler(model, tokenizer, max_batch_size=4, cache_implementation="dynamic")
    first = [
        tokenizer.encode("Start: the blocks are stacked."),
        tokenizer.encode("Another task, longer than the first one."),
    ]
    plain = _episode(sampler, first, n=3, turns=3)  # batches of 4 rows: prompts split across groups
    assert sampler.prefix_stats == {"reused_tokens": 0, "prefilled_tokens": 0}  # outside the block: no reuse
    with sampler.reuse_prefixes():
        reused = _episode(sampler, first, n=3, turns=3)
        kept = sum(len(k) for k in sampler._prefixes)
    assert sampler._prefixes is None  # leaving the block drops the kept rows
    for a, b in zip(plain, reused):
        for (tokens_a, lp_a), (tokens_b, lp_b) in zip(a, b):
            assert tokens_a == tokens_b
            assert lp_a == pytest.approx(lp_b, abs=1e-4)
    # turns 1 and 2 of the 6 episodes reuse their whole previous prompt and prefill only its reply and
    # observation; what stays kept is each episode's last prompt (the prompts it extended were dropped)
    grow = [[len(tokens) + 2 for tokens, _ in episode] for episode in reused]
    starts = [len(first[e // 3]) for e in range(6)]
    assert sampler.prefix_stats == {
        "reused_tokens": sum(2 * s + g[0] for s, g in zip(starts, grow)),
        "prefilled_tokens": sum(len(p) for p in first) + sum(g[0] + g[1] for g in grow),
    }
    assert kept == sum(s + g[0] + g[1] for s, g in zip(starts, grow))


def test_the_kept_rows_are_bounded_and_outside_the_block_nothing_is_kept():
    model, tokenizer = tiny_llama(seed=4)
    sampler = HFSampler(model, tokenizer, prefix_cache_tokens=20, cache_implementation="dynamic")
    prompts = [list(range(300, 312)), list(range(400, 412))]
    with sampler.reuse_prefixes():
        sampler.sample(prompts, params=PARAMS, seeds=[1, 2])
        assert list(sampler._prefixes) == [tuple(prompts[1])]  # 24 tokens > 20: the older one went
        with sampler.reuse_prefixes():  # nested: the same kept rows
            sampler.sample([prompts[1] + [5, 6]], params=PARAMS, seeds=[3])
        assert sampler.prefix_stats["reused_tokens"] == 12
    assert sampler._prefixes is None
