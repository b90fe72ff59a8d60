"""Fixtures of the τ² tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def tiny_sampler():
    """The real transformers sampling code on a tiny random Llama with SmolLM2's tokenizer (fast, gibberish)."""
    from pivotgym.sampling.hf import HFSampler
    from pivotgym.sampling.testing import tiny_llama

    model, tokenizer = tiny_llama(seed=0)
    return HFSampler(model, tokenizer=tokenizer)
