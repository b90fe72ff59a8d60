"""Functional behaviour of the sandbox backends and of work-dir forking."""

from __future__ import annotations

import warnings

import pytest

from pivotgym.registry import get_registry
from pivotgym.sandbox import Limits, RunResult, SandboxError, fork_dir, get_sandbox, remove_dir
from pivotgym.sandbox.bwrap import MOUNT_POINT, bwrap_available
from pivotgym.sandbox.local import UnsafeSandboxWarning

needs_bwrap = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap is not installed")


def test_backends_are_registered_through_the_hook():
    assert {"bwrap", "docker", "local"} <= set(get_registry().sandboxes)
    assert get_registry().sandboxes["bwrap"].plugin == "builtins"


@needs_bwrap
def test_bwrap_runs_python_in_the_work_dir(tmp_path):
    (tmp_path / "m.py").write_text("print(sum(range(10)))\n")
    result = get_sandbox("bwrap").run(["python3", "m.py"], tmp_path)
    assert isinstance(result, RunResult)
    assert result.ok and result.stdout == "45\n" and result.backend == "bwrap"
    pwd = get_sandbox().run("pwd; echo $HOME", tmp_path)
    assert pwd.stdout.split() == [MOUNT_POINT, MOUNT_POINT]


@needs_bwrap
def test_read_only_binds_under_tmp_stay_visible(tmp_path):
    # a checkout (and its .venv) under /tmp must not be hidden by the sandbox's private /tmp
    shared = tmp_path / "checkout"
    shared.mkdir()
    shared.chmod(0o755)
    tmp_path.chmod(0o755)
    (shared / "data.txt").write_text("visible\n")
    (shared / "data.txt").chmod(0o644)
    work = tmp_path / "work"
    work.mkdir()
    box = get_sandbox("bwrap", ro_binds=[str(shared)])
    result = box.run(["cat", str(shared / "data.txt")], work)
    assert result.ok and result.stdout == "visible\n", result.stderr
    assert box.run(f"touch {shared}/x", work).returncode != 0  # still read-only


@needs_bwrap
def test_bwrap_passes_stdin_env_and_exit_codes(tmp_path):
    box = get_sandbox("bwrap")
    assert box.run("cat", tmp_path, stdin="hello").stdout == "hello"
    assert box.run("echo $GREETING", tmp_path, env={"GREETING": "hi"}).stdout == "hi\n"
    assert box.run("exit 3", tmp_path).returncode == 3


def test_local_backend_warns_and_runs(tmp_path):
    with pytest.warns(UnsafeSandboxWarning):
        box = get_sandbox("local")
    result = box.run("echo hi > f && cat f", tmp_path, limits=Limits(wall_seconds=5))
    assert result.stdout == "hi\n" and (tmp_path / "f").exists()
    timed = box.run("sleep 5", tmp_path, timeout=0.3)
    assert timed.timed_out and timed.duration < 3


def test_missing_work_dir_is_a_clear_error(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(SandboxError, match="does not exist"):
            get_sandbox("local").run("true", tmp_path / "nope")


@pytest.mark.parametrize("method", ["auto", "copy", "hardlink"])
def test_fork_dir_copies_a_tree(tmp_path, method):
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "a.py").write_text("A = 1\n")
    (src / "link").symlink_to("pkg/a.py")
    dst = fork_dir(src, tmp_path / "dst", method=method)
    assert (dst / "pkg" / "a.py").read_text() == "A = 1\n"
    assert (dst / "link").is_symlink()
    # an edit that replaces the file (what the SWE env does) leaves the source intact for every method
    tmp = dst / "pkg" / "a.py.tmp"
    tmp.write_text("A = 2\n")
    tmp.replace(dst / "pkg" / "a.py")
    assert (src / "pkg" / "a.py").read_text() == "A = 1\n"
    if method != "hardlink":
        with open(dst / "link", "a") as fh:  # in-place write through the fork
            fh.write("B = 3\n")
        assert (src / "pkg" / "a.py").read_text() == "A = 1\n"
    remove_dir(dst)
    assert not dst.exists()
    with pytest.raises(FileExistsError):
        fork_dir(src, src)


def test_docker_run_options_enforce_limits():
    from pivotgym.sandbox.docker import DockerSandbox

    box = DockerSandbox(
        limits=Limits(memory_bytes=1 << 30, max_processes=50, cpu_seconds=7, file_size_bytes=1 << 20, cpu_quota=1.5)
    )
    opts = box.run_options(box.limits)
    pairs = dict(zip(opts, opts[1:]))
    assert pairs["--network"] == "none" and "--read-only" in opts and pairs["--cap-drop"] == "ALL"
    assert pairs["--memory"] == pairs["--memory-swap"] == str(1 << 30)  # no swap beyond the cap
    assert pairs["--pids-limit"] == "50" and pairs["--cpus"] == "1.5"
    ulimits = [opts[i + 1] for i, o in enumerate(opts) if o == "--ulimit"]
    assert ulimits == ["core=0:0", "cpu=7:7", f"fsize={1 << 20}:{1 << 20}"]


@needs_bwrap
@pytest.mark.parametrize("use_prlimit", [True, False])
def test_rlimits_reach_the_command_with_and_without_prlimit(tmp_path, monkeypatch, use_prlimit):
    """Limits are set through `prlimit` (vfork-friendly) when present, else in a preexec_fn: same effect."""
    import pivotgym.sandbox.base as base

    if not use_prlimit:
        monkeypatch.setattr(base, "_PRLIMIT", "")
    elif base.prlimit_prefix(Limits()) is None:
        pytest.skip("prlimit (util-linux) is not installed")
    limits = Limits(cpu_seconds=7, memory_bytes=1 << 30, max_processes=33, file_size_bytes=5 << 20)
    text = get_sandbox("bwrap").run("cat /proc/self/limits; umask", tmp_path, limits=limits).stdout
    rows = {line[:26].strip(): line[26:].split()[:2] for line in text.splitlines()[1:] if line.startswith("Max")}
    assert rows["Max cpu time"] == ["7", "7"]
    assert rows["Max address space"] == [str(1 << 30)] * 2
    assert rows["Max processes"] == ["33", "33"]
    assert rows["Max file size"] == [str(5 << 20)] * 2
    assert rows["Max core file size"] == ["0", "0"]
    assert text.split()[-1] == "0022"
