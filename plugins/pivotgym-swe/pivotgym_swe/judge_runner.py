"""The trusted half of the SWE judge's test process. Never imported: its text runs as ``python -I -c TEXT``.

``argv``: repository root, comma-separated top-level names of the repository, pytest targets and options.
The design (the threat model is in ``testing.py`` and docs/architecture.md) is that nothing the repository's
code can reach decides the verdict:

1. **A gatekeeper first.** Before anything else, an audit hook (``sys.addaudithook``; it cannot be removed)
   is installed. Everything secret lives only in its closure: the record key (read from stdin, which then
   becomes /dev/null) and the outcome channel (the process's original stdout, moved to a private descriptor; fd 1 then
   points at stderr, so nothing the tests print reaches the channel). The hook function is referenced by
   the interpreter alone: no module, class or object graph reaches it, and the ways to reach it anyway
   (frames, ``gc``, tracing) are what it refuses.
2. **Refusals end the process.** Once the repository can run, the hook ends the process (one ``refused``
   record, then ``os._exit``) on: tracing or profiling (``sys.settrace``/``setprofile``), frame enumeration
   (``sys._current_frames``), ``gc`` object walks, ``ctypes``, new audit hooks, replacing a function's
   ``__code__``, forking or spawning processes, and opening ``/proc/self`` (memory, descriptors) - and, while
   code of the repository is on the calling thread's stack, on frame access (``sys._getframe``, ``tb_frame``,
   ``gi_frame`` ...; a few stdlib callers that only read a module name are allowed), code-object
   construction, ``marshal.loads`` outside the import system, and compiling code under a trusted file name.
   A frame is trusted when its code object is this runner's, or its file is in the standard library, in
   pytest/pluggy, or one of the pristine test files; anything else (the repository, ``exec`` strings) is not.
3. **Outcomes are streamed as they happen.** The pytest plugin below hands each report to the hook through
   ``sys.audit``; the hook accepts it only from this runner's own reporting code, on the main thread, with
   no untrusted frame on the stack, and writes one line (sequence number, test id, phase, outcome, all
   hex-encoded, no ``json``, and a keyed BLAKE2 MAC of the line) to the channel at once: a record read off
   the channel cannot be replayed, reordered or forged, and a dropped one leaves a gap. Rewriting state
   afterwards changes nothing already written, and the host counts a test as passed only if every record of
   it says so. The run ends with an ``end`` record written by
   the hook, which then ``os._exit``s: ``atexit`` handlers and threads never run after it.
4. **The repository cannot shadow anything.** Its own top-level packages come from the repository or not at
   all (never from an installed copy); standard-library names always come from the standard library (a
   ``queue.py`` in the repository is not imported in place of ``queue``); modules under the repository load
   from source only (no planted ``.pyc``, no extension modules); pytest never reads cached bytecode.
5. **Tamper evidence** as before: pytest's, pluggy's, ``json``'s and ``builtins``' functions and classes are
   recorded before the repository is importable and compared on every report and at the end; a test item
   that carries its own ``runtest``, comes from a module other than the one imported from its file, or whose
   module holds test-file functions that differ from this runner's own compilation of the pristine files
   (made before the repository can run) is reported as tampered.
"""


def _main() -> None:  # noqa: C901, PLR0915 - one linear script, kept in one function so nothing lands in __main__
    import os
    import sys
    from types import CodeType, ModuleType
    from typing import Any

    write, exit_now, get_ident = os.write, os._exit, __import__("_thread").get_ident
    main_thread = get_ident()
    secret = bytes.fromhex(sys.stdin.readline().strip())
    from _blake2 import blake2b  # the C type itself: a module attribute could be swapped, this cannot

    sequence = [0]
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    import fcntl

    channel = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 200 + int.from_bytes(os.urandom(1), "big"))
    os.dup2(2, 1)  # what the tests print goes to stderr; the channel is ours alone

    def emit(kind: str, *fields: str) -> None:
        """One record: sequence number, kind, hex fields, and a MAC keyed by the secret from stdin. Whoever
        reads the channel learns nothing that lets them write a record the host accepts."""
        body = [
            str(sequence[0]).encode(),
            kind.encode(),
            *(f.encode("utf-8", "replace").hex().encode() for f in fields),
        ]
        sequence[0] += 1
        line = b"\t".join(body)
        data = line + b"\t" + blake2b(line, key=secret, digest_size=16).hexdigest().encode() + b"\n"
        while data:
            data = data[write(channel, data) :]

    root, protected = sys.argv[1], {n for n in sys.argv[2].split(",") if n}
    targets = sys.argv[3:]
    stdlib_dir = os.path.dirname(os.__file__)
    third_party = (stdlib_dir + "/site-packages/", stdlib_dir + "/dist-packages/")
    armed = [False]  # set once the repository may run: from then on the hook refuses
    in_hook: set[int] = set()  # threads inside the hook (its own frame walk raises audit events)
    trusted_codes: set[int] = set()  # ids of this runner's code objects (kept alive by the runner's functions)
    reporter_codes: set[int] = set()
    allowed_getframe: set[int] = set()
    trusted_dirs: list[str] = []
    test_prefix = root.rstrip("/") + "/"
    always = {
        "sys.settrace",
        "sys.setprofile",
        "sys._current_frames",
        "sys._current_exceptions",
        "gc.get_objects",
        "gc.get_referrers",
        "gc.get_referents",
        "sys.addaudithook",
        "os.fork",
        "os.forkpty",
        "os.posix_spawn",
        "os.exec",
        "os.spawn",
        "os.system",
        "subprocess.Popen",
        "pty.spawn",
    }
    frame_attrs = {"tb_frame", "gi_frame", "cr_frame", "ag_frame", "gi_code", "cr_code", "ag_code"}
    watched = always | {"sys._getframe", "object.__getattr__", "object.__setattr__", "code.__new__"}
    watched |= {"marshal.loads", "compile", "open", "import", "pivotgym.judge"}
    watched |= {"ctypes.dlopen", "ctypes.dlsym", "ctypes.addressof", "ctypes.string_at", "ctypes.cdata"}
    import_codes = {id(sys.modules["_frozen_importlib_external"]._compile_bytecode.__code__)}

    def trusted_file(name: object) -> bool:
        if type(name) is not str:
            return False
        if name.startswith("<frozen "):
            return True
        if name.startswith(test_prefix):
            return is_test_file(name[len(test_prefix) :])
        for d in trusted_dirs:
            if name.startswith(d):  # pytest's own dirs come first: they may sit in a site dir of the stdlib
                return not (d == stdlib_dir + "/" and name.startswith(third_party))
        return False

    def untrusted_from(frame: Any) -> str:
        """Where the first untrusted code on the stack from ``frame`` down runs ("" when all is trusted)."""
        while frame is not None:
            code = frame.f_code
            if id(code) not in trusted_codes and not trusted_file(code.co_filename):
                return f"{str(code.co_filename)[:120]}:{frame.f_lineno}"
            frame = frame.f_back
        return ""

    def refuse(why: str) -> None:
        emit("refused", why)
        exit_now(97)

    def hook(event: str, args: tuple) -> None:
        if event not in watched or not armed[0]:
            return
        me = get_ident()
        if me in in_hook:  # the hook's own frame walk (sys._getframe, f_code reads) and nothing else
            if event in ("sys._getframe", "object.__getattr__"):
                return
            refuse(f"{event} while the judge was checking a call")
        in_hook.add(me)
        try:
            decide(event, args, me, sys._getframe(1))
        finally:
            in_hook.discard(me)

    def decide(event: str, args: tuple, me: int, caller: Any) -> None:  # noqa: C901, PLR0912
        """Refuse ``event`` (ending the process) or let it be; ``caller`` is the frame that raised it."""
        if event in always or event.startswith("ctypes."):
            refuse(event)
        elif event == "pivotgym.judge":
            if id(caller.f_code) not in reporter_codes or me != main_thread or untrusted_from(caller):
                refuse("a judge record from somewhere other than the judge")
            kind, *fields = args
            emit(kind, *fields)
            if kind == "end":
                exit_now(0)
        elif event == "open":
            path = args[0]
            if type(path) is bytes:
                path = path.decode("utf-8", "replace")
            if type(path) is str and path.startswith("/proc/"):
                parts = path.split("/")
                if len(parts) > 2 and (parts[2] in ("self", "thread-self") or parts[2].isdigit()):
                    refuse(f"open {path[:80]}")
            elif type(path) not in (str, int) and (where := untrusted_from(caller)):
                refuse(f"open of a {type(path).__name__} path object (from {where})")
        elif event == "import":
            if args[0] in ("ctypes", "_ctypes"):
                refuse(f"import {args[0]}")
        elif event == "object.__setattr__":
            if args[1] == "__code__" and (where := untrusted_from(caller)):
                refuse(f"replacing a function's __code__ (from {where})")
        elif event == "object.__getattr__":
            if args[1] in frame_attrs and (where := untrusted_from(caller)):
                refuse(f"reading .{args[1]} (from {where})")
        elif event == "sys._getframe":
            if id(caller.f_code) not in allowed_getframe and (where := untrusted_from(caller)):
                refuse(f"sys._getframe (from {where})")
        elif event == "code.__new__":
            if where := untrusted_from(caller):
                refuse(f"building a code object (from {where})")
        elif event == "marshal.loads":
            if id(caller.f_code) not in import_codes and (where := untrusted_from(caller)):
                refuse(f"marshal.loads (from {where})")
        elif event == "compile":
            if trusted_file(args[1]) and (where := untrusted_from(caller)):
                refuse(f"compiling code under the trusted file name {str(args[1])[:80]} (from {where})")

    sys.addaudithook(hook)

    import ast
    import builtins  # noqa: F401 - imported before repository code runs, like the modules it guards
    import importlib
    import json
    import logging
    import pkgutil
    from importlib.machinery import SOURCE_SUFFIXES, FileFinder, PathFinder, SourceFileLoader

    import _pytest
    import iniconfig
    import packaging
    import pluggy
    import pytest

    for info in pkgutil.iter_modules(_pytest.__path__, "_pytest."):
        try:
            importlib.import_module(info.name)
        except Exception:  # noqa: BLE001,S112 - optional modules (e.g. needing a missing extra)
            continue
    logging._srcfile = None  # type: ignore[attr-defined] - no caller lookup through frames
    stdlib_roots = [stdlib_dir + "/"]
    trusted_dirs[:] = [
        *(os.path.dirname(m.__file__ or "") + "/" for m in (pytest, _pytest, pluggy, iniconfig, packaging)),
        *stdlib_roots,
    ]
    stdlib_names = set(sys.stdlib_module_names)
    # the stdlib functions that read sys._getframe(n).f_globals for a module name and return only a string
    import collections
    import enum
    import typing

    for fn in (
        collections.namedtuple,
        typing._caller,
        enum.EnumType._create_,
        getattr(enum, "_make_class_unpicklable", None),
    ):  # type: ignore[attr-defined]
        if fn is not None:
            allowed_getframe.add(id(fn.__code__))

    def is_test_file(rel: str) -> bool:
        parts = rel.split("/")
        name = parts[-1]
        return (
            name == "conftest.py"
            or name.startswith("test_")
            or name.endswith("_test.py")
            or any(p in ("tests", "test", "testing") for p in parts[:-1])
        )

    dumps = json.dumps  # noqa: F841 - json stays imported and watched: the repository may lean on it
    # test modules are always rewritten from source: a cached one is keyed by the source's hash, which the
    # agent knows, so code run earlier could plant bytecode for a pristine test file not yet imported
    from _pytest.assertion import rewrite

    rewrite._read_pyc = lambda *args, **kwargs: None
    sys.dont_write_bytecode = True

    def watched_modules() -> list[tuple[str, object, bool]]:
        """(name, module, every attribute?) of what must stay as it was."""
        mods = []
        for name, mod in list(sys.modules.items()):
            if name in ("pytest", "_pytest", "pluggy") or name.startswith(("_pytest.", "pluggy.")):
                mods.append((name, mod, False))
            elif name in ("json", "json.encoder", "json.decoder", "builtins", "importlib.machinery"):
                mods.append((name, mod, True))
        return mods

    def snapshot() -> dict[tuple[str, ...], object]:
        refs: dict[tuple[str, ...], object] = {}  # the objects themselves: an id could be reused
        for name, mod, everything in watched_modules():
            for key, value in list(vars(mod).items()):
                if everything or callable(value):
                    refs[(name, key)] = value
                if isinstance(value, type) and getattr(value, "__module__", None) == name:
                    for ckey, cvalue in list(vars(value).items()):
                        refs[(name, key, ckey)] = cvalue
        return refs

    volatile = {("builtins", "_")}
    before = snapshot()
    from _pytest import reports, runner
    from _pytest.python import Function

    hot = [
        (reports.TestReport, "from_item_and_call"),
        (reports.TestReport, "__init__"),
        (runner, "call_and_report"),
        (runner, "runtestprotocol"),
        (runner.CallInfo, "from_call"),
        (Function, "runtest"),
        (pluggy.HookCaller, "__call__"),
        (pluggy.PluginManager, "_hookexec"),
    ]
    hot_refs = [(obj, attr, vars(obj).get(attr)) for obj, attr in hot]

    class Shadowing:
        """Top-level names: the repository's packages from ``root`` only, stdlib names from the stdlib only."""

        def find_spec(self, name, path=None, target=None):  # noqa: ANN001, ANN201, ARG002
            if "." in name:
                return None
            if name in protected:
                spec = PathFinder.find_spec(name, [root])
                if spec is None:
                    raise ModuleNotFoundError(
                        f"{name} is not in the repository (an installed copy is not used)", name=name
                    )
                return spec
            if name in stdlib_names:
                return PathFinder.find_spec(name, [stdlib_dir, os.path.join(stdlib_dir, "lib-dynload")])
            return None

    def source_only(entry: str) -> FileFinder:
        """Directories of the repository load ``.py`` sources only (no bytecode, no extension modules)."""
        if entry == root or entry.startswith(test_prefix):
            return FileFinder(entry, (SourceFileLoader, SOURCE_SUFFIXES))
        raise ImportError("not in the repository")

    guard = Shadowing()
    sys.meta_path.insert(0, guard)
    sys.path_hooks.insert(0, source_only)
    sys.path_importer_cache.clear()
    sys.path.insert(0, root)

    def tell(kind: str, *fields: str) -> None:
        """Hand a record to the hook (the only caller it accepts records from)."""
        sys.audit("pivotgym.judge", kind, *fields)

    def check_hot() -> None:
        for obj, attr, ref in hot_refs:
            if vars(obj).get(attr) is not ref:
                tell("tampered", f"{getattr(obj, '__name__', obj)}.{attr}")
        if not any(finder is guard for finder in sys.meta_path):  # pytest's rewrite hook goes before it
            tell("tampered", "sys.meta_path")

    class Collect:
        @pytest.hookimpl(wrapper=True)
        def pytest_runtest_call(self, item):  # noqa: ANN001, ANN201
            # a second witness besides the report: did the test function raise? (a report patched to say
            # "passed", even one that restores the patch before anyone looks, disagrees with it)
            if "runtest" in vars(item):  # the classes' own runtest are watched by the snapshot
                tell("tampered", f"the test item {item.nodeid} carries its own runtest")
            # the test function comes from the pristine file, in the module pytest imported from it (a module
            # swapped into sys.modules while the test file imported the repository is not that module)
            module, path = getattr(item, "module", None), str(item.path)
            fn = getattr(item, "obj", None)
            for _ in range(8):  # decorators (mock.patch, functools.wraps) keep the test as __wrapped__
                fn = getattr(fn, "__wrapped__", None) or fn
            code = getattr(fn, "__code__", None)
            if type(module) is not ModuleType or getattr(module.__spec__, "origin", None) != path:
                tell("tampered", f"the module of {item.nodeid} is not the one imported from its file")
            elif code is not None and code.co_filename != path:
                tell("tampered", f"the function of {item.nodeid} is not defined in its test file")
            elif code is not None:
                # every test-file function the test can reach through its module is the pristine file's code,
                # compiled by this runner before the repository could run (a finder or loader planted by the
                # repository could otherwise have served the test module from edited source)
                functions = [code, *(getattr(v, "__code__", None) for v in list(vars(module).values()))]
                for c in functions:
                    if type(c) is CodeType and c.co_filename in pristine_files:
                        key = (c.co_filename, c.co_name, c.co_firstlineno)
                        if pristine_code.get(key) != fingerprint(c):
                            tell("tampered", f"{c.co_name} in {c.co_filename} is not the pristine test code")
            try:
                return (yield)
            except BaseException:
                tell("raised", item.nodeid)
                raise

        def pytest_runtest_logreport(self, report):  # noqa: ANN001, ANN201
            check_hot()
            outcome = report.outcome
            if report.when == "call" or outcome != "passed":
                text = report.longreprtext[-1500:] if outcome == "failed" else ""
                tell("test", report.nodeid, report.when, str(outcome), text)

        def pytest_collectreport(self, report):  # noqa: ANN001, ANN201
            if report.outcome == "failed":
                tell("test", "<collection>:" + report.nodeid, "collect", "failed", report.longreprtext[-1500:])

    def codes_of(code: object, into: set[int]) -> None:
        into.add(id(code))
        for const in getattr(code, "co_consts", ()):
            if type(const) is type(code):
                codes_of(const, into)

    codes_of(_main.__code__, trusted_codes)
    trusted_codes.add(id(sys._getframe(1).f_code))  # the ``-c`` text that called this function
    reporter_codes.add(id(tell.__code__))
    args = [
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:randomly",
        "-c",
        os.devnull,
        "--rootdir",
        root,
        "-o",
        "addopts=",
        "--no-header",
        "-W",
        "ignore::DeprecationWarning",
        *targets,
    ]
    # the pristine test files, compiled the way pytest will (assertions rewritten), before the repository runs
    from _pytest.assertion.rewrite import rewrite_asserts

    def fingerprint(code: CodeType) -> tuple:
        """What a code object does: its bytecode, names and constants (nested code objects likewise)."""
        consts = tuple(fingerprint(c) if type(c) is CodeType else (type(c).__name__, repr(c)) for c in code.co_consts)
        return (code.co_code, code.co_names, code.co_varnames, consts)

    pristine_files: set[str] = set()
    pristine_code: dict[tuple[str, str, int], tuple] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".") and d != "__pycache__"]
        for name in filenames:
            full = os.path.join(dirpath, name)
            if name.endswith(".py") and is_test_file(full[len(test_prefix) :]):
                try:
                    with open(full, "rb") as fh:
                        source = fh.read()
                    tree = ast.parse(source, filename=full)
                    rewrite_asserts(tree, source, full, None)
                    todo = [compile(tree, full, "exec", dont_inherit=True)]
                except (OSError, SyntaxError, ValueError):
                    continue
                pristine_files.add(full)
                while todo:
                    c = todo.pop()
                    pristine_code[(full, c.co_name, c.co_firstlineno)] = fingerprint(c)
                    todo += [k for k in c.co_consts if type(k) is CodeType]
    armed[0] = True
    try:
        code = int(pytest.main(args, plugins=[Collect()]))
    except BaseException as exc:  # noqa: BLE001 - SystemExit or anything else raised by the code under test
        code = -1
        tell("test", "<session>", "session", "failed", repr(exc)[-1500:])
    check_hot()
    after = snapshot()
    for key, value in before.items():
        if key not in volatile and after.get(key) is not value:
            tell("tampered", ".".join(key))
    tell("end", str(code))
    exit_now(3)  # not reached: the hook ends the process on "end"


if __name__ == "__main__":  # as ``python -c TEXT``; importing this module does nothing
    _main()
