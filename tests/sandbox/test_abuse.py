"""Escape and abuse attempts against the isolating backends (bwrap, the default, and docker): each must be
contained. A backend that cannot run here is skipped with the reason."""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path

import pytest

from pivotgym.sandbox import Limits, get_sandbox
from pivotgym.sandbox.bwrap import bwrap_available
from pivotgym.sandbox.docker import unavailable_reason

DOCKER = unavailable_reason()
BACKENDS = [
    pytest.param(
        "bwrap",
        marks=pytest.mark.skipif(
            not bwrap_available(), reason="bubblewrap is not installed (apt-get install bubblewrap)"
        ),
    ),
    pytest.param(
        "docker", marks=[pytest.mark.docker, pytest.mark.skipif(DOCKER is not None, reason=f"docker: {DOCKER}")]
    ),
]

PY = "python3"


@pytest.fixture(params=BACKENDS)
def box(request):
    return get_sandbox(
        request.param,
        limits=Limits(
            wall_seconds=20,
            cpu_seconds=10,
            memory_bytes=1 << 30,
            max_processes=64,
            file_size_bytes=8 << 20,
            output_bytes=16 << 10,
        ),
    )


@pytest.fixture()
def work(tmp_path: Path) -> Path:
    w = tmp_path / "work"
    w.mkdir()
    (w / "mod.py").write_text("X = 1\n")
    return w


def test_no_network_even_to_host_loopback(box, work):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    accepted: list[object] = []
    server.settimeout(3)
    t = threading.Thread(target=lambda: accepted.append(_accept(server)), daemon=True)
    t.start()
    code = (
        f"import socket\nfor addr in [('127.0.0.1', {port}), ('151.101.0.223', 443), ('pypi.org', 443)]:\n"
        "    try:\n        socket.create_connection(addr, timeout=2); print('CONNECTED', addr)\n"
        "    except OSError as e:\n        print('blocked', type(e).__name__)\n"
    )
    result = box.run([PY, "-c", code], work)
    t.join(5)
    server.close()
    assert "CONNECTED" not in result.stdout, result.output
    assert result.stdout.count("blocked") == 3
    assert accepted == [None]


def _accept(server: socket.socket) -> object:
    try:
        conn, _ = server.accept()
        conn.close()
        return "connection"
    except OSError:
        return None


def test_host_files_outside_workdir_are_invisible(box, work, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET")
    result = box.run(f"cat {secret}; cat /root/.bashrc; cat /etc/shadow; ls /work /home; cat ../../secret.txt", work)
    assert "TOP-SECRET" not in result.output
    assert "No such file" in result.stderr


def test_writes_outside_workdir_fail_or_vanish(box, work, tmp_path):
    result = box.run(
        "echo x > /usr/evil; echo x > /etc/evil; echo x > /evil; echo ok > /tmp/inside; "
        "echo x > ../escaped; echo fine > mine.txt",
        work,
    )
    assert not Path("/usr/evil").exists() and not Path("/etc/evil").exists() and not Path("/evil").exists()
    assert not (work.parent / "escaped").exists()
    assert not Path("/tmp/inside").exists()  # the sandbox's /tmp is its own tmpfs
    assert (work / "mine.txt").read_text() == "fine\n"
    assert "Read-only file system" in result.stderr or "Permission denied" in result.stderr


def test_fork_bomb_is_contained_and_host_unaffected(box, work):
    start = time.monotonic()
    marker = "pivotgym-bomb-marker"
    result = box.run(f": {marker}; bomb() {{ bomb | bomb & }}; bomb; sleep 3; echo survived", work, timeout=8)
    assert time.monotonic() - start < 15
    assert result.returncode != 0 or "survived" in result.stdout
    # the host can still start processes, and no bomb process outlived the run
    assert get_sandbox("local", warn=False).run("echo alive", work).stdout == "alive\n"
    time.sleep(0.5)
    assert not any(marker.encode() in _cmdline(p) for p in _all_pids())


def _processes_of_uid(uid: int) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid and (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                pass
    return pids


def test_memory_bomb_hits_the_address_space_limit(box, work):
    result = box.run([PY, "-c", "x = bytearray(4 << 30); print('allocated')"], work)
    assert "allocated" not in result.stdout
    assert result.returncode != 0
    if box.name == "docker":  # no address-space rlimit in a container: its memory cgroup kills instead
        assert result.limit_hit == "memory", result
    else:
        assert "MemoryError" in result.stderr


def test_infinite_loop_is_killed_at_the_deadline(box, work):
    start = time.monotonic()
    result = box.run("sleep 1000 & while true; do :; done", work, timeout=1.5)
    assert result.timed_out and result.returncode < 0
    assert time.monotonic() - start < 6
    time.sleep(0.3)
    assert not any(b"sleep\x001000" in _cmdline(p) for p in _all_pids())


def _all_pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def test_cpu_limit_stops_a_busy_process(box, work):
    limits = box.limits.with_(cpu_seconds=1, wall_seconds=20)
    start = time.monotonic()
    result = box.run([PY, "-c", "while True: pass"], work, limits=limits)
    assert not result.timed_out and result.returncode != 0
    assert time.monotonic() - start < 10


def test_huge_output_is_truncated(box, work):
    result = box.run("yes AAAAAAAAAAAAAAAA | head -c 50000000", work)
    assert result.truncated
    assert len(result.stdout) < 20_000
    assert "output truncated" in result.stdout


def test_file_size_limit(box, work):
    result = box.run("head -c 50000000 /dev/zero > big.bin", work)
    assert result.returncode != 0
    assert (work / "big.bin").stat().st_size <= 8 << 20


def test_symlink_to_host_file_does_not_leak(box, work, tmp_path):
    secret = tmp_path / "secret2.txt"
    secret.write_text("HOST-ONLY")
    result = box.run(f"ln -s {secret} link && cat link", work)
    assert "HOST-ONLY" not in result.output


def test_setuid_binaries_cannot_regain_root(box, work):
    if os.geteuid() != 0:
        pytest.skip("privilege drop only applies when the host runs as root")
    result = box.run("id -u; su -c 'id -u' root </dev/null; mount -t tmpfs none /repo", work)
    from pivotgym.sandbox.uids import in_range

    assert in_range(int(result.stdout.splitlines()[0]))  # a leased unprivileged uid, never 0
    assert "\n0\n" not in "\n" + result.stdout


# ------------------------------------------------------------------ aggregate limits, mounts, special files
def test_memory_is_capped_across_all_processes_of_a_run(box, work):
    from pivotgym.sandbox.cgroup import memory_cgroups_available, unavailable_reason

    if not memory_cgroups_available():
        pytest.skip(f"no writable memory cgroup: {unavailable_reason()}")
    grab = (
        "python3 -c \"import time; x = bytearray(120 << 20); x[::4096] = b'y' * len(x[::4096]); "
        "time.sleep(2); print('held')\""
    )
    limits = box.limits.with_(total_memory_bytes=200 << 20)  # each process fits its 1 GiB rlimit; the sum does not
    start = time.monotonic()
    result = box.run(f"{grab} & {grab} & {grab} & wait", work, limits=limits)
    assert result.stdout.count("held") < 3, result.output
    assert result.limit_hit == "memory" and "memory limit hit" in result.limit_message
    assert time.monotonic() - start < 15
    # the same three processes under the per-process limit only: all hold their memory
    assert box.run(f"{grab} & {grab} & {grab} & wait", work).stdout.count("held") == 3
    from pivotgym.sandbox.cgroup import where

    assert list(where().glob(f"pivotgym-{os.getpid()}-*")) == []  # every run's cgroup is removed afterwards


def test_the_work_dir_is_capped_in_bytes_and_files(box, work):
    limits = box.limits.with_(disk_bytes=24 << 20)
    start = time.monotonic()
    result = box.run(
        "for i in $(seq 1 100); do head -c 5000000 /dev/zero > f$i.bin; done; echo finished", work, limits=limits
    )
    assert "finished" not in result.stdout and result.limit_hit == "disk", result.output
    assert time.monotonic() - start < 10
    from pivotgym.sandbox.disk import tree_usage

    assert tree_usage(work) <= (24 << 20) + (128 << 20)  # the cap + one poll interval of writing (500 MB uncapped)
    # a million empty files count too (each entry is charged)
    result = box.run(
        "mkdir many && cd many && i=0; while true; do : > f$i; i=$((i+1)); done",
        work,
        limits=limits.with_(disk_bytes=2 << 20),
    )
    assert result.limit_hit == "disk" and not result.timed_out


def test_read_only_mount_shadows_part_of_the_work_dir(box, work, tmp_path):
    from pivotgym.sandbox import Mount

    pristine = tmp_path / "pristine"
    pristine.mkdir()
    (pristine / "test_x.py").write_text("PRISTINE\n")
    for p in (tmp_path, pristine, pristine / "test_x.py"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    (work / "tests").mkdir()
    (work / "tests" / "test_x.py").write_text("AGENT\n")
    out = tmp_path / "out"
    out.mkdir()
    mounts = [Mount(str(pristine), "/repo/tests"), Mount(str(out), "/judge", writable=True)]
    result = box.run(
        "cat tests/test_x.py; echo forged > tests/test_x.py; rm -f tests/test_x.py; "
        "ln -s /etc tests/evil; echo ok > /judge/r.txt; ls /judge",
        work,
        mounts=mounts,
    )
    assert result.stdout.startswith("PRISTINE\n"), result.output
    assert "Read-only file system" in result.stderr
    assert (pristine / "test_x.py").read_text() == "PRISTINE\n" and sorted(os.listdir(pristine)) == ["test_x.py"]
    assert (out / "r.txt").read_text() == "ok\n"


def test_forks_skip_fifos_and_sockets_left_in_a_work_dir(box, work, tmp_path):
    from pivotgym.sandbox import fork_dir

    box.run(
        "mkfifo pipe; python3 -c \"import socket; socket.socket(socket.AF_UNIX).bind('sock')\"; ln -s /etc/passwd link",
        work,
    )
    assert {p.name for p in work.iterdir()} >= {"pipe", "sock", "link"}
    for method in ("copy", "hardlink"):
        start = time.monotonic()
        dst = fork_dir(work, tmp_path / f"fork-{method}", method=method)
        assert time.monotonic() - start < 5
        assert sorted(p.name for p in dst.iterdir()) == ["link", "mod.py"]
        assert os.readlink(dst / "link") == "/etc/passwd"  # copied as a link, never followed
