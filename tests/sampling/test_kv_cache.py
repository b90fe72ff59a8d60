"""GrowingLayer appends in place and holds exactly what transformers' DynamicLayer holds; the sampler's draws
with it are bit for bit those with DynamicCache."""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from pivotgym.sampling import kv_cache
from pivotgym.sampling.base import SamplingParams
from pivotgym.sampling.hf import HFSampler
from pivotgym.sampling.kv_cache import GrowingLayer, growing_cache
from pivotgym.sampling.testing import tiny_llama


def _kv(batch: int, tokens: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, 2, tokens, 4, generator=g), torch.randn(batch, 2, tokens, 4, generator=g)


def _same(growing: GrowingLayer, plain: DynamicLayer) -> None:
    assert torch.equal(growing.keys, plain.keys) and torch.equal(growing.values, plain.values)
    assert growing.get_seq_length() == plain.get_seq_length()


def test_growing_layer_holds_what_dynamic_layer_holds_through_every_operation(monkeypatch):
    monkeypatch.setattr(GrowingLayer, "headroom", 3)  # small room: appends both fit and overflow it
    growing, plain = GrowingLayer(), DynamicLayer()
    for layer in (growing, plain):
        layer.update(*_kv(2, 5, 0))
    _same(growing, plain)
    buffer = growing.keys.untyped_storage().data_ptr()
    for step in range(1, 3):  # two one-token appends fit the room of 3: written in place, nothing reallocated
        for layer in (growing, plain):
            returned = layer.update(*_kv(2, 1, step))
        _same(growing, plain)
        assert torch.equal(returned[0], plain.keys)
    assert growing.keys.untyped_storage().data_ptr() == buffer
    for layer in (growing, plain):
        layer.batch_repeat_interleave(3)
        layer.update(*_kv(6, 4, 9))  # longer than the room left: reallocated
    _same(growing, plain)
    rows = torch.tensor([5, 0, 2])
    for layer in (growing, plain):
        layer.batch_select_indices(rows)
        layer.update(*_kv(3, 1, 10))
    _same(growing, plain)
    for layer in (growing, plain):
        layer.crop(-2)  # replaces keys from outside the layer: the next update copies into fresh room
        layer.update(*_kv(3, 2, 11))
    _same(growing, plain)
    assert growing.keys.shape == (3, 2, 5 + 2 + 4 + 1 - 2 + 2, 4)


def test_growing_cache_swaps_only_plain_full_attention_layers():
    model, _ = tiny_llama(seed=1)
    cache = growing_cache(model.config, [_kv(1, 3, i) for i in range(model.config.num_hidden_layers)])
    assert isinstance(cache, DynamicCache)
    assert [type(layer) for layer in cache.layers] == [GrowingLayer] * model.config.num_hidden_layers
    assert cache.get_seq_length() == 3
    lazy = growing_cache(None)  # no config: layers are made as the model asks, and they grow in place
    lazy.update(*_kv(1, 2, 0), layer_idx=0)
    assert type(lazy.layers[0]) is GrowingLayer

    from transformers import Qwen2Config

    sliding = Qwen2Config(num_hidden_layers=2, use_sliding_window=True, sliding_window=4, max_window_layers=1)
    kept = growing_cache(sliding, [_kv(1, 3, 0), _kv(1, 3, 1)])  # a sliding-window layer: transformers' layers
    assert [type(layer) for layer in kept.layers] == [type(layer) for layer in DynamicCache(config=sliding).layers]
    assert GrowingLayer not in {type(layer) for layer in kept.layers} and kept.get_seq_length() == 3


@pytest.mark.parametrize("reuse", [False, True])
def test_samples_are_bit_for_bit_those_of_dynamic_cache(monkeypatch, reuse):
    """Tokens and logprobs exactly equal (not approximately): n samples per prompt (rows repeated), rows that
    finish early (rows dropped), completions longer than the room (reallocation), a trajectory's prompts served
    from one host, and an episode's turns extending kept prompts."""
    model, tokenizer = tiny_llama(seed=4)
    sampler = HFSampler(model, tokenizer, max_batch_size=8, cache_implementation="dynamic")
    history = list(range(40, 100))
    turns = [[history[:30], history[:45], history, [7, 8, 9, 10]], [history + [3, 4, 5, 6], [7, 8, 9, 10, 11, 12]]]
    params = SamplingParams(temperature=1.0, max_new_tokens=9)

    def draw() -> list[tuple[list[int], list[float], str | None]]:
        out = []
        with sampler.reuse_prefixes() if reuse else torch.no_grad():
            for prompts in turns:
                groups = sampler.sample(prompts, n=3, params=params, seeds=list(range(len(prompts))))
                out += [(c.token_ids, c.logprobs, c.finish_reason) for g in groups for c in g]
        return out

    monkeypatch.setattr(GrowingLayer, "headroom", 4)
    sampler.eos_ids = set()
    sampler.eos_ids = {tokens[4] for tokens, _, _ in draw()[::5]}  # some rows stop early
    grown = draw()
    monkeypatch.setattr(kv_cache, "growing_cache", lambda config=None, data=None: DynamicCache(data, config))
    assert draw() == grown
    assert {finish for _, _, finish in grown} == {"stop", "length"}
