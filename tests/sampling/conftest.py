"""Fixtures for the sampling tests: the tiny random Llama (fast) and the real default model (slow)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny():
    """(model, tokenizer) of a random-init tiny Llama with SmolLM2's tokenizer."""
    from pivotgym.sampling.testing import tiny_llama

    return tiny_llama(seed=0)


@pytest.fixture()
def tiny_sampler(tiny):
    from pivotgym.sampling.hf import HFSampler

    model, tokenizer = tiny
    return HFSampler(model, tokenizer)


@pytest.fixture(scope="session")
def smollm2():
    """HFSampler on the real SmolLM2-135M-Instruct, converted into the cache on first use (offline)."""
    from pivotgym.sampling.hf import HFSampler

    return HFSampler("smollm2-135m", device="cpu")
