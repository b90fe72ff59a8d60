"""Sampling backends (token in, token out). See :mod:`pivotgym.sampling.base` for the protocol.

Backends: :class:`pivotgym.sampling.hf.HFSampler` (transformers, shared prefill), ``vllm.VLLMSampler``
(in-process vLLM, optional extra) and ``openai.OpenAISampler`` (any OpenAI-compatible server). Models:
:mod:`pivotgym.sampling.models` (``DEFAULT_MODEL``, ``resolve_model``, ``pull_default_model``). Heavy
modules are imported lazily, so ``import pivotgym.sampling`` stays cheap.
"""

from pivotgym.sampling.base import Prompt, Sampler, SamplingParams, sample_seeded
from pivotgym.sampling.models import DEFAULT_MODEL, load_model_and_tokenizer, pull_default_model, resolve_model

__all__ = [
    "DEFAULT_MODEL",
    "Prompt",
    "Sampler",
    "SamplingParams",
    "load_model_and_tokenizer",
    "pull_default_model",
    "resolve_model",
    "sample_seeded",
]
