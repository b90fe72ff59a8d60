"""The judged processes confine themselves at the kernel (:mod:`pivotgym_swe.confine`): each primitive the attacks
used (a new process by every route, ``execve``, ``ptrace``, another process's memory, ``/proc/<pid>/mem`` by any
spelling, including a symlink in the repository) is tried directly, on each isolating backend, after the same
prelude the test runner and the differential harness start with; the controls show what tests need still works."""

from __future__ import annotations

import json
import platform

import pytest

from pivotgym_swe.confine import prelude
from pivotgym_swe.differential import HARNESS
from pivotgym_swe.runtime import runtime_for, sandbox_for
from pivotgym_swe.testing import RUNNER

PROBE = r"""
import json, os, sys, threading
out = {}

def attempt(name, fn):
    try:
        fn()
        out[name] = "allowed"
    except OSError as exc:
        out[name] = exc.strerror or str(exc)

def fork():
    if os.fork() == 0:
        os._exit(0)

import ctypes  # the probe may: it has no audit hook (the runner refuses ctypes to repository code)
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long

def raw(nr, *args):
    def call():
        if libc.syscall(nr, *args) < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
    return call

attempt("fork", fork)
attempt("posix_spawn", lambda: os.posix_spawn("/bin/true", ["true"], {}))
attempt("subprocess", lambda: __import__("subprocess").run(["true"]))
attempt("execv", lambda: os.execv(sys.executable, [sys.executable, "-c", "pass"]))
attempt("clone_process", raw(56, 17, 0, 0, 0, 0))  # SIGCHLD, no CLONE_THREAD
attempt("ptrace_traceme", raw(101, 0, 0, 0, 0))
attempt("process_vm_readv", raw(310, os.getppid(), 0, 0, 0, 0, 0))
attempt("io_uring_setup", raw(425, 1, 0))
attempt("unshare", raw(272, 0x20000))
attempt("x32_getpid", raw(0x40000000 | 39))
import signal
attempt("signal_handler", lambda: signal.signal(signal.SIGUSR1, lambda *a: None))
os.symlink("/proc/self/mem", "mem-link")
for path in ("/proc/self/mem", "/proc/./self/mem", "//proc/self/mem", f"/proc/{os.getpid()}/mem",
             f"/proc/{os.getppid()}/mem", "mem-link", "../proc/self/mem"):
    attempt("open " + path, lambda path=path: open(path, "rb").close())
box = []
thread = threading.Thread(target=lambda: box.append(1))
attempt("thread", lambda: (thread.start(), thread.join()))
attempt("write repo", lambda: open("written.txt", "w").write("x"))
attempt("read stdlib", lambda: open(os.__file__).read(10))
out["thread ran"] = box == [1]
print(json.dumps(out))
"""
NEW_PROCESS = ["fork", "posix_spawn", "subprocess", "execv", "clone_process"]
OTHER_SYSCALLS = ["ptrace_traceme", "process_vm_readv", "io_uring_setup", "unshare", "x32_getpid", "signal_handler"]


def probe(sandbox, tmp_path) -> tuple[dict, str]:
    runtime = runtime_for("toolz")
    box = sandbox_for(runtime, sandbox)
    result = box.run([runtime.python_for(box), "-I", "-c", prelude() + PROBE], tmp_path)
    assert result.returncode == 0, result.output
    return json.loads(result.stdout.strip().splitlines()[-1]), result.stderr


def test_the_judged_processes_start_with_the_confinement():
    assert RUNNER.startswith(prelude())
    harness = HARNESS.removeprefix(prelude(call=False))  # the harness calls it after its alarm handler
    assert harness != HARNESS and harness.index('globals()["confine"]()') < harness.index("importlib.import_module")


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the seccomp filter is written for x86-64")
def test_no_new_process_and_no_reach_into_other_processes(isolating_sandbox, tmp_path):
    out, _ = probe(isolating_sandbox, tmp_path)
    assert {k: out[k] for k in NEW_PROCESS + OTHER_SYSCALLS} == dict.fromkeys(
        NEW_PROCESS + OTHER_SYSCALLS, "Operation not permitted"
    ), out
    assert out["thread"] == "allowed" and out["thread ran"], out  # threads are clone with CLONE_THREAD


def test_no_process_memory_by_any_path(isolating_sandbox, tmp_path):
    out, stderr = probe(isolating_sandbox, tmp_path)
    if "landlock" in stderr:
        pytest.skip(f"no Landlock in this kernel: {stderr.strip()}")
    opened = {k: v for k, v in out.items() if k.startswith("open ") and v != "Permission denied"}
    assert opened == {}, out
    assert out["write repo"] == out["read stdlib"] == "allowed", out  # what tests do still works
    assert (tmp_path / "written.txt").read_text() == "x"
