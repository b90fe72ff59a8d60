"""The in-process vLLM backend: a clear error without vLLM; a real run where vLLM and a GPU exist."""

from __future__ import annotations

import importlib.util

import pytest

from pivotgym.sampling.base import SamplerError, SamplingParams

HAS_VLLM = importlib.util.find_spec("vllm") is not None


@pytest.mark.skipif(HAS_VLLM, reason="vLLM is installed; the missing-package error cannot be observed")
def test_missing_vllm_gives_an_install_hint():
    from pivotgym.registry import get_registry

    with pytest.raises(SamplerError, match=r"pivotgym\[vllm\]"):
        get_registry().make_sampler("vllm", "smollm2-135m")


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_VLLM, reason="vLLM is not installed (optional extra pivotgym[vllm])")
def test_vllm_samples_token_ids_and_logprobs():
    import torch

    if not torch.cuda.is_available():
        pytest.skip("vLLM needs a CUDA GPU")
    from pivotgym.sampling.vllm import VLLMSampler

    sampler = VLLMSampler("smollm2-135m", gpu_memory_utilization=0.3)
    out = sampler.sample(
        [[{"role": "user", "content": "Say hi"}]], n=4, params=SamplingParams(max_new_tokens=8, seed=0)
    )
    assert len(out[0]) == 4
    assert all(len(c.token_ids) == len(c.logprobs) > 0 for c in out[0])
