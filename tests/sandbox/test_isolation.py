"""Runs that cannot hurt each other or the host: each test is an attack first, then what contains it.

Process limits per run (a pids cgroup, and a uid of its own), a CPU cap per run, sparse files charged at their
apparent size and kept sparse by forks, trees of any depth that neither crash a walk nor survive removal, long
commands, and a ``/proc`` that shows nothing of the host."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from pivotgym.sandbox import Limits, SandboxError, cgroup, fork_dir, get_sandbox, remove_dir
from pivotgym.sandbox.bwrap import bwrap_available, chown_tree
from pivotgym.sandbox.disk import measure, tree_usage
from pivotgym.sandbox.hide import find_named
from pivotgym.sandbox.walk import MAX_DEPTH, TreeTooDeep

needs_bwrap = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap is not installed")
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="uids are leased only when the host runs as root")

# spawns children until the process limit refuses one, then holds them all
HOG = (
    "import subprocess, sys, time\nheld = []\ntry:\n    while True:\n"
    "        held.append(subprocess.Popen(['sleep', '3']))\nexcept OSError as exc:\n"
    "    print(len(held), exc.errno, flush=True)\ntime.sleep(2.5)\n"
)
# a fork bomb that keeps trying: every process spins on fork() whether it succeeds or not
BOMB = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"


@pytest.fixture()
def box():
    return get_sandbox("bwrap", limits=Limits(wall_seconds=20, max_processes=48, file_size_bytes=8 << 20))


def _work(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    path.mkdir()
    return path


# ------------------------------------------------------------------ processes
@needs_bwrap
@pytest.mark.parametrize("accounting", ["cgroup+uid", "uid", "cgroup"])
def test_a_run_holding_its_process_limit_does_not_starve_a_concurrent_run(box, tmp_path, monkeypatch, accounting):
    """Attack: one run holds every process its limit allows while another run starts a correct command. With
    one uid for all sandboxes, RLIMIT_NPROC (per user) failed the second with EAGAIN ("no result, exit 126").
    Each mechanism alone separates the runs: a uid per run, or a pids cgroup per run (the uid then shared)."""
    if accounting == "uid":
        if os.geteuid() != 0:
            pytest.skip("uids are leased only when the host runs as root")
        monkeypatch.setitem(cgroup._FAILED, "pids", "turned off by the test: uids alone must separate runs")
    elif not cgroup.available("pids"):
        pytest.skip(f"no pids cgroup here: {cgroup.unavailable_reason('pids')}")
    if accounting == "cgroup":
        box.uid_pool = False  # every run as nobody, as before
    hog: dict[str, object] = {}
    hog_dir = _work(tmp_path, "hog")
    thread = threading.Thread(
        target=lambda: hog.setdefault("result", box.run(["python3", "-c", HOG], hog_dir)), daemon=True
    )
    thread.start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _tasks_of(hog_dir.stat().st_uid) < 40:
        time.sleep(0.05)
    assert _tasks_of(hog_dir.stat().st_uid) >= 40, "the hog never held its processes"
    victim = box.run(
        ["python3", "-c", "import subprocess; print(subprocess.run(['echo', 'fixed'], capture_output=True).stdout)"],
        _work(tmp_path, "victim"),
    )
    assert victim.ok and "fixed" in victim.stdout, victim.output
    assert victim.limit_hit == ""
    thread.join(15)
    held = hog["result"]
    assert int(held.stdout.split()[0]) >= 40 and held.stdout.split()[1] == "11"  # EAGAIN at its own limit
    if accounting != "uid":
        assert held.limit_hit == "processes" and "process limit hit" in held.limit_message


def _tasks_of(uid: int) -> int:
    """How many processes run as ``uid`` now (the hog's work dir is handed to its run's uid)."""
    if uid == 0:
        return 0
    count = 0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                count += entry.stat().st_uid == uid
            except OSError:
                pass
    return count


@as_root
def test_uid_leases_are_exclusive_across_threads_and_processes(tmp_path, monkeypatch):
    from pivotgym.sandbox import uids

    monkeypatch.setenv(uids.ENV_LOCK_DIR, str(tmp_path / "locks"))
    first = uids.lease()
    second = uids.lease(prefer=first.uid)  # another thread's run asking for the same uid gets another one
    assert second.uid != first.uid and uids.in_range(first.uid) and uids.in_range(second.uid)
    probe = f"from pivotgym.sandbox import uids; print(uids.lease(prefer={first.uid}).uid)"
    env = {**os.environ, uids.ENV_LOCK_DIR: str(tmp_path / "locks")}
    other = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True)
    assert int(other.stdout) not in (first.uid, second.uid)
    first.release()
    assert uids.lease(prefer=first.uid).uid == first.uid  # free again once released
    assert not uids.mapped(4_294_967_000, 1000)  # beyond every user namespace's map: the pool is not used


# ------------------------------------------------------------------ CPU
@needs_bwrap
def test_a_persistent_fork_bomb_is_held_to_the_cpu_quota(box, tmp_path):
    """Attack: every process of a fork bomb spins on fork(); without a CPU cap the host's load reached 47."""
    if not cgroup.available("cpu"):
        pytest.skip(f"no cpu cgroup here: {cgroup.unavailable_reason('cpu')}")
    limits = box.limits.with_(cpu_quota=0.25, wall_seconds=2)
    start = time.monotonic()
    result = box.run(["python3", "-c", BOMB], _work(tmp_path, "bomb"), limits=limits)
    assert time.monotonic() - start < 8
    assert result.timed_out and result.limit_hit == "processes"
    assert result.cpu_time is not None and result.cpu_time <= 0.25 * result.duration + 0.3, result
    # measured from inside as well: three busy children for 1.5 s get a quarter CPU between them
    busy = (
        "import os, time\npids = []\nfor _ in range(3):\n    pid = os.fork()\n    if pid == 0:\n"
        "        end = time.monotonic() + 1.5\n        while time.monotonic() < end: pass\n        os._exit(0)\n"
        "    pids.append(pid)\nfor pid in pids: os.waitpid(pid, 0)\nt = os.times()\n"
        "print(t.children_user + t.children_system)\n"
    )
    inside = box.run(["python3", "-c", busy], _work(tmp_path, "busy"), limits=limits.with_(wall_seconds=10))
    assert inside.ok, inside.output
    assert float(inside.stdout) <= 0.25 * inside.duration + 0.3, (inside.stdout, inside.duration)
    for controller in ("pids", "cpu"):  # every run's groups are gone, the bomb's included
        assert list(cgroup.where(controller).glob(f"pivotgym-{os.getpid()}-*")) == []


def test_groups_left_by_a_process_that_died_mid_run_are_swept():
    if not cgroup.available("pids"):
        pytest.skip(f"no pids cgroup here: {cgroup.unavailable_reason('pids')}")
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = cgroup.where("pids") / f"pivotgym-{dead.pid}-0"
    stale.mkdir()
    mine = cgroup.run_group(pids=10)
    assert mine is not None
    try:
        cgroup._sweep(cgroup.where("pids"))
        assert not stale.exists() and mine.dirs["pids"][1].exists()  # a live process's group stays
    finally:
        mine.remove()
        if stale.exists():
            stale.rmdir()


# ------------------------------------------------------------------ sparse files
@needs_bwrap
def test_a_sparse_file_is_charged_its_apparent_size(box, tmp_path):
    """Attack: sparse files occupy 4 KiB each whatever their size: twenty of 7 MiB (each under the 8 MiB file
    size limit) passed a 16 MiB disk cap, and every fork or read of them costs 140 MiB."""
    work = _work(tmp_path, "work")
    result = box.run(
        "for i in $(seq 1 20); do truncate -s 7M s$i; done; sleep 2; echo kept",
        work,
        limits=box.limits.with_(disk_bytes=16 << 20),
    )
    assert result.limit_hit == "disk" and "kept" not in result.stdout, result.output
    assert "sparse files at their full size" in result.limit_message


def test_a_fork_keeps_holes_and_never_writes_past_its_cap(tmp_path):
    """Attack: a fork copied the holes of a sparse file as data (1.34 GB per fork of a 4 KiB file)."""
    src = _work(tmp_path, "src")
    with open(src / "sparse.bin", "wb") as fh:
        fh.seek(1 << 30)
        fh.write(b"tail")
    (src / "run.sh").write_text("echo hi\n")
    (src / "run.sh").chmod(0o755)
    assert measure(src).bytes > 1 << 30  # charged at its apparent size
    start = time.monotonic()
    dst = fork_dir(src, tmp_path / "fork")
    assert time.monotonic() - start < 2
    copy = dst / "sparse.bin"
    assert copy.stat().st_size == (1 << 30) + 4 and copy.stat().st_blocks * 512 <= 64 << 10
    with open(copy, "rb") as fh:
        fh.seek(1 << 30)
        assert fh.read() == b"tail"
        fh.seek(12345)
        assert fh.read(4) == b"\0\0\0\0"
    assert (dst / "run.sh").stat().st_mode & 0o777 == 0o755
    # the data of a fork is bounded too: past max_bytes it stops, removes what it wrote and says why
    (src / "dense.bin").write_bytes(os.urandom(3 << 20))
    with pytest.raises(SandboxError, match="more than 1048576 bytes"):
        fork_dir(src, tmp_path / "capped", max_bytes=1 << 20)
    assert not (tmp_path / "capped").exists()


# ------------------------------------------------------------------ deep trees
def _deep_tree(root: Path, depth: int) -> Path:
    """``root`` with a chain of ``depth`` nested directories and a file at the bottom (built fd-relative: its
    paths are longer than PATH_MAX)."""
    root.mkdir()
    fd = os.open(root, os.O_RDONLY)
    for _ in range(depth):
        os.mkdir("d", dir_fd=fd)
        child = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = child
    os.close(os.open("leaf", os.O_CREAT | os.O_WRONLY, dir_fd=fd))
    os.close(fd)
    return root


@pytest.fixture()
def scratch(tmp_path):
    """A directory on tmpfs where there is one (deep trees build and vanish ten times faster there), emptied
    with remove_dir afterwards: pytest's own cleanup recurses, and would fail on the deep trees built here."""
    import tempfile

    shm = Path("/dev/shm")
    path = Path(tempfile.mkdtemp(dir=shm)) if os.access(shm, os.W_OK) else tmp_path
    yield path
    for child in path.iterdir():
        remove_dir(child)
    if path != tmp_path:
        remove_dir(path)


def test_a_deep_tree_is_refused_by_fork_and_walked_without_recursion(scratch):
    """Attack: 1,500 nested directories made reset/close/snapshot/verify raise RecursionError."""
    tmp_path = scratch
    deep = _deep_tree(tmp_path / "deep", 1500)
    with pytest.raises(TreeTooDeep, match=f"more than {MAX_DEPTH} levels deep") as info:
        fork_dir(deep, tmp_path / "fork")
    assert isinstance(info.value, SandboxError) and not (tmp_path / "fork").exists()
    for method in ("hardlink", "copy"):
        with pytest.raises(SandboxError):
            fork_dir(deep, tmp_path / f"fork-{method}", method=method)
    assert measure(deep).too_deep and tree_usage(deep) > 0
    chown_tree(deep, os.geteuid(), os.getegid())
    assert find_named((str(deep),), frozenset({"leaf-dir"})) == ()
    # a tree at the limit still forks
    ok = _deep_tree(tmp_path / "ok", MAX_DEPTH)
    assert (fork_dir(ok, tmp_path / "ok-fork") / ("d/" * MAX_DEPTH + "leaf")).exists()


def test_remove_dir_removes_a_10000_deep_tree_and_never_raises(scratch):
    tmp_path = scratch
    deep = _deep_tree(tmp_path / "deep", 10_000)
    assert remove_dir(deep) is True and not deep.exists()
    assert remove_dir(tmp_path / "missing") is True  # nothing to do, no error
    (tmp_path / "file").write_text("x")
    assert remove_dir(tmp_path / "file") is True and not (tmp_path / "file").exists()
    # read-only directories and files a sandbox left are removed too
    locked = _work(tmp_path, "locked")
    (locked / "sub").mkdir()
    (locked / "sub" / "f").write_text("x")
    (locked / "sub").chmod(0o000)
    locked.chmod(0o500)
    assert remove_dir(locked) is True and not locked.exists()


@needs_bwrap
def test_a_run_that_nests_too_deep_is_stopped_and_pruned(box, scratch):
    tmp_path = scratch
    tmp_path.chmod(0o755)
    work = _work(tmp_path, "work")
    result = box.run(
        "i=0; while [ $i -lt 1500 ]; do mkdir d && cd d || break; i=$((i+1)); done; echo built $i",
        work,
        limits=box.limits.with_(disk_bytes=64 << 20),
    )
    assert result.limit_hit == "disk" and f"at most {MAX_DEPTH} levels deep" in result.limit_message, result
    assert not measure(work).too_deep  # pruned back to the limit, so forks and walks work again
    assert fork_dir(work, tmp_path / "fork").is_dir()
    assert box.run("echo again", work).stdout == "again\n"


# ------------------------------------------------------------------ long commands
@needs_bwrap
@pytest.mark.parametrize("backend", ["bwrap", "local"])
def test_a_1_mb_command_runs_and_a_10_mb_one_is_refused_clearly(tmp_path, backend):
    """Attack: a 1 MB command failed with "Argument list too long" and ended the episode."""
    box = get_sandbox(backend, **({"warn": False} if backend == "local" else {}))
    payload = "a" * (1 << 20)
    result = box.run(f'x={payload}; echo "${{#x}} $0"; cat; exit 7', _work(tmp_path, "long"), stdin="from stdin")
    assert result.returncode == 7 and result.stdout == f"{1 << 20} /bin/sh\nfrom stdin", result.output[:500]
    huge = box.run("x=" + "a" * (10 << 20) + "; echo done", _work(tmp_path, "huge"))
    assert huge.returncode == 126 and huge.limit_hit == "command" and "done" not in huge.stdout
    assert "command too long" in huge.stderr and "4 MiB" in huge.limit_message
    assert box.run(["echo", "b" * (200 << 10)], _work(tmp_path, "argv")).limit_hit == "command"


# ------------------------------------------------------------------ /proc
@needs_bwrap
def test_proc_shows_only_the_sandbox_and_no_host_path(tmp_path):
    """Attack: /proc/1/cmdline (bwrap's argv) listed host paths and the whole hide list."""
    import pytest as installed

    hidden = str(Path(installed.__file__).parent)  # an installed package the sandbox can see
    extra = _work(tmp_path, "visible-ro")
    extra.chmod(0o755)
    tmp_path.chmod(0o755)
    box = get_sandbox("bwrap", ro_binds=[str(extra)])
    work = _work(tmp_path, "work")
    script = "for f in /proc/[0-9]*/cmdline; do echo \"== $f\"; tr '\\0' ' ' < $f; echo; done"
    result = box.run(script, work, hide=[hidden])
    assert result.ok, result.output
    assert "== /proc/1/cmdline" in result.stdout and "--args" in result.stdout
    host = [hidden, str(work), str(extra), str(tmp_path), sys.prefix, "/work", "/root", "--ro-bind", "--tmpfs"]
    leaked = [h for h in host if h in result.stdout]
    assert leaked == [], result.stdout
    pids = [line for line in result.stdout.splitlines() if line.startswith("== ")]
    assert len(pids) <= 5, pids  # bwrap's init, the shell, its subshell/tr: nothing of the host
    inside = box.run("ls /proc/self/fd; cat /etc/passwd", work)
    assert inside.stdout.split()[:4] == ["0", "1", "2", "3"] and "4" not in inside.stdout.split()  # no bwrap fds
    if os.geteuid() == 0:  # generated accounts: root, nobody and the run's user, nothing of the host's
        assert "root:x:0:0" in inside.stdout and len(inside.stdout.splitlines()) <= 7
