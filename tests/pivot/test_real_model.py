"""The profiler with the real SmolLM2-135M reference policy on real domains (small K, few states)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pivotgym.jsonl import read_jsonl
from pivotgym.pivot import AdaptiveK, ProfileConfig, Profiler, select_pivots
from pivotgym.sampling.base import SamplingParams

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smollm2() -> object:
    from pivotgym.registry import make_sampler

    return make_sampler("hf", "smollm2-135m")


def test_profile_bfcl_states_with_smollm2(smollm2: object, tmp_path: Path) -> None:
    from pivotgym.registry import get_registry, make

    if "tooluse/bfcl-simple-v0" not in get_registry().envs:
        pytest.skip("the tooluse plugin is not installed (make install)")
    trajectories = list(make("tooluse/bfcl-simple-v0").expert_trajectories("train", limit=2))
    config = ProfileConfig(k=2, params=SamplingParams(temperature=1.0, max_new_tokens=40), timeout=30)
    out = tmp_path / "bfcl.jsonl"
    result = Profiler(smollm2, config, "process").profile(trajectories, out, progress=False)
    rows = read_jsonl(out)
    assert len(rows) == 2 and result.stats["samples"] == 4 and result.stats["verify_failures"] == 0
    for row in rows:
        assert row["reference"]["model"] and row["reference"]["revision"]
        assert row["verifier"]["name"] == get_registry().verifier_name_for("tooluse/bfcl-simple-v0")
        assert len(row["rewards"]) == 2 and all(reason for reason in row["reasons"])
    stats = select_pivots(result.profiles).stats["per_env"]["tooluse/bfcl-simple-v0"]
    assert stats["turns"] == 2


def test_adaptive_profile_arith_with_smollm2(pivot_registry: object, smollm2: object, tmp_path: Path) -> None:
    from pivotgym.registry import make

    trajectories = list(make("arith/chain-v0").expert_trajectories("train", limit=1))
    adaptive = AdaptiveK(max_mean=0.6, block=2)  # unanimity run derived from the bound (off at K=4)
    config = ProfileConfig(k=4, params=SamplingParams(temperature=1.0, max_new_tokens=8), adaptive=adaptive)
    result = Profiler(smollm2, config, "serial").profile(trajectories, tmp_path / "a.jsonl", progress=False)
    assert len(result.profiles) == len(trajectories[0].turns())
    for p in result.profiles:
        assert p.k in (2, 4) and p.metadata["stopped"] in ("unanimous", "mixed", "mean_settled_high", "budget")
        assert p.k == len(p.rewards) == len(p.reasons)
    assert result.stats["samples"] == sum(p.k for p in result.profiles)
