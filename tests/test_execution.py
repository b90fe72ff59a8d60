"""The executors: ordered results, per-task deadlines, crash isolation, plugin visibility in workers."""

from __future__ import annotations

import os
import time

import pytest

from pivotgym.execution import ProcessExecutor, RayExecutor, SerialExecutor, WorkerSetup, make_executor


def behave(item: tuple[str, int]) -> int:
    kind, value = item
    if kind == "hang":
        time.sleep(600)
    if kind == "crash":
        os._exit(3)
    if kind == "raise":
        raise ValueError(f"bad value {value}")
    return value * value


def loaded_envs(_: object) -> list[str]:
    from pivotgym.registry import get_registry

    return sorted(get_registry().envs)


ITEMS = [("ok", 1), ("hang", 2), ("ok", 3), ("crash", 4), ("raise", 5), ("ok", 6)]


def _check_mixed(results: list) -> None:
    assert [r.index for r in results] == list(range(len(ITEMS)))
    assert [r.value for r in results if r.ok] == [1, 9, 36]
    assert results[1].error.startswith("timeout:")
    assert results[3].error.startswith("crashed:")
    assert results[4].error.startswith("exception:") and "bad value 5" in results[4].error


def test_process_executor_survives_hung_and_crashing_tasks() -> None:
    seen = []
    with ProcessExecutor(workers=2, timeout=3.0) as ex:
        start = time.monotonic()
        results = ex.map(behave, ITEMS, on_result=seen.append)
        elapsed = time.monotonic() - start
        _check_mixed(results)
        assert ex.restarts == 2  # the hung worker and the crashed one were replaced
        assert sorted(r.index for r in seen) == list(range(len(ITEMS)))
        # the pool keeps working after replacing workers
        assert [r.value for r in ex.map(behave, [("ok", 7), ("ok", 8)])] == [49, 64]
    assert elapsed < 20


def test_process_workers_see_the_callers_plugins(arith_registry: object) -> None:
    with ProcessExecutor(workers=1) as ex:
        [result] = ex.map(loaded_envs, [None])
    assert result.ok, result.error
    assert "arith/chain-v0" in result.value


def test_serial_executor_reports_timeouts() -> None:
    ex = SerialExecutor(timeout=0.5)
    results = ex.map(behave, [("ok", 2), ("raise", 1), ("hang", 0)])
    assert results[0].value == 4
    assert results[1].error.startswith("exception:")
    assert results[2].error.startswith("timeout:")


def test_make_executor_names() -> None:
    assert isinstance(make_executor("serial"), SerialExecutor)
    assert isinstance(make_executor(None, workers=2), ProcessExecutor)
    ray_ex = make_executor("ray:auto")
    assert isinstance(ray_ex, RayExecutor) and ray_ex.address == "auto"
    with pytest.raises(ValueError, match="unknown executor"):
        make_executor("threads")


def test_worker_setup_captures_plugin_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIVOTGYM_LOAD_PLUGINS", "arith")
    setup = WorkerSetup.capture()
    assert ("PIVOTGYM_LOAD_PLUGINS", "arith") in setup.env


@pytest.mark.slow  # ≥ 5 s on 2 cores (make test-fast leaves it out)
def test_ray_executor_starts_a_local_cluster() -> None:
    pytest.importorskip("ray")
    with RayExecutor(workers=2, timeout=6.0) as ex:
        results = ex.map(behave, ITEMS)
        _check_mixed(results)
        import ray

        assert ray.is_initialized()
        assert ray.cluster_resources().get("CPU") == 2
    assert not ray.is_initialized()
