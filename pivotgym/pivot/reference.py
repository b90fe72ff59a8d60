"""The frozen reference policy that profiling samples from, built by sampler backend name."""

from __future__ import annotations

from typing import Any


def make_reference_sampler(sampler: str, model: str, **kwargs: Any) -> Any:
    """The frozen reference policy: a sampler backend from the registry (``hf`` by default)."""
    from pivotgym.registry import RegistryError, get_registry

    try:
        return get_registry().make_sampler(sampler, model=model, **kwargs)
    except RegistryError:
        if sampler != "hf":
            raise
        from pivotgym.sampling.hf import HFSampler  # the core backend, even before it is registered

        return HFSampler(model=model, **kwargs)
