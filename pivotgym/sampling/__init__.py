"""Sampling backends (token in, token out). See :mod:`pivotgym.sampling.base` for the protocol."""

from pivotgym.sampling.base import Prompt, Sampler, SamplingParams

__all__ = ["Prompt", "Sampler", "SamplingParams"]
