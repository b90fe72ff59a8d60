"""Offline by default: an unknown model name fails at once with a message saying how to get it, nothing asks
transformers to reach the hub unless PIVOTGYM_ALLOW_DOWNLOADS opts in, and `model pull` downloads hub ids
explicitly. No test here touches the network (the hub client is replaced where a download would start)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from pivotgym.sampling import models

UNKNOWN = "pivotgym-tests/no-such-model-7f3a"


@pytest.fixture(autouse=True)
def offline(monkeypatch, tmp_path):
    """No opt-in, and an empty Hugging Face cache."""
    import huggingface_hub.constants

    monkeypatch.delenv(models.ALLOW_DOWNLOADS_ENV, raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf-cache"))


def _fake_hub_cache(root: Path, repo: str) -> Path:
    """The layout huggingface_hub leaves after downloading ``repo``: refs/main naming a snapshot folder."""
    base = root / ("models--" + repo.replace("/", "--"))
    snapshot = base / "snapshots" / ("a" * 40)
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (base / "refs").mkdir()
    (base / "refs" / "main").write_text("a" * 40)
    return snapshot


def test_an_unknown_name_fails_fast_with_how_to_get_it():
    started = time.perf_counter()
    with pytest.raises(models.ModelError) as caught:
        models.resolve_model(UNKNOWN)
    assert time.perf_counter() - started < 10
    message = str(caught.value)
    assert "\n" not in message
    assert f"model {UNKNOWN!r} is not found locally" in message
    assert f"`pivotgym model pull {UNKNOWN}`" in message and "PIVOTGYM_ALLOW_DOWNLOADS=1" in message


def test_a_misspelt_bundled_name_is_answered_with_the_bundled_one_not_a_download():
    with pytest.raises(models.ModelError) as caught:
        models.resolve_model("smollm2-136m")
    message = str(caught.value)
    assert "(did you mean 'smollm2-135m'?)" in message and "model pull" not in message, message


def test_loading_an_unknown_name_fails_before_transformers_is_asked(monkeypatch):
    import transformers

    def never(*args, **kwargs):
        raise AssertionError("from_pretrained must not be reached for an unknown name")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", never)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", never)
    from pivotgym.sampling.hf import HFSampler

    for load in (models.load_model_and_tokenizer, models.load_tokenizer, HFSampler):
        started = time.perf_counter()
        with pytest.raises(models.ModelError, match="not found locally"):
            load(UNKNOWN)
        assert time.perf_counter() - started < 10


def test_the_opt_in_lets_an_unknown_name_through_to_a_download(monkeypatch):
    import transformers

    assert models.hub_kwargs() == {"local_files_only": True} and not models.downloads_allowed()
    monkeypatch.setenv(models.ALLOW_DOWNLOADS_ENV, "1")
    assert models.downloads_allowed() and models.hub_kwargs() == {"local_files_only": False}
    assert models.resolve_model(UNKNOWN) == UNKNOWN  # transformers will download it
    seen = {}

    class Stop(Exception):
        pass

    def record(name, **kwargs):
        seen.update(kwargs, name=name)
        raise Stop

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", record)
    with pytest.raises(Stop):
        models.load_model_and_tokenizer(UNKNOWN, device="cpu")
    assert seen["name"] == UNKNOWN and seen["local_files_only"] is False
    for off in ("0", "", "no"):
        monkeypatch.setenv(models.ALLOW_DOWNLOADS_ENV, off)
        assert not models.downloads_allowed()


def test_local_loads_pass_local_files_only(monkeypatch, tmp_path):
    import transformers

    (tmp_path / "config.json").write_text("{}")
    seen = []

    class Stop(Exception):
        pass

    def record(name, **kwargs):
        seen.append(kwargs)
        raise Stop

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", record)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", record)
    for load in (models.load_tokenizer, lambda p: models.load_model_and_tokenizer(p, device="cpu")):
        with pytest.raises(Stop):
            load(str(tmp_path))
    assert [kw["local_files_only"] for kw in seen] == [True, True]


def test_a_hub_model_in_the_hf_cache_resolves_to_its_snapshot_offline():
    import huggingface_hub.constants

    snapshot = _fake_hub_cache(Path(huggingface_hub.constants.HF_HUB_CACHE), "someone/cached-model")
    assert models.resolve_model("someone/cached-model") == str(snapshot)
    assert models.pull_model("someone/cached-model") == snapshot  # already there: no download


def test_model_pull_downloads_a_hub_id_explicitly(monkeypatch, tmp_path):
    """`pivotgym model pull NAME` is the explicit way to get a hub model: no opt-in variable needed."""
    import huggingface_hub

    calls = []

    def fake_snapshot_download(repo_id, **kwargs):
        calls.append(kwargs)
        if kwargs.get("local_files_only"):
            raise huggingface_hub.errors.LocalEntryNotFoundError("not cached")
        folder = tmp_path / "downloaded"
        folder.mkdir(exist_ok=True)
        (folder / "config.json").write_text("{}")
        return str(folder)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot_download)
    assert models.pull_model("someone/fresh-model") == tmp_path / "downloaded"
    assert calls[0]["local_files_only"] is True  # the cache is looked at first
    assert not calls[1].get("local_files_only") and "*.safetensors" in calls[1]["allow_patterns"]

    def offline_download(repo_id, **kwargs):
        raise OSError("We couldn't connect to 'https://huggingface.co'\nsecond line")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline_download)
    with pytest.raises(models.ModelError, match=r"could not download model 'someone/fresh-model'.*couldn't connect"):
        models.pull_model("someone/fresh-model")
