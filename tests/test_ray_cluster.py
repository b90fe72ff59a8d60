"""The Ray executor against a real cluster: a head and a worker node started with the ``ray`` CLI.

One two-node cluster (1 CPU each, a small object store, free ports, its own temp dir) serves the
whole module; it is stopped at the end even when a test fails, by signalling the process groups of the two
``ray start --block`` commands (their own, never ``ray stop``, which would stop every Ray on the machine).
Checked: ``pivotgym profile --executor ray:HOST:PORT`` writes the same rows as the process executor; SWE
judging (the functional verifier running tests in bubblewrap) gives the same verdicts through Ray; the address
forms; deadlines, crashed workers and the backstop that cancels a task stuck holding the GIL.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from pivotgym import execution
from pivotgym.execution import ProcessExecutor, RayExecutor, make_executor, ray_init_kwargs

ray = pytest.importorskip("ray")

RAY_CLI = Path(sys.executable).with_name("ray")
PIVOTGYM_CLI = Path(sys.executable).with_name("pivotgym")
#: seconds a node may take to start on a busy 2-core machine
NODE_START_S = 90.0

pytestmark = [pytest.mark.timeout(420), pytest.mark.slow]  # a cluster per module: ≥ 5 s a test


# ------------------------------------------------------------------------------------------ no cluster needed
def test_init_arguments_follow_the_address_form(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    local = ray_init_kwargs(None, 3)
    assert local["address"] == "local" and local["num_cpus"] == 3 and local["log_to_driver"] is False
    joined = ray_init_kwargs("10.0.0.5:6379", 3, {"runtime_env": {"env_vars": {"A": "1"}}})
    assert joined["address"] == "10.0.0.5:6379" and "num_cpus" not in joined and "include_dashboard" not in joined
    assert joined["runtime_env"] == {"env_vars": {"A": "1"}}
    client = ray_init_kwargs("ray://head:10001", 3)
    assert client == {"address": "ray://head:10001"}  # Ray Client takes no driver-side logging switches
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.5:6379")
    assert ray_init_kwargs(None, 3) == {"address": "auto", "log_to_driver": False, "configure_logging": False}
    assert make_executor("ray:ray://head:10001").address == "ray://head:10001"
    assert make_executor("ray:10.0.0.5:6379", workers=2).address == "10.0.0.5:6379"


# ------------------------------------------------------------------------------------------ the cluster
@dataclass
class Cluster:
    address: str
    env: dict[str, str]  # for subprocesses that join it (the CLI)
    temp_dir: Path
    nodes: list[subprocess.Popen]


#: every port :func:`_free_port` handed out in this process: the kernel may hand the same free port to two
#: back-to-back binds, and Ray refuses a node whose components share one (seen: dashboard = metrics export)
_GIVEN_PORTS: set[int] = set()


def _free_port() -> int:
    """A port free now and not handed out before in this process."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _GIVEN_PORTS:
            _GIVEN_PORTS.add(port)
            return port


def _node_ports() -> list[str]:
    """Ports of one node's agents: free ones, so two nodes on one machine (and other clusters) never clash."""
    return [
        f"--node-manager-port={_free_port()}",
        f"--object-manager-port={_free_port()}",
        f"--dashboard-agent-listen-port={_free_port()}",
        f"--dashboard-agent-grpc-port={_free_port()}",
        f"--runtime-env-agent-port={_free_port()}",
        f"--metrics-export-port={_free_port()}",
    ]


def _start_node(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    """``ray start --block ...`` in its own process group; returns once the node says it started."""
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(RAY_CLI), "start", "--block", "--disable-usage-stats", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    deadline = time.monotonic() + NODE_START_S
    while "Ray runtime started" not in log.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            _stop_nodes([proc], log.parent)
            pytest.fail(f"ray start did not start a node ({' '.join(args)}):\n{log.read_text()[-3000:]}")
        time.sleep(0.5)
    return proc


def _ours(temp_dir: Path, groups: set[int]) -> list[int]:
    """Live processes of this cluster: in one of its process groups or naming its temp dir."""
    import psutil

    found = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            if os.getpgid(p.pid) in groups or str(temp_dir) in " ".join(p.info["cmdline"] or []):
                if p.status() != psutil.STATUS_ZOMBIE:
                    found.append(p.pid)
        except (ProcessLookupError, psutil.Error):
            continue
    return found


def _stop_nodes(nodes: list[subprocess.Popen], temp_dir: Path) -> None:
    """Stop this cluster's processes only: SIGTERM the nodes' process groups, then SIGKILL what is left."""
    groups = {p.pid for p in nodes}  # each `ray start` leads its own session, so its pid is its group id
    for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        for group in groups:
            try:
                os.killpg(group, sig)
            except ProcessLookupError:
                pass
        for pid in _ours(temp_dir, set()):  # anything that left the groups but still names our temp dir
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        while _ours(temp_dir, groups) and time.monotonic() < deadline:
            time.sleep(0.25)
    for p in nodes:
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            pass
    left = _ours(temp_dir, groups)
    assert not left, f"Ray processes left running: {left}"


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    if not RAY_CLI.exists():
        pytest.skip(f"no ray CLI next to {sys.executable}")
    # a short path: Ray's unix sockets live under it (108-byte limit)
    temp_dir = Path(tempfile.mkdtemp(prefix="pgray", dir="/tmp"))
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    # no token auth: `ray start --head` would enable it with ~/.ray/auth_token, which drivers given an explicit
    # address only use under RAY_AUTH_MODE=token, and this process's Ray caches the mode once it has read it
    env.update(RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")
    port = _free_port()
    address = f"127.0.0.1:{port}"
    nodes: list[subprocess.Popen] = []
    mp = pytest.MonkeyPatch()
    try:
        common = ["--node-ip-address=127.0.0.1", "--num-cpus=1", f"--object-store-memory={80 * 1024**2}"]
        nodes.append(
            _start_node(
                [
                    "--head",
                    f"--port={port}",
                    f"--temp-dir={temp_dir}",
                    "--include-dashboard=false",
                    f"--dashboard-port={_free_port()}",
                    *common,
                    *_node_ports(),
                ],
                env,
                temp_dir / "head.log",
            )
        )
        nodes.append(_start_node([f"--address={address}", *common, *_node_ports()], env, temp_dir / "worker.log"))
        # this process joins as a driver too (the in-process tests), without RAY_ADDRESS
        mp.delenv("RAY_ADDRESS", raising=False)
        for name in ("RAY_AUTH_MODE", "RAY_USAGE_STATS_ENABLED"):
            mp.setenv(name, env[name])
        ray.init(address=address, log_to_driver=False, configure_logging=False)
        try:
            deadline = time.monotonic() + NODE_START_S
            while sum(n["Alive"] for n in ray.nodes()) < 2:
                assert time.monotonic() < deadline, f"the worker node never joined: {ray.nodes()}"
                time.sleep(0.5)
        finally:
            ray.shutdown()
        yield Cluster(address, env, temp_dir, nodes)
    finally:
        if ray.is_initialized():
            ray.shutdown()
        mp.undo()
        _stop_nodes(nodes, temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)


def node_of(_: object) -> str:
    """The id of the node running this task, after a second's work (so two tasks run at once, one per node).
    Module-level: workers import this test module through the caller's sys.path."""
    import ray as worker_ray

    time.sleep(1.0)
    return worker_ray.get_runtime_context().get_node_id()


def test_tasks_spread_over_both_nodes_and_workers_default_to_cluster_cpus(cluster: Cluster) -> None:
    with RayExecutor(timeout=60, address=cluster.address) as ex:
        results = ex.map(node_of, range(6))
        assert ex.workers == 2  # the cluster's CPUs, not this machine's
        assert ex.describe() == {"executor": "ray", "workers": 2, "address": cluster.address}
    assert all(r.ok for r in results), [r.error for r in results]
    assert len({r.value for r in results}) == 2
    assert not ray.is_initialized()  # close() disconnected; the cluster keeps running


@pytest.mark.parametrize("form", ["auto", None])
def test_ray_address_variable_is_honoured(cluster: Cluster, form: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """``ray:auto`` and plain ``ray`` join the cluster in RAY_ADDRESS (as under ``ray job submit``); before,
    plain ``ray`` passed ``num_cpus`` and Ray refused to join."""
    monkeypatch.setenv("RAY_ADDRESS", cluster.address)
    with RayExecutor(timeout=60, address=form) as ex:
        assert [r.value for r in ex.map(abs, [-1, -2])] == [1, 2]
        assert len(ray.nodes()) == 2 and ex.workers == 2


def test_deadlines_crashes_and_the_backstop(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    import psutil

    with RayExecutor(timeout=1.5, address=cluster.address) as ex:
        start = time.monotonic()
        hung, crashed = ex.map(time.sleep, [600]) + ex.map(os._exit, [3])
        assert hung.error.startswith("timeout:") and crashed.error.startswith("crashed:"), (hung, crashed)
        assert time.monotonic() - start < 60
        # a task stuck in C code holding the GIL cannot stop itself: the driver cancels it (force) once
        # deadline + START_TIMEOUT has passed since it was sent
        monkeypatch.setattr(execution, "START_TIMEOUT", 2.0)
        stuck = functools.partial(re.fullmatch, r"(a+)+b")
        start = time.monotonic()
        (result,) = ex.map(stuck, ["a" * 40])
        assert result.error.startswith("timeout:") and time.monotonic() - start < 30, result
        # the cluster recovered: fresh workers answer, and no worker still runs the stuck task
        time.sleep(1.0)
        assert [r.value for r in ex.map(abs, [-1, -2, -3])] == [1, 2, 3]
        titles = [(p.pid, " ".join(p.info["cmdline"] or [])) for p in psutil.process_iter(["cmdline"])]
        busy = [pid for pid, title in titles if "ray::_ray_call" in title]
        assert not busy, busy


# ------------------------------------------------------------------------------------------ the CLI on the cluster
def _trajectories(tmp_path: Path) -> Path:
    """Expert trajectories of a built-in env and of the first-party SWE env (whose verifier runs tests)."""
    from pivotgym.jsonl import write_trajectories
    from pivotgym.registry import make

    trajs = list(make("general/arithmetic-v0").expert_trajectories("test", limit=2))
    trajs += list(make("swe/humanevalfix-v0").expert_trajectories("test", limit=1))
    path = tmp_path / "trajs.jsonl"
    write_trajectories(path, trajs)
    return path


def _profile(trajectories: Path, model: Path, out: Path, executor: str, env: dict[str, str]) -> dict:
    command = [
        str(PIVOTGYM_CLI),
        "profile",
        "-t",
        str(trajectories),
        "--model",
        str(model),
        "--k",
        "3",
        "--max-new-tokens",
        "8",
        "--executor",
        executor,
        "--workers",
        "1" if executor == "process" else "2",
        "--timeout",
        "60",
        "--out",
        str(out),
        "--json",
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def test_profile_cli_on_the_cluster_writes_the_process_executors_rows(
    cluster: Cluster, tiny_model_dir: Path, tmp_path: Path
) -> None:
    trajectories = _trajectories(tmp_path)
    env = {**cluster.env, "OMP_NUM_THREADS": "1"}
    by_process = _profile(trajectories, tiny_model_dir, tmp_path / "process.jsonl", "process", env)
    by_ray = _profile(trajectories, tiny_model_dir, tmp_path / "ray.jsonl", f"ray:{cluster.address}", env)
    assert by_ray["executor"] == {"executor": "ray", "workers": 2, "address": cluster.address}
    assert by_ray["verify_failures"] == by_process["verify_failures"] == 0
    rows = [(tmp_path / f).read_text().splitlines() for f in ("process.jsonl", "ray.jsonl")]
    process_rows, ray_rows = ([json.loads(line) for line in r] for r in rows)
    assert len(process_rows) == by_process["profiled"] >= 5
    assert {r["env_id"] for r in ray_rows} == {"general/arithmetic-v0", "swe/humanevalfix-v0"}
    assert [r["key"] for r in ray_rows] == [r["key"] for r in process_rows]
    assert ray_rows == process_rows  # rewards, reasons, metadata: everything


# ------------------------------------------------------------------------------------------ SWE judging
def test_swe_judging_through_ray_gives_the_process_executors_verdicts(cluster: Cluster) -> None:
    from pivotgym.sandbox.bwrap import bwrap_available

    if not bwrap_available():
        pytest.skip("bubblewrap is not installed")
    from pivotgym.calibration import env_candidates
    from pivotgym.pivot.profile import VerifyTask, verify_candidates
    from pivotgym.registry import make
    from pivotgym.states import expert_states
    from pivotgym.verify import VerifyContext

    (trajectory,) = make("swe/humanevalfix-v0").expert_trajectories("test", limit=1)
    tasks = []
    for state in expert_states([trajectory]):
        # the expert's action, paraphrases, the env's wrong action and its own calibration candidates
        texts = tuple(c.text for c in env_candidates(VerifyContext.at(state).env(), state.turn.expert))
        tasks.append(VerifyTask("swe/functional", state, texts))
    with ProcessExecutor(workers=1, timeout=120) as ex:
        by_process = ex.map(verify_candidates, tasks)
    with RayExecutor(timeout=120, address=cluster.address) as ex:
        by_ray = ex.map(verify_candidates, tasks)
    assert all(r.ok for r in by_process + by_ray), [r.error for r in by_process + by_ray if not r.ok]
    verdicts = [(v["reward"], v["reason"], v["undecided"]) for r in by_process for v in r.value]
    assert [(v["reward"], v["reason"], v["undecided"]) for r in by_ray for v in r.value] == verdicts
    rewards = [v[0] for v in verdicts]
    assert 1.0 in rewards and 0.0 in rewards, verdicts  # both credited and refused actions were judged


def hang_or_square(x: int) -> int:
    """Hangs for a negative ``x``; else a tenth of a second's work."""
    if x < 0:
        time.sleep(600)
    time.sleep(0.1)
    return x * x


def test_a_worker_ending_after_a_timeout_costs_no_other_task(cluster: Cluster) -> None:
    """A timed-out task's worker answers, then ends itself; tasks Ray hands it meanwhile run elsewhere."""
    items = [-1, *range(1, 30)]
    with RayExecutor(timeout=1.5, address=cluster.address) as ex:
        results = ex.map(hang_or_square, items)
    assert results[0].error.startswith("timeout:"), results[0]
    assert [r.value for r in results[1:]] == [x * x for x in items[1:]], [r.error for r in results[1:] if not r.ok]
