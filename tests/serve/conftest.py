"""Two real servers on 127.0.0.1 for the ``pivotgym serve`` tests.

* ``server``: ``python -m pivotgym.cli serve`` in a subprocess, with the installed plugins (the first-party
  domains): what a user starts. Stopped at the end of the session.
* ``lab``: the same app under uvicorn in a thread of the test process, with small limits (a 4-session cap,
  a 2 s idle timeout, a 1 s step deadline, a 64 KiB body limit) and one extra env, ``test/sleep-v0``, whose
  action is a number of seconds to sleep: it makes concurrency and deadlines measurable.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from pivotgym.env import AgentEnv, StepOutcome
from pivotgym.errors import InvalidAction
from pivotgym.hookspecs import hookimpl
from pivotgym.types import Task, message

ROOT = Path(__file__).resolve().parents[2]
LAB_LIMITS = {"max_sessions": 4, "idle_timeout": 2.0, "step_timeout": 1.0, "max_body_bytes": 64 * 1024}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_healthy(url: str, proc: subprocess.Popen | None = None, deadline_s: float = 60.0) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer /health within {deadline_s}s")


@contextmanager
def in_thread(app: Any, name: str) -> Iterator[str]:
    """Serve ``app`` with uvicorn in a thread of this process on a free port; its URL once it answers /health."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, name=name, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.config.port}"
    try:
        wait_healthy(url, deadline_s=30)
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=15)


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of a ``pivotgym serve`` subprocess (8 sessions, idle timeout 120 s)."""
    port = free_port()
    log = (tmp_path_factory.mktemp("serve") / "server.log").open("w+")  # a file: a full pipe would block it
    proc = subprocess.Popen(
        [sys.executable, "-m", "pivotgym.cli", "serve", "--port", str(port), "--max-sessions", "8"]
        + ["--idle-timeout", "120"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=log,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    url = f"http://127.0.0.1:{port}"
    try:
        try:
            wait_healthy(url, proc)
        except RuntimeError as exc:
            log.seek(0)
            raise RuntimeError(f"{exc}\n{log.read()[-3000:]}") from None
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


# ------------------------------------------------------------------------------------------------ the lab
class SleepEnv(AgentEnv):
    """An action ``"0.5"`` sleeps half a second and is rewarded 1; anything that is not a number is invalid.
    The ``broken`` split's task fails on reset (a bug in an env: the server must answer 500, not crash)."""

    splits = ("train", "broken")
    max_turns = 50

    def load_tasks(self, split: str) -> list[Task]:
        if split == "broken":
            return [Task(id="boom", split=split)]
        return [Task(id=f"sleep-{i}", split=split) for i in range(3)]

    def initial_messages(self, task: Task) -> list:
        if task.id == "boom":
            raise RuntimeError("the env crashed while opening the task")
        return [message("user", f"Sleep (task {task.id}).")]

    def apply_action(self, action: str) -> StepOutcome:
        try:
            seconds = float(action)
        except ValueError:
            raise InvalidAction("write a number of seconds") from None
        time.sleep(seconds)
        return StepOutcome([message("user", f"slept {seconds}")], reward=1.0, info={"slept": seconds})


class _LabPlugin:
    @hookimpl
    def register_environments(self, register) -> None:
        register("test/sleep-v0", SleepEnv, verifier="exact", description="sleeps for the action's seconds")


@pytest.fixture(scope="module")
def lab() -> Iterator[str]:
    """The URL of an in-thread server with :data:`LAB_LIMITS` and ``test/sleep-v0`` registered."""

    from pivotgym.plugins import PluginManager
    from pivotgym.registry import Registry, reset_registry
    from pivotgym.serve import ServeConfig, create_app

    plugins = PluginManager()
    plugins.load_builtins()
    plugins.load_entry_points()
    plugins.add(_LabPlugin(), "serve-lab")
    reset_registry(Registry.from_plugins(plugins))
    try:
        with in_thread(create_app(ServeConfig(**LAB_LIMITS)), "serve-lab") as url:
            yield url
    finally:
        reset_registry()


@pytest.fixture(scope="module")
def guarded() -> Iterator[str]:
    """The URL of an in-thread server started with the token ``s3cret-token``."""
    from pivotgym.serve import ServeConfig, create_app

    with in_thread(create_app(ServeConfig(token="s3cret-token")), "serve-auth") as url:
        yield url


@pytest.fixture(scope="module")
def two_workers() -> Iterator[tuple[str, subprocess.Popen]]:
    """``pivotgym serve --workers 2`` in a subprocess: (its URL, the process). test_workers.py stops it last."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pivotgym.cli", "serve", "--port", str(port), "--workers", "2", "--max-sessions", "32"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc)
        yield url, proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=30)
