"""HFSampler on a tiny random Llama: shared prefill, padding, logprobs vs score, seeds, stops."""

from __future__ import annotations

import math

import pytest
import torch

from pivotgym.sampling.base import Sampler, SamplingParams
from pivotgym.sampling.hf import HFSampler

CHAT_A = [{"role": "user", "content": "hi"}]
CHAT_B = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Name three prime numbers greater than ten, please."},
]


def _forward_shapes(model: torch.nn.Module) -> tuple[list[tuple[int, int]], object]:
    shapes: list[tuple[int, int]] = []

    def hook(_module, _args, kwargs):
        shapes.append(tuple(kwargs["input_ids"].shape))

    return shapes, model.register_forward_pre_hook(hook, with_kwargs=True)


def test_is_a_sampler_and_describes_itself(tiny_sampler):
    assert isinstance(tiny_sampler, Sampler)
    info = tiny_sampler.describe()
    assert info["backend"] == "hf" and info["device"] == "cpu" and info["dtype"] == "float32"


def test_encode_applies_the_chat_template_and_passes_ids_through(tiny_sampler):
    ids = tiny_sampler.encode(CHAT_A)
    text = tiny_sampler.tokenizer.decode(ids)
    assert text.endswith("<|im_start|>assistant\n") and "<|im_start|>user\nhi<|im_end|>" in text
    assert tiny_sampler.encode([5, 6, 7]) == [5, 6, 7]
    with pytest.raises(ValueError):
        tiny_sampler.encode([])


def test_n_samples_share_one_prefill(tiny_sampler):
    shapes, handle = _forward_shapes(tiny_sampler.model)
    try:
        out = tiny_sampler.sample([CHAT_A, CHAT_B], n=4, params=SamplingParams(max_new_tokens=5, seed=0))
    finally:
        handle.remove()
    prefills = [s for s in shapes if s[1] > 1]
    decodes = [s for s in shapes if s[1] == 1]
    # one prefill over the 2 prompts (not 8 rows), then single-token steps over the 8 expanded rows
    assert prefills == [(2, max(len(tiny_sampler.encode(CHAT_A)), len(tiny_sampler.encode(CHAT_B))))]
    assert len(decodes) == 4 and all(s[0] == 8 for s in decodes)
    assert [len(g) for g in out] == [4, 4]
    assert all(len(c.token_ids) == 5 and c.finish_reason == "length" for g in out for c in g)
    assert out[0][0].prompt_token_ids == tiny_sampler.encode(CHAT_A)


def test_samples_of_one_prompt_differ_but_seed_reproduces(tiny_sampler):
    params = SamplingParams(max_new_tokens=6, seed=123)
    first = tiny_sampler.sample([CHAT_A, CHAT_B], n=3, params=params)
    again = tiny_sampler.sample([CHAT_A, CHAT_B], n=3, params=params)
    other = tiny_sampler.sample([CHAT_A, CHAT_B], n=3, params=SamplingParams(max_new_tokens=6, seed=124))
    ids = lambda res: [[c.token_ids for c in g] for g in res]  # noqa: E731
    assert ids(first) == ids(again)
    assert ids(first) != ids(other)
    regrouped = HFSampler(tiny_sampler.model, tiny_sampler.tokenizer, max_batch_size=3)  # one prompt per prefill
    assert ids(regrouped.sample([CHAT_A, CHAT_B], n=3, params=params)) == ids(first)
    assert len({tuple(c.token_ids) for c in first[0]}) > 1  # near-uniform model: samples differ


def test_per_prompt_seeds_make_a_prompts_samples_independent_of_its_batch(tiny_sampler):
    params = SamplingParams(max_new_tokens=6)
    ids = lambda res: [[c.token_ids for c in g] for g in res]  # noqa: E731
    batched = tiny_sampler.sample([CHAT_A, CHAT_B, CHAT_A], n=2, params=params, seeds=[11, 22, 33])
    alone_b = tiny_sampler.sample([CHAT_B], n=2, params=params, seeds=[22])
    assert ids(batched)[1] == ids(alone_b)[0]  # same prompt, same seed: same samples, whatever came along
    assert ids(batched)[0] != ids(batched)[2]  # same prompt, other seed: other samples
    swapped = tiny_sampler.sample([CHAT_A, CHAT_B], n=2, params=params, seeds=[33, 22])
    assert ids(swapped) == [ids(batched)[2], ids(batched)[1]]
    with pytest.raises(ValueError, match="one per prompt"):
        tiny_sampler.sample([CHAT_A, CHAT_B], n=2, params=params, seeds=[1])


def test_sample_seeded_batches_capable_backends_and_loops_over_the_rest(tiny_sampler):
    from pivotgym.sampling.base import sample_seeded

    calls: list[int] = []

    class PlainBackend:  # a third-party sampler without per-prompt seeds
        def sample(self, prompts, n=1, params=None):
            calls.append(len(prompts))
            return tiny_sampler.sample(prompts, n=n, params=params)

        def describe(self):
            return {"model": "plain", "revision": None, "backend": "plain"}

    params = SamplingParams(max_new_tokens=4)
    plain = sample_seeded(PlainBackend(), [CHAT_A, CHAT_B], 2, params, [5, 6])
    assert calls == [1, 1]  # one call per prompt, each under its own params.seed
    assert [c.token_ids for c in plain[1]] == [
        c.token_ids for c in tiny_sampler.sample([CHAT_B], n=2, params=SamplingParams(max_new_tokens=4, seed=6))[0]
    ]
    batched = sample_seeded(tiny_sampler, [CHAT_A, CHAT_B], 2, params, [5, 6])
    assert [len(g) for g in batched] == [2, 2]
    assert sample_seeded(tiny_sampler, [], 2, params, []) == []


def test_sampled_logprobs_match_score(tiny_sampler):
    out = tiny_sampler.sample([CHAT_A, CHAT_B], n=2, params=SamplingParams(max_new_tokens=6, seed=7, temperature=0.7))
    completions = [c for g in out for c in g]
    batch = tiny_sampler.score_batch([c.prompt_token_ids for c in completions], [c.token_ids for c in completions])
    for completion, scored in zip(completions, batch):
        single = tiny_sampler.score(completion.prompt_token_ids, completion.token_ids)
        assert len(scored) == len(completion.logprobs) == len(single)
        assert all(math.isfinite(x) and x <= 0 for x in completion.logprobs)
        assert max(abs(a - b) for a, b in zip(completion.logprobs, scored)) < 1e-4
        assert max(abs(a - b) for a, b in zip(single, scored)) < 1e-4


def test_left_padding_does_not_change_a_prompts_result(tiny_sampler):
    greedy = SamplingParams(max_new_tokens=6, temperature=0)
    alone = tiny_sampler.sample([CHAT_A], n=1, params=greedy)[0][0]
    batched = tiny_sampler.sample([CHAT_B, CHAT_A], n=2, params=greedy)[1]
    for completion in batched:
        assert completion.token_ids == alone.token_ids
        assert max(abs(a - b) for a, b in zip(completion.logprobs, alone.logprobs)) < 1e-4


def test_greedy_matches_transformers_generate(tiny):
    model, tokenizer = tiny
    sampler = HFSampler(model, tokenizer)
    ids = sampler.encode(CHAT_B)
    ours = sampler.sample([ids], params=SamplingParams(max_new_tokens=8, temperature=0))[0][0]
    ref = model.generate(
        torch.tensor([ids]),
        attention_mask=torch.ones(1, len(ids), dtype=torch.long),
        max_new_tokens=8,
        do_sample=False,
        eos_token_id=None,
    )
    assert ours.token_ids == ref[0, len(ids) :].tolist()


def test_top_k_one_is_greedy(tiny_sampler):
    greedy = tiny_sampler.sample([CHAT_B], params=SamplingParams(max_new_tokens=5, temperature=0))[0][0]
    top1 = tiny_sampler.sample([CHAT_B], n=2, params=SamplingParams(max_new_tokens=5, top_k=1, seed=3))[0]
    nucleus = tiny_sampler.sample([CHAT_B], params=SamplingParams(max_new_tokens=5, top_p=1e-6, seed=3))[0][0]
    assert all(c.token_ids == greedy.token_ids for c in top1)
    assert nucleus.token_ids == greedy.token_ids


def test_eos_ends_a_completion_and_is_kept(tiny_sampler):
    params = SamplingParams(max_new_tokens=6, seed=11)
    first = tiny_sampler.sample([CHAT_A], params=params)[0][0]
    cut = next(i for i, t in enumerate(first.token_ids) if i >= 1 and t not in first.token_ids[:i])
    tiny_sampler.eos_ids = {first.token_ids[cut]}
    stopped = tiny_sampler.sample([CHAT_A], params=params)[0][0]
    assert stopped.token_ids == first.token_ids[: cut + 1]  # EOS kept in the ids (the trainer learns to stop)
    assert stopped.finish_reason == "stop"
    assert stopped.logprobs == pytest.approx(first.logprobs[: cut + 1], abs=1e-5)


def test_stop_string_truncates_text_but_keeps_tokens(tiny_sampler):
    greedy = SamplingParams(max_new_tokens=6, temperature=0)
    first = tiny_sampler.sample([CHAT_A], params=greedy)[0][0]
    piece = tiny_sampler.decode(first.token_ids[:3])
    marker = piece[-2:] if len(piece.strip()) >= 2 else piece
    stopped = tiny_sampler.sample([CHAT_A], params=SamplingParams(max_new_tokens=6, temperature=0, stop=[marker]))[0][0]
    assert stopped.finish_reason == "stop"
    assert marker not in stopped.text
    assert stopped.token_ids == first.token_ids[: len(stopped.token_ids)] and len(stopped.token_ids) <= 3


def test_restores_training_mode_and_accepts_raw_ids(tiny):
    model, tokenizer = tiny
    sampler = HFSampler(model, tokenizer)
    model.train()
    try:
        out = sampler.sample([[1, 2, 3]], n=2, params=SamplingParams(max_new_tokens=2, seed=0))
        assert model.training
        assert out[0][0].prompt_token_ids == [1, 2, 3]
    finally:
        model.eval()


def test_zero_new_tokens_and_bad_n(tiny_sampler):
    out = tiny_sampler.sample([CHAT_A], n=2, params=SamplingParams(max_new_tokens=0))
    assert [c.token_ids for c in out[0]] == [[], []]
    with pytest.raises(ValueError):
        tiny_sampler.sample([CHAT_A], n=0)


def test_autocast_samples_and_scores_in_its_dtype_and_leaves_the_weights_as_they_are(tiny):
    """A trainer's sampler of its fp32 policy in bf16 mixed precision: the forward passes run in bf16 (so the
    logprobs move by bf16 rounding, not more) and no weight is cast (``dtype`` would cast them)."""
    model, tokenizer = tiny
    plain, mixed = HFSampler(model, tokenizer), HFSampler(model, tokenizer, autocast_dtype="bfloat16")
    assert mixed.autocast_dtype is torch.bfloat16 and plain.autocast_dtype is None
    params = SamplingParams(max_new_tokens=6, seed=7, temperature=0.7)
    (completion,) = mixed.sample([CHAT_B], n=1, params=params)[0]
    exact = plain.score(completion.prompt_token_ids, completion.token_ids)
    rounded = mixed.score(completion.prompt_token_ids, completion.token_ids)
    gaps = [abs(a - b) for a, b in zip(exact, rounded)]
    assert 0 < max(gaps) < 0.1
    # sampled as it scores: the same bf16 forward up to the order of its sums (incremental decoding against one
    # full pass), which moves a logprob by a few bf16 roundings: 4.8e-4 on an AVX2-only CPU, < 1e-4 on AVX512;
    # still 20x inside the gap bf16 makes against fp32 (checked above)
    assert max(abs(a - b) for a, b in zip(completion.logprobs, rounded)) < 5e-3
    assert {p.dtype for p in model.parameters()} == {torch.float32}


def test_in_memory_model_needs_a_tokenizer(tiny):
    with pytest.raises(ValueError, match="tokenizer"):
        HFSampler(tiny[0])


def test_registry_builds_the_hf_sampler(tiny):
    from pivotgym.registry import get_registry

    registry = get_registry()
    assert {"hf", "vllm", "openai"} <= set(registry.samplers)
    sampler = registry.make_sampler("hf", tiny[0], tokenizer=tiny[1])
    assert isinstance(sampler, HFSampler)


def test_static_cache_path_matches_the_dynamic_one(tiny):
    """The CUDA default (static cache, fixed shapes) run eagerly on CPU: same tokens, logprobs, finishes."""
    dynamic = HFSampler(*tiny)
    static = HFSampler(*tiny, cache_implementation="static", compile=False, sync_every=2)
    first = dynamic.sample([CHAT_A], params=SamplingParams(max_new_tokens=6, seed=5))[0][0]
    for sampler in (dynamic, static):
        sampler.eos_ids = {first.token_ids[3]}
    marker = dynamic.decode(first.token_ids[:2])[-1:]
    for params in (
        SamplingParams(max_new_tokens=7, seed=5),
        SamplingParams(max_new_tokens=7, temperature=0),
        SamplingParams(max_new_tokens=7, seed=9, stop=[marker] if marker.strip() else []),
    ):
        a = dynamic.sample([CHAT_A, CHAT_B], n=3, params=params)
        b = static.sample([CHAT_A, CHAT_B], n=3, params=params)
        for ga, gb in zip(a, b):
            for ca, cb in zip(ga, gb):
                assert (ca.token_ids, ca.text, ca.finish_reason) == (cb.token_ids, cb.text, cb.finish_reason)
                assert ca.logprobs == pytest.approx(cb.logprobs, abs=1e-4)
    assert any(c.finish_reason == "stop" for g in b for c in g)


def test_unknown_cache_implementation_is_rejected(tiny):
    with pytest.raises(ValueError, match="static"):
        HFSampler(*tiny, cache_implementation="paged")


def test_gumbel_sampling_draws_from_the_softmax():
    from pivotgym.sampling.hf import GumbelNoise, _choose

    logits = torch.tensor([[0.0, 1.0, 2.0, -1.0]]).repeat(2000, 1)
    noise = GumbelNoise(seed=17, device=torch.device("cpu")).rows(0, 2000)
    counts = torch.zeros(4)
    for step in range(3):
        for t in _choose(logits, SamplingParams(temperature=1.0), noise, step, None).tolist():
            counts[t] += 1
    assert torch.allclose(counts / counts.sum(), logits[0].softmax(-1), atol=0.02)
    hot = _choose(logits, SamplingParams(temperature=0.25), noise, 0, None)
    assert (hot == 2).float().mean() > 0.95  # low temperature concentrates on the argmax
    rows = torch.tensor([5, 7])
    assert torch.equal(noise.gumbel(4, 4, rows), noise.gumbel(4, 4, None)[rows])  # row-keyed, not position-keyed


def test_revision_follows_the_weights_not_the_file_times(tmp_path):
    import os
    import shutil

    from pivotgym.sampling.hf import _revision
    from pivotgym.sampling.testing import tiny_llama

    model, tokenizer = tiny_llama(seed=3)  # its own copy: the weights get changed below
    first = tmp_path / "first"
    model.save_pretrained(first)
    tokenizer.save_pretrained(first)
    again = tmp_path / "again"
    shutil.copytree(first, again)
    for f in again.iterdir():
        os.utime(f, (1_000_000, 1_000_000))  # same bytes, other timestamps: same revision (and profiler seeds)
    assert _revision(str(first)) == _revision(str(again)) is not None
    with torch.no_grad():
        next(model.parameters()).add_(1.0)
    model.save_pretrained(again)
    assert _revision(str(again)) != _revision(str(first))


def test_prefix_hosts_finds_the_longest_prompt_that_starts_with_each():
    from pivotgym.sampling.hf import prefix_hosts

    prompts = [[1, 2, 3], [1, 2], [1, 2, 3, 4, 5], [9], [1, 3], [1, 2], [1, 2, 3, 4, 6], [9, 9]]
    hosts = prefix_hosts(prompts)
    assert hosts[3] == 7 and hosts[7] == 7 and hosts[4] == 4  # [9] -> [9, 9]; [1, 3] stands alone
    assert hosts[2] == 2 and hosts[6] == 6  # two different extensions of [1, 2, 3, 4] each host themselves
    for i in (0, 1, 5):  # the shared prefixes go to one of the longest prompts that extend them
        assert hosts[i] in (2, 6) and prompts[hosts[i]][: len(prompts[i])] == prompts[i]
    assert prefix_hosts([]) == [] and prefix_hosts([[5], [6]]) == [0, 1]


@pytest.mark.parametrize(
    "params", [SamplingParams(temperature=0.0, max_new_tokens=6), SamplingParams(temperature=1.0, max_new_tokens=6)]
)
def test_prompts_that_extend_each_other_share_one_prefill_and_sample_the_same(tiny_sampler, params):
    """The states of a trajectory (each prompt begins with the previous one) are served from one prefill of
    the longest; completions and logprobs equal those of each prompt sampled alone."""
    import random

    rng = random.Random(3)
    history = [rng.randrange(5, 500) for _ in range(60)]
    other = [rng.randrange(5, 500) for _ in range(25)]
    prompts = [history[:1], history[:20], history[:41], history, other, history[:20], other[:7]]
    seeds = list(range(100, 100 + len(prompts)))
    shapes, handle = _forward_shapes(tiny_sampler.model)
    try:
        together = tiny_sampler.sample(prompts, n=2, params=params, seeds=seeds)
    finally:
        handle.remove()
    assert [s for s in shapes if s[1] > 1] == [(2, len(history))]  # one prefill, of the two hosts only
    alone = [tiny_sampler.sample([p], n=2, params=params, seeds=[s])[0] for p, s in zip(prompts, seeds)]
    for got, want in zip(together, alone):
        assert [c.token_ids for c in got] == [c.token_ids for c in want]
        assert [c.prompt_token_ids for c in got] == [c.prompt_token_ids for c in want]
        for a, b in zip(got, want):
            assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)


def test_gumbel_noise_is_the_documented_unsigned_hash_bit_for_bit():
    """The int32 arithmetic of GumbelNoise must give exactly the 32-bit unsigned hash: a seed keeps drawing
    what it drew (and what docs/results/ was sampled with), whatever the tensor arithmetic."""
    from pivotgym.sampling.hf import GumbelNoise, _fmix32, _seed_mix

    mask = 0xFFFFFFFF

    def reference(seed: int, row_key: int, step: int, token: int) -> int:
        step_mix = _fmix32(_seed_mix(seed) ^ ((step * 0x27D4EB2F) & mask))
        x = _fmix32((((row_key ^ step_mix) & mask) + ((token * 0x9E3779B1) & mask)) & mask)
        return _fmix32(x ^ step_mix) >> 8  # the 24 bits that make the uniform

    vocab, tokens = 151_936, [0, 1, 2, 77, 40_000, 49_151, 151_935]
    for seed, step in ((17, 0), (2**40 + 3, 9), (123_456_789, 255)):
        noise = GumbelNoise(seed, torch.device("cpu"))
        rows = [0, 1, 5, 1_000_003]
        drawn = noise.select(rows).gumbel(step, vocab, None)[:, tokens]
        bits = [[reference(seed, _fmix32(r + 0x9E3779B9), step, t) for t in tokens] for r in rows]
        uniform = (torch.tensor(bits, dtype=torch.int32).float() + 0.5) * (1.0 / (1 << 24))
        assert torch.equal(drawn, -torch.log(-torch.log(uniform)))
        seeds = [7, 2**63 - 1]
        per_prompt = GumbelNoise.per_prompt(seeds, 2, torch.device("cpu")).rows(0, 4).gumbel(step, vocab, None)
        keys = [_fmix32(_seed_mix(s) ^ _fmix32(j + 0x9E3779B9)) for s in seeds for j in range(2)]
        bits = [[reference(0, key, step, t) for t in tokens] for key in keys]
        uniform = (torch.tensor(bits, dtype=torch.int32).float() + 0.5) * (1.0 / (1 << 24))
        assert torch.equal(per_prompt[:, tokens], -torch.log(-torch.log(uniform)))


def test_a_prompt_past_the_context_window_gets_error_completions_and_the_others_are_sampled(tiny_sampler):
    window = tiny_sampler.model.config.max_position_embeddings
    long, short = [5] * (window - 2), [5, 6, 7]
    params = SamplingParams(max_new_tokens=4, seed=0)
    too_long, fine = tiny_sampler.sample([long, short], n=2, params=params, seeds=[1, 2])
    assert [c.finish_reason for c in too_long] == ["error", "error"]
    assert f"{window - 2} tokens and may grow by 4, past the model's context window of {window}" in too_long[0].text
    assert fine == tiny_sampler.sample([short], n=2, params=params, seeds=[2])[0]  # as if sampled alone
