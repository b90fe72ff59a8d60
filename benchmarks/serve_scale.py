"""Env steps per second through ``pivotgym serve`` at 1, 8 and 64 concurrent sessions, one server process
against ``--workers N``, measured in the same run.

Each server is a real ``pivotgym serve`` subprocess on a free port; the client is one asyncio loop of
:class:`pivotgym.remote.AsyncRemoteEnv` sessions, each replaying an expert episode of ``--env`` over and over
(reset, every expert action, reset ...) for ``--seconds``. Printed per concurrency: steps/s of each server and
the ratio of the multi-worker one to the single-process one at the same concurrency. The client shares the
machine with the servers, so on 2 cores every figure is client and server together.

    python benchmarks/serve_scale.py                                # ~2 min: --workers 2 vs 1, 1/8/64 sessions
    python benchmarks/serve_scale.py --workers 4 --sessions 1,16 --seconds 20
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

from _smoke import parse_args

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start(workers: int, max_sessions: int) -> tuple[subprocess.Popen, str]:
    """A ``pivotgym serve`` subprocess with ``workers`` processes; (process, URL) once it answers /health."""
    import httpx

    port = free_port()
    argv = [sys.executable, "-m", "pivotgym.cli", "serve", "--port", str(port), "--workers", str(workers)]
    proc = subprocess.Popen(
        argv + ["--max-sessions", str(max_sessions)], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the server with {workers} workers exited with {proc.returncode}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise SystemExit(f"the server with {workers} workers did not start within 60 s")


async def steps_per_second(
    url: str, env_id: str, task_id: str, actions: list[str], sessions: int, seconds: float
) -> float:
    """Steps/s of ``sessions`` concurrent sessions replaying one expert episode for ``seconds``."""
    from pivotgym.remote import AsyncRemoteEnv

    envs = [await AsyncRemoteEnv.open(url, env_id) for _ in range(sessions)]
    counts = [0] * sessions
    stop = time.monotonic() + seconds

    async def loop(i: int) -> None:
        env = envs[i]
        while time.monotonic() < stop:
            await env.reset(options={"task_id": task_id})
            for action in actions:
                _, _, terminated, truncated, _ = await env.step(action)
                counts[i] += 1
                if terminated or truncated or time.monotonic() >= stop:
                    break

    started = time.monotonic()
    try:
        await asyncio.gather(*(loop(i) for i in range(sessions)))
    finally:
        await asyncio.gather(*(env.close() for env in envs))
    return sum(counts) / (time.monotonic() - started)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="planning/blocks-v0")
    parser.add_argument("--workers", type=int, default=2, help="the multi-process server's workers")
    parser.add_argument("--sessions", default="1,8,64", help="comma-separated concurrent sessions")
    parser.add_argument("--seconds", type=float, default=15.0, help="measured time per server and concurrency")
    args = parse_args(parser, argv, sessions="1,2", seconds=1.0)
    from pivotgym.registry import make

    env = make(args.env)
    task = next(t for t in env.tasks("test") if env.expert_actions(t))
    actions = [env.render_action(a) for a in env.expert_actions(task)]
    env.close()
    levels = [int(x) for x in args.sessions.split(",")]
    print(
        f"{args.env}: an expert episode of {len(actions)} steps, replayed; {os.cpu_count()} CPUs; "
        f"{args.seconds:g} s each"
    )
    rates: dict[int, dict[int, float]] = {}
    for workers in (1, args.workers):
        proc, url = start(workers, max(levels) + 8)
        try:
            rates[workers] = {
                n: asyncio.run(steps_per_second(url, args.env, task.id, actions, n, args.seconds)) for n in levels
            }
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    for n in levels:
        one, many = rates[1][n], rates[args.workers][n]
        print(
            f"{n:>3} sessions: 1 process {one:7.1f} steps/s, {args.workers} workers {many:7.1f} steps/s "
            f"({many / one:.2f}x)"
        )


if __name__ == "__main__":
    main()
