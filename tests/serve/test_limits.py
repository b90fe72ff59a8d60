"""Concurrency, deadlines, the session cap and idle reaping, on the in-thread ``lab`` server (conftest.py):
4 sessions at most, 2 s idle timeout, 1 s step deadline, and ``test/sleep-v0`` whose action is seconds to
sleep."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from pivotgym.remote import RemoteEnv, RemoteError

ROOT = Path(__file__).resolve().parents[2]
SLEEP = "test/sleep-v0"


def health(url: str) -> dict:
    """What the server reports: its limits (max_sessions, idle_timeout, step_timeout), open and reaped counts."""
    return dict(httpx.get(f"{url}/health").json())


def test_steps_of_different_sessions_run_at_the_same_time(lab):
    remotes = [RemoteEnv(lab, SLEEP) for _ in range(4)]
    try:
        for r in remotes:
            r.reset(seed=0)
        barrier = threading.Barrier(len(remotes) + 1)
        rewards: list[float] = []

        def step(r: RemoteEnv) -> None:
            barrier.wait(timeout=10)
            rewards.append(r.step("0.6")[1])

        threads = [threading.Thread(target=step, args=(r,)) for r in remotes]
        for t in threads:
            t.start()
        barrier.wait(timeout=10)
        start = time.monotonic()
        for t in threads:
            t.join(timeout=10)
        wall = time.monotonic() - start
    finally:
        for r in remotes:
            r.close()
    assert rewards == [1.0] * 4
    assert wall < 1.8, f"4 steps of 0.6 s took {wall:.2f}s: they ran one after another (serial: 2.4 s)"


def test_a_second_request_to_a_busy_session_is_refused_with_409(lab):
    with RemoteEnv(lab, SLEEP) as remote:
        remote.reset(seed=0)
        outcome: dict[str, object] = {}

        def slow() -> None:
            outcome["slow"] = remote.step("0.8")[1]

        t = threading.Thread(target=slow)
        t.start()
        time.sleep(0.3)
        response = httpx.post(f"{lab}/sessions/{remote.session_id}/step", json={"action": "0"})
        t.join(timeout=10)
        assert response.status_code == 409 and response.json()["error"] == "session_busy"
        assert outcome["slow"] == 1.0  # the running step was not disturbed


def test_a_step_past_its_deadline_ends_the_episode_and_the_session_stays_usable(lab):
    with RemoteEnv(lab, SLEEP) as remote:
        assert remote.session_info["step_timeout"] == health(lab)["step_timeout"] == 1.0  # the server's bound
        remote.reset(seed=0)
        start = time.monotonic()
        obs, reward, terminated, truncated, info = remote.step("4")
        took = time.monotonic() - start
        assert info["error"] == "step_timeout" and truncated and not terminated and reward == 0.0
        assert took < 3.0, f"the 1 s deadline returned after {took:.2f}s"
        remote.reset(seed=1)
        assert remote.step("0")[1] == 1.0


def test_the_session_cap_answers_429_until_a_session_is_closed(lab):
    free = health(lab)["max_sessions"] - health(lab)["sessions"]
    remotes = [RemoteEnv(lab, SLEEP) for _ in range(free)]
    try:
        with pytest.raises(RemoteError) as refused:
            RemoteEnv(lab, SLEEP)
        assert refused.value.status == 429 and refused.value.code == "too_many_sessions"
        assert "--max-sessions" in (refused.value.hint or "")
        remotes.pop().close()
        extra = RemoteEnv(lab, SLEEP)
        extra.close()
    finally:
        for r in remotes:
            r.close()


KILLED_CLIENT = """
import sys, time
from pivotgym.remote import RemoteEnv
env = RemoteEnv(sys.argv[1], "test/sleep-v0")
env.reset(seed=0)
env.step("0")
print(env.session_id, flush=True)
time.sleep(600)
"""


def test_a_killed_clients_session_is_reaped_and_the_server_keeps_serving(lab):
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED_CLIENT, lab], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        session_id = proc.stdout.readline().strip() if proc.stdout else ""
        assert session_id, proc.stderr.read() if proc.stderr else ""
        proc.kill()  # SIGKILL: the client never closes its session
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    reaped_before = health(lab)["reaped"]
    assert httpx.get(f"{lab}/sessions/{session_id}").status_code == 200  # still open right after the kill
    # GET /sessions/{id} reads the session without counting as use, so polling it does not keep it open
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        response = httpx.get(f"{lab}/sessions/{session_id}")
        if response.status_code == 404:
            break
        time.sleep(0.2)
    body = response.json()
    assert response.status_code == 404 and body["error"] == "unknown_session"
    assert "idle timeout" in body["message"]
    assert health(lab)["reaped"] >= reaped_before + 1
    with RemoteEnv(lab, SLEEP) as again:  # the server keeps serving
        again.reset(seed=0)
        assert again.step("0")[1] == 1.0


def test_an_idle_session_is_reaped_but_a_used_one_is_not(lab):
    idle = RemoteEnv(lab, SLEEP)
    used = RemoteEnv(lab, SLEEP)
    try:
        idle.reset(seed=0)
        used.reset(seed=0)
        end = time.monotonic() + health(lab)["idle_timeout"] * 1.6
        while time.monotonic() < end:
            used.step("0")  # a request every 0.25 s keeps it open
            time.sleep(0.25)
        with pytest.raises(RemoteError) as gone:
            idle.step("0")
        assert gone.value.status == 404 and "idle timeout" in str(gone.value)
        assert used.step("0")[1] == 1.0
    finally:
        idle.close()  # already reaped: close() accepts that
        used.close()
