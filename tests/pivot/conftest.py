"""Fixtures of the pivot tests: the arith and flaky test plugins (the tiny reference policy is in tests/conftest.py)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).parent
TESTS = HERE.parent


@pytest.fixture(scope="session")
def pivot_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """arith + flaky test plugins installed with pip into a private site directory."""
    target = tmp_path_factory.mktemp("pivot-site")
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
            str(TESTS / "plugins" / "pivotgym-arith"),
            str(HERE / "plugins" / "pivotgym-flaky"),
        ],
        check=True,
    )
    return target


@pytest.fixture()
def pivot_registry(pivot_site: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """The process registry with the arith and flaky plugins (plus whatever else is installed)."""
    import importlib

    from pivotgym.registry import get_registry, reset_registry

    monkeypatch.syspath_prepend(str(pivot_site))
    monkeypatch.setenv("PIVOTGYM_LOAD_PLUGINS", "arith,flaky")
    importlib.invalidate_caches()
    reset_registry()
    yield get_registry()
    reset_registry()


@pytest.fixture(autouse=True)
def _one_torch_thread() -> Iterator[None]:
    """Sample with one torch thread in these tests: on a small shared CPU, OpenMP threads competing with
    other processes (our own verification workers included) slow tiny-model sampling down ~10x."""
    try:
        import torch
    except ImportError:  # pragma: no cover
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
