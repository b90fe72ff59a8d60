"""``pivotgym serve --workers 2``: two processes behind one port, sessions pinned to the one holding them
(``worker_url`` for our clients, a 307 redirect for others), the async client driving many sessions at once,
and the workers gone when the server is stopped."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time

import httpx
import pytest
from core_helpers import expert_episode

from pivotgym.remote import AsyncRemoteEnv, RemoteEnv

ENV = "planning/blocks-v0"


def test_sessions_spread_over_the_workers_and_each_plays_where_it_lives(two_workers):
    url, _ = two_workers
    task_id, actions = expert_episode(ENV)
    envs = [RemoteEnv(url, ENV) for _ in range(24)]
    try:
        owners = {env.session_id.split("-")[0] for env in envs if env.session_id}
        assert owners == {"w0", "w1"}  # 24 connections hashed over two sockets: both get some
        assert all(env.session_info["worker_url"] != url for env in envs)
        for env in envs[:4]:
            env.reset(options={"task_id": task_id})
            steps = [env.step(a) for a in actions]
            assert steps[-1][1] == 1.0 and steps[-1][2] is True
    finally:
        for env in envs:
            env.close()


def test_another_client_reaching_the_wrong_worker_is_redirected_to_the_right_one(two_workers):
    url, _ = two_workers
    with RemoteEnv(url, ENV) as env:
        codes = set()
        for seed in range(24):  # each request a new connection through the public port
            raw = httpx.post(f"{url}/sessions/{env.session_id}/reset", json={"seed": seed})
            codes.add(raw.status_code)
            if raw.status_code == 307:
                assert raw.headers["location"].startswith(env.session_info["worker_url"])
                followed = httpx.post(
                    f"{url}/sessions/{env.session_id}/reset", json={"seed": seed}, follow_redirects=True
                )
                assert followed.status_code == 200 and followed.json()["observation"]
        assert codes == {200, 307}


def test_the_async_client_drives_many_sessions_at_once(two_workers):
    url, _ = two_workers
    task_id, actions = expert_episode(ENV)

    async def play() -> float:
        async with await AsyncRemoteEnv.open(url, ENV) as env:
            await env.reset(options={"task_id": task_id})
            reward = 0.0
            for action in actions:
                _, reward, terminated, truncated, _ = await env.step(action)
                if terminated or truncated:
                    break
            assert (await env.state())["done"] is True
            return reward

    async def main() -> list[float]:
        return list(await asyncio.gather(*(play() for _ in range(16))))

    assert asyncio.run(main()) == [1.0] * 16


def test_stopping_the_server_stops_its_workers(two_workers):
    url, proc = two_workers
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            httpx.get(f"{url}/health", timeout=1)
        except httpx.TransportError:
            break
        time.sleep(0.2)
    else:
        pytest.fail("a worker still answers on the public port after the server was stopped")
    orphans = subprocess.run(["pgrep", "-P", str(os.getpid()), "-f", "spawn_main"], capture_output=True, text=True)
    assert not orphans.stdout.strip()
