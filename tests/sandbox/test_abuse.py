"""Escape and abuse attempts against the default (bwrap) sandbox: each must be contained."""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path

import pytest

from pivotgym.sandbox import Limits, get_sandbox
from pivotgym.sandbox.bwrap import bwrap_available

pytestmark = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap is not installed (apt-get install bubblewrap)")

PY = "python3"


@pytest.fixture()
def box():
    return get_sandbox("bwrap", limits=Limits(wall_seconds=20, cpu_seconds=10, memory_bytes=1 << 30,
                                              max_processes=64, file_size_bytes=8 << 20, output_bytes=16 << 10))


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
    code = (f"import socket\nfor addr in [('127.0.0.1', {port}), ('151.101.0.223', 443), ('pypi.org', 443)]:\n"
            "    try:\n        socket.create_connection(addr, timeout=2); print('CONNECTED', addr)\n"
            "    except OSError as e:\n        print('blocked', type(e).__name__)\n")
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
    result = box.run(f"cat {secret}; cat /root/.bashrc; cat /etc/shadow; ls /work /home; cat ../../secret.txt",
                     work)
    assert "TOP-SECRET" not in result.output
    assert "No such file" in result.stderr


def test_writes_outside_workdir_fail_or_vanish(box, work, tmp_path):
    result = box.run("echo x > /usr/evil; echo x > /etc/evil; echo x > /evil; echo ok > /tmp/inside; "
                     "echo x > ../escaped; echo fine > mine.txt", work)
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
    assert result.stdout.splitlines()[0] == "65534"
    assert "\n0\n" not in "\n" + result.stdout
