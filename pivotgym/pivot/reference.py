"""The frozen reference policy that profiling samples from, built by sampler backend name."""

from __future__ import annotations

from typing import Any


def make_reference_sampler(sampler: str, model: str, **kwargs: Any) -> Any:
    """The frozen reference policy: the sampler backend ``sampler`` from the registry (``hf`` by default;
    ``pivotgym samplers`` lists them)."""
    from pivotgym.registry import get_registry

    return get_registry().make_sampler(sampler, model=model, **kwargs)
