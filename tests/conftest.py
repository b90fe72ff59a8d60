"""Shared fixtures: the third-party test plugins, installed by pip into a private site directory."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

TESTS = Path(__file__).parent
TEST_PLUGINS = TESTS / "plugins"


@pytest.fixture(scope="session")
def plugin_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding the test plugin distributions, installed with plain `pip install` (so their
    entry points are discovered exactly as for any third-party plugin)."""
    target = tmp_path_factory.mktemp("plugin-site")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(target),
            str(TEST_PLUGINS / "pivotgym-arith"),
            str(TEST_PLUGINS / "pivotgym-broken"),
        ],
        check=True,
    )
    return target


def _use_site(site: Path | None, monkeypatch: pytest.MonkeyPatch, load_only: str | None) -> None:
    from pivotgym.registry import reset_registry

    if site is not None:
        monkeypatch.syspath_prepend(str(site))
    if load_only is None:
        monkeypatch.delenv("PIVOTGYM_LOAD_PLUGINS", raising=False)
    else:
        monkeypatch.setenv("PIVOTGYM_LOAD_PLUGINS", load_only)
    importlib.invalidate_caches()
    reset_registry()


@pytest.fixture()
def arith_registry(plugin_site: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """The process registry with the third-party `arith` plugin loaded (and only it, among test plugins)."""
    from pivotgym.registry import get_registry, reset_registry

    installed = os.environ.get("PIVOTGYM_LOAD_PLUGINS")
    _use_site(plugin_site, monkeypatch, installed and installed + ",arith")
    yield get_registry()
    reset_registry()


@pytest.fixture()
def all_test_plugins(plugin_site: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """The process registry with every test plugin, the broken ones included."""
    from pivotgym.registry import get_registry, reset_registry

    _use_site(plugin_site, monkeypatch, None)
    yield get_registry()
    reset_registry()


@pytest.fixture(scope="session")
def tiny_sampler() -> object:
    """The real HF sampling code on a tiny random Llama with SmolLM2's tokenizer (fast, gibberish text)."""
    from pivotgym.sampling.hf import HFSampler
    from pivotgym.sampling.testing import tiny_llama

    model, tokenizer = tiny_llama(seed=0)
    return HFSampler(model, tokenizer=tokenizer)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny Llama saved as a model folder, for CLI runs (`--model DIR`)."""
    from pivotgym.sampling.testing import tiny_llama

    folder = tmp_path_factory.mktemp("tiny-llama")
    model, tokenizer = tiny_llama(seed=0)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
