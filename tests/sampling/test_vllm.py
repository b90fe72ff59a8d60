"""vLLM against the transformers sampler, on the bundled SmolLM2 model, with the backends' own defaults.

The in-process ``vllm`` backend runs in the vLLM venv (``make vllm``; ``make test`` builds it and names it in
``$PIVOTGYM_VLLM_PYTHON``) through tests/sampling/vllm_calls.py; the ``openai`` backend talks to a real vLLM
server that :class:`~pivotgym.sampling.vllm.VLLMServer` starts on 127.0.0.1 and stops. One engine per module,
eager mode, a few short calls. Each is compared with :class:`~pivotgym.sampling.hf.HFSampler` (fp32 on CPU):
greedy tokens, text, finish reasons and prompt token ids (the chat template) equal; logprobs within
``LOGPROB_TOL``; stop strings cut; greedy ``n > 1``; seeded samples reproducible, scored alike by both.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pivotgym.sampling.base import SamplerError, SamplingParams, sample_seeded
from pivotgym.sampling.vllm import VLLM_PYTHON_ENV, VLLMServer, engine_defaults, find_vllm_python, server_flags
from pivotgym.types import Completion

HAS_VLLM = importlib.util.find_spec("vllm") is not None
ROOT = Path(__file__).resolve().parents[2]
VLLM_PYTHON = find_vllm_python(ROOT)
_skip_without_vllm = pytest.mark.skipif(
    VLLM_PYTHON is None,
    reason=f"vLLM is not installed: `make vllm` builds {ROOT / '.venv-vllm'} (`make test` does it first)",
)


def needs_vllm(test: Any) -> Any:
    """Runs in the vLLM interpreter: marked ``vllm`` (``make test-fast`` leaves it out), skipped without one."""
    return pytest.mark.vllm(_skip_without_vllm(test))


#: fp32 on both sides: differences come from kernel order only (seen: < 1e-4)
LOGPROB_TOL = 2e-3
MODEL = "smollm2-135m"
HI = [{"role": "user", "content": "Say hi"}]
SUM = [{"role": "user", "content": "What is 2+2? Answer with just the number."}]  # greedy ends with EOS
EOS = 2  # SmolLM2's <|im_end|>
PAST_WINDOW = [{"role": "user", "content": "word " * 9000}]  # ~9k tokens: past SmolLM2's 8192

#: (name, prompts, n, params, seeds): the calls both vLLM backends make
CALLS: list[tuple[str, list[Any], int, SamplingParams, list[int] | None]] = [
    ("greedy", [HI, SUM], 3, SamplingParams(temperature=0.0, max_new_tokens=10), None),
    ("stop", [HI], 1, SamplingParams(temperature=0.0, max_new_tokens=10, stop=[","]), None),
    ("seeded", [HI, SUM], 4, SamplingParams(temperature=1.0, max_new_tokens=6), [5, 6]),
    ("seeded_again", [HI, SUM], 4, SamplingParams(temperature=1.0, max_new_tokens=6), [5, 6]),
    ("overflow", [PAST_WINDOW, HI], 2, SamplingParams(temperature=1.0, max_new_tokens=4), [7, 8]),
]


def check_overflow(results: dict[str, list[list[Completion]]]) -> None:
    """A prompt past the model's 8192-token window gets error completions naming the cause (vLLM would refuse
    the whole batch); the prompt beside it is sampled."""
    past, fits = results["overflow"]
    assert [c.finish_reason for c in past] == ["error", "error"] and past[0].text.startswith("context_window:")
    assert all(c.finish_reason in ("stop", "length") and c.token_ids for c in fits)


@pytest.mark.skipif(HAS_VLLM, reason="vLLM is installed; the missing-package error cannot be observed")
def test_missing_vllm_gives_an_install_hint():
    from pivotgym.registry import get_registry

    with pytest.raises(SamplerError, match=r"pivotgym\[vllm\].*make vllm"):
        get_registry().make_sampler("vllm", "smollm2-135m")


def test_cpu_defaults_are_safe_and_callers_win():
    cpu = engine_defaults(cpu=True)
    assert cpu["enable_chunked_prefill"] is False and cpu["dtype"] == "float32" and cpu["enforce_eager"] is True
    assert engine_defaults(cpu=False) == {"enable_prefix_caching": True}  # CUDA: vLLM's own choices
    from pivotgym.sampling.vllm import engine_arguments, engine_environment

    assert engine_arguments({"dtype": "bfloat16", "enforce_eager": None}, cpu=True)["dtype"] == "bfloat16"
    assert "enforce_eager" not in engine_arguments({"enforce_eager": None}, cpu=True)
    assert engine_environment(True, {}) == {"VLLM_CPU_KVCACHE_SPACE": "2"}
    assert engine_environment(True, {"VLLM_CPU_KVCACHE_SPACE": "8"}) == {}
    assert engine_environment(False, {}) == {}
    assert server_flags({"enable_chunked_prefill": False, "enforce_eager": True, "max_model_len": 512}) == [
        "--no-enable-chunked-prefill",
        "--enforce-eager",
        "--max-model-len",
        "512",
    ]


# ------------------------------------------------------------------------------------------- reference
@pytest.fixture(scope="module")
def reference(smollm2) -> dict[str, list[list[Completion]]]:
    """What the transformers sampler returns for the greedy calls (seeded ones differ by RNG, see below)."""
    return {
        name: smollm2.sample(prompts, n=n, params=params)
        for name, prompts, n, params, seeds in CALLS
        if params.temperature == 0
    }


def check_against_hf(results: dict[str, list[list[Completion]]], reference: dict[str, Any], smollm2) -> None:
    greedy = results["greedy"]
    for got, want in zip(greedy, reference["greedy"]):
        assert len(got) == 3 and len({id(c) for c in got}) == 3  # greedy n=3: three (identical) copies
        for g, w in zip(got, want):
            assert g.prompt_token_ids == w.prompt_token_ids  # the same chat template, generation prompt included
            assert (g.token_ids, g.text, g.finish_reason) == (w.token_ids, w.text, w.finish_reason)
            assert g.logprobs == pytest.approx(w.logprobs, abs=LOGPROB_TOL)
    hi, total = greedy[0][0], greedy[1][0]
    assert hi.finish_reason == "length" and len(hi.token_ids) == 10
    assert total.finish_reason == "stop" and total.token_ids[-1] == EOS  # EOS kept, as the HF sampler does
    [[stop]] = results["stop"]
    [[want]] = reference["stop"]
    assert stop.finish_reason == "stop" and "," not in stop.text and stop.text == want.text
    assert stop.token_ids == want.token_ids  # up to and including the token that completed the stop string
    seeded, again = results["seeded"], results["seeded_again"]
    assert [[c.token_ids for c in g] for g in seeded] == [[c.token_ids for c in g] for g in again]
    flat = [c for group in seeded for c in group]
    assert all(len(group) == 4 and len({tuple(c.token_ids) for c in group}) > 1 for group in seeded)
    assert all(c.finish_reason in ("stop", "length") and len(c.token_ids) == len(c.logprobs) <= 6 for c in flat)
    # vLLM's RNG is not ours, so compare what the transformers model says of vLLM's own samples
    scored = smollm2.score_batch([c.prompt_token_ids for c in flat], [c.token_ids for c in flat])
    for c, want in zip(flat, scored):
        assert c.logprobs == pytest.approx(want, abs=LOGPROB_TOL)


# ----------------------------------------------------------------------------------- in-process engine
@pytest.fixture(scope="module")
def in_process(tmp_path_factory) -> dict[str, Any]:
    """The in-process backend's answers to CALLS, from one engine in the vLLM venv."""
    assert VLLM_PYTHON is not None
    assert Path(VLLM_PYTHON).is_file(), f"{VLLM_PYTHON_ENV} names {VLLM_PYTHON}, which does not exist"
    folder = tmp_path_factory.mktemp("vllm")
    spec = {
        "model": MODEL,
        "calls": [
            {"prompts": prompts, "n": n, "params": params.to_dict(), "seeds": seeds}
            for _, prompts, n, params, seeds in CALLS
        ],
    }
    (folder / "spec.json").write_text(json.dumps(spec))
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("VLLM_CPU_KVCACHE_SPACE", None)  # the backend's own bound must apply
    run = subprocess.run(
        [VLLM_PYTHON, str(Path(__file__).with_name("vllm_calls.py")), str(folder / "spec.json"), str(folder / "out")],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-6000:]
    data = json.loads((folder / "out").read_text())
    data["results"] = {
        name: [[Completion.from_dict(c) for c in group] for group in groups]
        for (name, *_), groups in zip(CALLS, data["results"])
    }
    data["log"] = run.stdout + run.stderr
    return data


@needs_vllm
def test_in_process_vllm_matches_the_transformers_sampler(in_process, reference, smollm2):
    check_against_hf(in_process["results"], reference, smollm2)
    check_overflow(in_process["results"])


@needs_vllm
def test_in_process_vllm_defaults_are_recorded_and_applied(in_process):
    described = in_process["describe"]
    assert described["backend"] == "vllm" and described["model"] == MODEL
    assert (described["dtype"], described["device"]) == ("float32", "cpu")
    assert described["vllm"] and described["revision"]
    log = in_process["log"]
    assert "'enable_chunked_prefill': False" in log and "'dtype': 'float32'" in log
    assert "Explicitly set (2.0/" in log  # VLLM_CPU_KVCACHE_SPACE=2 GiB, not 92% of the RAM


# ---------------------------------------------------------------------------------------------- server
@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[VLLMServer]:
    assert VLLM_PYTHON is not None
    log = tmp_path_factory.mktemp("vllm-server") / "server.log"
    env_before = os.environ.pop("VLLM_CPU_KVCACHE_SPACE", None)
    try:
        with VLLMServer(MODEL, python=VLLM_PYTHON, log=log, startup_timeout=600) as running:
            yield running
    finally:
        if env_before is not None:
            os.environ["VLLM_CPU_KVCACHE_SPACE"] = env_before
    assert running.process is None  # stopped


@needs_vllm
def test_openai_backend_on_a_vllm_server_matches_the_transformers_sampler(server, reference, smollm2):
    from pivotgym.sampling.openai import OpenAISampler

    client = OpenAISampler.for_server(server)
    assert client.describe()["dtype"] == "float32" and client.base_url == server.base_url
    results = {}
    for name, prompts, n, params, seeds in CALLS:
        if seeds is None:
            results[name] = client.sample(prompts, n=n, params=params)
        else:  # the profiler's route: one concurrent request per prompt, each with its own seed
            results[name] = sample_seeded(client, prompts, n, params, seeds)
    check_against_hf(results, reference, smollm2)
    check_overflow(results)  # the window read from the server's /v1/models
    assert client.served_name() == MODEL


@needs_vllm
def test_server_names_the_model_and_says_what_it_serves(server):
    from pivotgym.sampling.models import model_dir
    from pivotgym.sampling.openai import OpenAISampler

    by_folder = OpenAISampler(str(model_dir(MODEL)), base_url=server.base_url)  # the folder, not the alias
    out = by_folder.sample([SUM], params=SamplingParams(temperature=0.0, max_new_tokens=3))[0][0]
    assert by_folder.served_name() == MODEL and len(out.token_ids) == 3
    with pytest.raises(SamplerError, match=r"HTTP 404.*serves \['smollm2-135m'\]"):
        OpenAISampler("other-model", base_url=server.base_url, tokenizer=by_folder.tokenizer).sample(
            [SUM], params=SamplingParams(max_new_tokens=2)
        )
    log = Path(server.log_path or "").read_text(errors="replace")
    assert "'enable_chunked_prefill': False" in log and "Explicitly set (2.0/" in log


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_VLLM, reason="vLLM is not installed in this interpreter")
def test_vllm_on_cuda_samples_token_ids_and_logprobs():
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from pivotgym.sampling.vllm import VLLMSampler

    sampler = VLLMSampler("smollm2-135m", gpu_memory_utilization=0.3)
    out = sampler.sample([HI], n=4, params=SamplingParams(max_new_tokens=8, seed=0))
    assert len(out[0]) == 4
    assert all(len(c.token_ids) == len(c.logprobs) > 0 for c in out[0])
    assert sampler.describe()["device"] == "cuda"
