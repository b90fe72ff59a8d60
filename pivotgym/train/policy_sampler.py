"""The sampler a trainer generates with, kept equal to the policy it trains.

``sampler: hf`` (the default) wraps the live model in an :class:`~pivotgym.sampling.hf.HFSampler`: it always
samples the current weights and there is nothing to copy. Any other registered backend (``vllm``) is built
once, in this process, from the run's starting model (a *colocated* engine), and receives the policy's
weights whenever they changed since it last sampled: after each optimiser step (and after a resume), before
the next rollout or evaluation. Token ids and logprobs of the samples are the engine's; the RL loss recomputes
logprobs with the policy, so the engine only has to sample the same distribution (checked per step by
``sampler_ratio``, see :mod:`pivotgym.train.rl`).

A backend takes weights when it has ``load_weights(weights)`` (an iterable of ``(name, tensor)`` with the
names of the Hugging Face model; :meth:`pivotgym.sampling.vllm.VLLMSampler.load_weights` for ``vllm``); one
without it (a server behind ``openai``) is refused, since it would keep sampling the starting policy.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch

from pivotgym.errors import ConfigError

#: ``(name, tensor)`` pairs under the Hugging Face model's parameter names
Weights = Iterable[tuple[str, torch.Tensor]]

__all__ = [
    "LIVE_SAMPLER",
    "colocated_engine_env",
    "follows_weights",
    "policy_weights",
    "push_weights",
    "sampling_copy",
    "weight_loader",
]

#: the backend that wraps the training model itself (no copy of the weights to keep in step)
LIVE_SAMPLER = "hf"


def policy_weights(model: Any) -> Iterator[tuple[str, torch.Tensor]]:
    """The weights a sampler needs to generate like ``model``, under the plain model's parameter names.

    A LoRA (peft) policy yields its base weights with the adapter's delta added (``W + B A * scale``),
    computed per layer without touching the training model, under the names of the merged model; adapter
    tensors themselves are not yielded. Tensors are detached views (no copy for a plain model)."""
    from pivotgym.train.export import is_peft_model

    if not is_peft_model(model):
        for name, param in model.named_parameters():
            yield name, param.detach()
        return
    base = model.get_base_model()
    layers = {n: m for n, m in base.named_modules() if hasattr(m, "get_delta_weight") and hasattr(m, "base_layer")}
    for name, param in base.named_parameters():
        if ".lora_" in name:
            continue
        owner, sep, leaf = name.partition(".base_layer.")
        if not sep:
            yield name, param.detach()
            continue
        value = param.detach()
        layer = layers.get(owner)
        if layer is not None and leaf == "weight":
            for adapter in layer.active_adapters:
                if adapter in getattr(layer, "lora_A", {}) and adapter not in getattr(layer, "merged_adapters", []):
                    value = value + layer.get_delta_weight(adapter).detach().to(value.dtype)
        yield f"{owner}.{leaf}", value


def sampling_copy(model: Any, dtype: torch.dtype) -> Any:
    """A copy of ``model`` in ``dtype`` to sample from (LoRA merged in), in eval mode and without gradients;
    its parameters are cast, its buffers kept, exactly as when a saved model is loaded in ``dtype``
    (:func:`~pivotgym.sampling.models.cast_parameters`).

    Under bf16 mixed precision the policy's weights stay fp32 and autocast casts each of them again at every
    forward; a copy kept in bf16 (refreshed by :func:`push_weights` after the weights change) skips those
    casts. Whether that pays depends on the workload: ``benchmarks/precision.py`` measures prefill-heavy turn
    prompts and decode-heavy rollouts.
    """
    import copy

    from pivotgym.sampling.models import cast_parameters
    from pivotgym.train.export import is_peft_model

    twin = copy.deepcopy(model)
    if is_peft_model(twin):
        twin = twin.merge_and_unload()
    return cast_parameters(twin, dtype).eval().requires_grad_(False)


def follows_weights(name: str, factory: Any) -> bool:
    """Whether sampler ``name`` (built by ``factory``, a class) can sample a policy that training changes,
    known before building it: the live ``hf`` sampler, or a backend with ``load_weights`` (``vllm``)."""
    return name == LIVE_SAMPLER or callable(getattr(factory, "load_weights", None))


def weight_loader(sampler: Any, name: str = "") -> Callable[[Weights], None]:
    """How ``sampler`` takes new weights (its ``load_weights``); :class:`ConfigError` when it cannot."""
    load = getattr(sampler, "load_weights", None)
    if callable(load):
        return load
    backend = name or getattr(sampler, "backend", type(sampler).__name__)
    raise ConfigError(
        f"sampler {backend!r} cannot receive the policy's weights, so it would keep sampling the starting "
        "model while training changes it",
        hint="use sampler: hf (the live model) or sampler: vllm (a colocated engine that is kept in step)",
    )


def push_weights(sampler: Any, model: Any, name: str = "") -> None:
    """Copy ``model``'s current weights (:func:`policy_weights`) into ``sampler``."""
    with torch.no_grad():
        weight_loader(sampler, name)(policy_weights(model))


def colocated_engine_env() -> None:
    """Ask vLLM to run its engine core in this process (unless the user chose otherwise), so weights load
    straight into the engine's model instead of being sent to another process."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
