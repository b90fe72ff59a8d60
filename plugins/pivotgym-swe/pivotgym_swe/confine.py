"""Kernel-enforced limits the judged processes put on themselves before any repository code runs.

The judge's test process (:mod:`pivotgym_swe.judge_runner`) and the differential harness
(:mod:`pivotgym_swe.diff_harness`) run as ``python -c TEXT``; this file's text is put in front of theirs
(:func:`prelude`), so either process confines itself before it runs repository code, whatever sandbox backend
runs it (the runner first thing, the harness once its alarm handler is installed):

* **seccomp** (x86-64): no new processes (``fork``, ``vfork``, ``clone`` without ``CLONE_THREAD``; ``clone3``
  answers ``ENOSYS`` so threads fall back to ``clone``), no ``execve``/``execveat``, no ``ptrace``, no
  ``process_vm_readv``/``process_vm_writev``, no ``io_uring`` (whose operations no filter sees), no
  ``unshare``/``setns``, no new signal handlers (``rt_sigaction`` with an action: a Python handler is
  handed the interrupted frame without an audited call), and no x32 system calls: each answers ``EPERM``.
  A child the audit hook never sees (``_posixsubprocess.fork_exec``) cannot start, so no process without the
  hook exists to write into another.
* **Landlock** (where the kernel has it): files and directories may be opened only beneath the top-level
  directories of ``/`` other than ``/proc``, so no process can open its own or another's ``/proc/<pid>/mem``
  (by any spelling of the path: Landlock checks the file opened, not the string).

Both are one-way: nothing the process does later can lift them. ``PR_SET_NO_NEW_PRIVS`` is set first, as the
kernel requires. The module that installs them (``ctypes``) is dropped from ``sys.modules`` afterwards (a new
``import ctypes`` is an audited event the runner refuses), and in the runner this file's names are deleted
from ``__main__``.

Where a layer cannot be installed (seccomp on another architecture, a kernel without Landlock), the process
goes on with what it has and writes one line ``pivotgym-confine: ...`` to stderr saying what is missing; an
x86-64 process whose seccomp filter the kernel refuses ends with exit status 125, so a judge never runs
unconfined where it should not. :func:`confine` returns the missing layers for tests.
"""


def confine() -> list[str]:
    """Install the seccomp filter and the Landlock ruleset on this process; the layers that could not be
    installed (``[]``: both are in place)."""
    import ctypes
    import os
    import platform
    import struct
    import sys

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    missing: list[str] = []
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        missing.append(f"no_new_privs (errno {ctypes.get_errno()})")

    if platform.machine() in ("x86_64", "AMD64"):
        program = _seccomp_program()
        buffer = ctypes.create_string_buffer(program)

        class Prog(ctypes.Structure):
            _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

        prog = Prog(len(program) // 8, ctypes.addressof(buffer))
        if libc.prctl(22, 2, ctypes.byref(prog), 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
            sys.stderr.write(f"pivotgym-confine: the kernel refused the seccomp filter (errno {ctypes.get_errno()})\n")
            os._exit(125)
    else:
        missing.append(f"seccomp (no filter for {platform.machine()})")

    reason = _restrict_paths(libc, ctypes, os, struct)
    if reason:
        missing.append(f"landlock ({reason})")
    for name in [m for m in sys.modules if m == "ctypes" or m.startswith("ctypes.")]:
        del sys.modules[name]
    if missing:
        sys.stderr.write("pivotgym-confine: running without " + "; ".join(missing) + "\n")
    return missing


# seccomp_data: nr at 0, arch at 4, args[0] (low 32 bits) at 16
_AUDIT_ARCH_X86_64 = 0xC000003E
_X32_BIT = 0x40000000
_CLONE_THREAD = 0x00010000
_DENIED = {
    57: "fork",
    58: "vfork",
    59: "execve",
    322: "execveat",
    101: "ptrace",
    310: "process_vm_readv",
    311: "process_vm_writev",
    425: "io_uring_setup",
    426: "io_uring_enter",
    427: "io_uring_register",
    272: "unshare",
    308: "setns",
}
_CLONE, _CLONE3 = 56, 435
_RT_SIGACTION = 13  # refused when it installs an action (its second argument is not NULL): a Python signal
# handler receives the interrupted frame with no audited call, and f_back / f_locals are not audited
_ALLOW, _EPERM, _ENOSYS, _KILL = 0x7FFF0000, 0x00050001, 0x00050026, 0x80000000


def _seccomp_program() -> bytes:
    """The classic-BPF program, as ``struct sock_filter`` entries (code, jt, jf, k)."""
    import struct

    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    denied = sorted(_DENIED)
    # classic BPF jumps only forward: the checks first, then clone's flag test, then the four returns
    clone3_at = 4 + len(denied)
    clone_at, thread_at = clone3_at + 1, clone3_at + 3  # clone3_at + 2: load the flags
    sigaction_at = thread_at + 1  # then: load the new action's address, low and high halves
    allow_at = sigaction_at + 5
    eperm_at, enosys_at, kill_at = allow_at + 1, allow_at + 2, allow_at + 3

    def to(target: int, here: int) -> int:
        return target - here - 1

    body = [
        (ld, 0, 0, 4),
        (jeq, 0, to(kill_at, 1), _AUDIT_ARCH_X86_64),
        (ld, 0, 0, 0),
        (jge, to(eperm_at, 3), 0, _X32_BIT),
    ]
    body += [(jeq, to(eperm_at, 4 + i), 0, nr) for i, nr in enumerate(denied)]
    body += [
        (jeq, to(enosys_at, clone3_at), 0, _CLONE3),
        (jeq, 0, to(sigaction_at, clone_at), _CLONE),
        (ld, 0, 0, 16),  # clone's first argument: its flags
        (jset, to(allow_at, thread_at), to(eperm_at, thread_at), _CLONE_THREAD),
        (jeq, 0, to(allow_at, sigaction_at), _RT_SIGACTION),
        (ld, 0, 0, 24),  # rt_sigaction's second argument (the new action), low half
        (jeq, 0, to(eperm_at, sigaction_at + 2), 0),
        (ld, 0, 0, 28),  # high half
        (jeq, to(allow_at, sigaction_at + 4), to(eperm_at, sigaction_at + 4), 0),
        (ret, 0, 0, _ALLOW),
        (ret, 0, 0, _EPERM),
        (ret, 0, 0, _ENOSYS),
        (ret, 0, 0, _KILL),
    ]
    return b"".join(struct.pack("<HBBI", *entry) for entry in body)


def _restrict_paths(libc, ctypes, os, struct) -> str:
    """A Landlock ruleset: read, write and list only beneath the top-level entries of ``/`` except ``/proc``.
    Returns why it could not be installed ("" when it is)."""
    abi = libc.syscall(444, None, 0, 1)  # landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)
    if abi < 1:
        return f"not in this kernel (errno {ctypes.get_errno()})"
    write_file, read_file, read_dir = 1 << 1, 1 << 2, 1 << 3
    handled = write_file | read_file | read_dir
    attr = ctypes.create_string_buffer(struct.pack("<Q", handled))
    ruleset = libc.syscall(444, attr, 8, 0)
    if ruleset < 0:
        return f"landlock_create_ruleset failed (errno {ctypes.get_errno()})"
    try:
        for name in sorted(os.listdir("/")):
            if name == "proc":
                continue
            path = "/" + name
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                access = handled if os.path.isdir(path) else write_file | read_file
                rule = ctypes.create_string_buffer(struct.pack("<Qi", access, fd))
                if libc.syscall(445, ruleset, 1, rule, 0) != 0:  # LANDLOCK_RULE_PATH_BENEATH
                    return f"landlock_add_rule {path} failed (errno {ctypes.get_errno()})"
            finally:
                os.close(fd)
        if libc.syscall(446, ruleset, 0) != 0:
            return f"landlock_restrict_self failed (errno {ctypes.get_errno()})"
    finally:
        os.close(ruleset)
    return ""


def prelude(call: bool = True) -> str:
    """The text put in front of a judged process's own (``python -c prelude() + TEXT``): this file, then a
    call of :func:`confine` that leaves no name of it behind in ``__main__``. ``call=False`` leaves the call to
    the text that follows (the differential harness installs its alarm handler first)."""
    from pathlib import Path

    return Path(__file__).read_text(encoding="utf-8") + (_CALL if call else "")


_CALL = """
if __name__ == "__main__":
    confine()
    for _name in [_n for _n in globals() if not _n.startswith("__")]:
        del globals()[_name]
    del _name
"""
