"""The trusted half of the SWE judge's test process. Never imported: its text runs as ``python -I -c TEXT``.

``argv``: repository root, comma-separated top-level names of the repository, pytest targets and options.
The design (threat model in docs/architecture.md) is that nothing the repository's code can reach decides the
verdict:

1. **A gatekeeper first.** Before anything else an audit hook (``sys.addaudithook``; it cannot be removed) is
   installed. It alone holds the secrets and the state that decide the verdict: the record key (read from
   stdin, which then becomes /dev/null), the outcome channel (the process's original stdout, moved to a
   private descriptor; fd 1 then points at stderr, so nothing the tests print reaches the channel), the
   pristine test code, the registered plugins, the raised-test witness. The hook and its helpers live in
   closures that no reachable object refers to, and they call builtins captured before the repository
   could run (a name planted in ``__main__`` or ``builtins`` changes nothing here).
2. **Everything the repository can reach is stateless.** The pytest plugin, the import guard and the path
   hook are functions without closures whose only capabilities are default arguments (``__defaults__`` and
   ``__code__`` of the runner's functions cannot be replaced: the hook refuses it); they hand pytest's own
   objects (the item, the report) to the hook through ``sys.audit`` and keep nothing.
3. **Refusals end the process.** From the moment the repository can run, the hook ends the process (one
   ``refused`` record, then ``os._exit``) on: tracing or profiling, frame enumeration, ``gc`` object walks,
   ``ctypes``, new audit hooks, fork/exec/spawn, opening ``/proc/self`` or ``/proc/<pid>``, and replacing the
   runner's functions' code or defaults; and, while code that is not trusted is on the calling thread's
   stack, on frame access (``sys._getframe``, except stdlib callers that only read a module name;
   ``tb_frame``, ``gi_frame`` ...), building code objects, replacing any ``__code__``, ``marshal.loads``
   outside the import system or of bytecode from the repository, and compiling under a trusted file name.
   Trusted code is this runner's code objects, the standard library, pytest/pluggy and the pristine test
   files; the repository and ``exec``'d strings are not.
4. **Outcomes are streamed as they happen.** The hook accepts a record only from the runner's own
   reporting functions (by code-object identity), on the main thread, with no untrusted frame on the
   stack; it reads the report's fields itself (exact types, through captured builtins) and writes one line
   (sequence number, kind, hex fields, keyed BLAKE2 MAC) at once: a record read off the channel cannot be
   replayed, reordered or forged, and a dropped one leaves a gap. Before each record it checks that pytest's
   hot functions, the import guard, the path hook and every hook implementation registered with pytest are
   the ones it saw at session start (pristine ``conftest.py`` modules aside), and that every test-file
   function the test can reach is this runner's own compilation of the pristine file (made before the
   repository could run). The run ends with an ``end`` record, and ``os._exit``: ``atexit`` handlers and
   threads never run after it.
5. **The repository cannot shadow anything.** Its own top-level packages come from the repository or not at
   all; standard-library names come from the standard library (a ``queue.py`` in the repository is not
   imported in place of ``queue``); modules under the repository load from source only; pytest never reads
   cached bytecode.
"""

from _blake2 import blake2b
from types import CodeType
from typing import Any


def code_digest(code: object, _code_type: type = CodeType, _blake2b: Any = blake2b) -> str:
    """What a code object does, as a digest: its bytecode, names and constants, nested code objects likewise
    (sets in a canonical order: string hashing differs between processes). The host computes it for the
    pristine test files (:func:`pivotgym_swe.testing.pristine_code`) and the runner for the live functions;
    what it needs comes in as defaults, bound before any repository code exists."""

    def canonical(value: object) -> object:
        if type(value) is _code_type:
            return (
                value.co_code,  # type: ignore[attr-defined]
                value.co_names,  # type: ignore[attr-defined]
                value.co_varnames,  # type: ignore[attr-defined]
                tuple(canonical(c) for c in value.co_consts),  # type: ignore[attr-defined]
            )
        if type(value) is tuple:
            return ("tuple", tuple(canonical(v) for v in value))
        if type(value) is frozenset:
            return ("frozenset", tuple(sorted(repr(canonical(v)) for v in value)))
        return (type(value).__name__, repr(value))

    return _blake2b(repr(canonical(code)).encode(), digest_size=16).hexdigest()


def _main() -> None:
    import os
    import sys
    from types import CodeType, FunctionType, MethodType, ModuleType, SimpleNamespace

    write, exit_now, get_ident, audit = os.write, os._exit, __import__("_thread").get_ident, sys.audit
    getframe = sys._getframe
    main_thread = get_ident()
    secret = bytes.fromhex(sys.stdin.readline().strip())
    import json

    pristine = json.loads(sys.stdin.readline() or "{}")
    from _blake2 import blake2b  # the C type itself: a module attribute could be swapped, this cannot

    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    import fcntl

    channel = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 200 + int.from_bytes(os.urandom(1), "big"))
    os.dup2(2, 1)  # what the tests print goes to stderr; the channel is ours alone
    sequence = [0]

    def emit(kind: str, *fields: str) -> None:
        """One record: sequence number, kind, hex fields, and a MAC keyed by the secret from stdin. Whoever
        reads the channel learns nothing that lets them write a record the host accepts."""
        body = [str(sequence[0]).encode(), kind.encode()]
        for f in fields:
            body.append((f if type(f) is str else repr(type(f))).encode("utf-8", "replace").hex().encode())
        sequence[0] += 1
        line = b"\t".join(body)
        data = line + b"\t" + blake2b(line, key=secret, digest_size=16).hexdigest().encode() + b"\n"
        while data:
            data = data[write(channel, data) :]

    root, protected = sys.argv[1], frozenset(n for n in sys.argv[2].split(",") if n)
    targets = sys.argv[3:]
    stdlib_dir = os.path.dirname(os.__file__)
    third_party = (stdlib_dir + "/site-packages/", stdlib_dir + "/dist-packages/")
    test_prefix = root.rstrip("/") + "/"
    armed = [False]  # set once the repository may run: from then on the hook refuses
    in_hook: set[int] = set()  # threads inside the hook
    tokens: dict[int, str] = {}  # thread -> the one audited call the hook itself is about to make
    trusted_codes: set[int] = set()  # ids of this runner's code objects (alive as long as its functions)
    reporter_codes: set[int] = set()  # the functions records are accepted from
    own_functions: set[int] = set()  # functions whose __code__/__defaults__ nobody may replace
    allowed_getframe: set[int] = set()
    import_codes: set[int] = set()
    trusted_dirs: list[str] = []
    always = frozenset(
        {
            "sys.settrace", "sys.setprofile", "sys._current_frames", "sys._current_exceptions",
            "gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys.addaudithook", "os.fork",
            "os.forkpty", "os.posix_spawn", "os.exec", "os.spawn", "os.system", "subprocess.Popen", "pty.spawn",
            "ctypes.dlopen", "ctypes.dlsym", "ctypes.addressof", "ctypes.string_at", "ctypes.cdata",
        }
    )  # fmt: skip
    frame_attrs = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame", "gi_code", "cr_code", "ag_code"})
    watched = always | {"sys._getframe", "object.__getattr__", "object.__setattr__", "code.__new__"}
    watched |= {"marshal.loads", "compile", "open", "import", "pivotgym.judge"}

    def own(call: str) -> None:
        """Let exactly one audited call of the hook itself through (a frame read, a frame walk)."""
        tokens[get_ident()] = call

    def caller_frame(depth: int) -> object:
        own("sys._getframe")
        return getframe(depth + 1)

    def code_of(frame: object) -> CodeType:
        own("object.__getattr__")
        return frame.f_code  # type: ignore[attr-defined]

    def function_code(fn: object) -> CodeType | None:
        """The code of a plain function (its ``__code__`` read is announced to the hook), else None."""
        if type(fn) is MethodType and isinstance(fn, MethodType):  # type first: no __class__ property runs
            fn = fn.__func__
        if not (type(fn) is FunctionType and isinstance(fn, FunctionType)):
            return None
        own("object.__getattr__")
        return fn.__code__

    def is_test_file(rel: str) -> bool:
        parts = rel.split("/")
        name = parts[-1]
        if name == "conftest.py" or name.startswith("test_") or name.endswith("_test.py"):
            return True
        return "tests" in parts[:-1] or "test" in parts[:-1] or "testing" in parts[:-1]

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

    def untrusted_from(frame: object) -> str:
        """Where the first untrusted code on the stack from ``frame`` down runs ("" when all is trusted)."""
        while frame is not None:
            code = code_of(frame)
            if id(code) not in trusted_codes and not trusted_file(code.co_filename):
                name = code.co_filename
                return (name if type(name) is str else "?")[:120] + ":" + code.co_name[:60]
            frame = frame.f_back  # type: ignore[attr-defined]
        return ""

    def refuse(why: str) -> None:
        emit("refused", why)
        exit_now(97)

    def hook(event: str, args: tuple) -> None:
        if event not in watched or not armed[0]:
            return
        me = get_ident()
        if me in in_hook:  # only the one call the hook announced: code it did not expect never runs here
            if tokens.pop(me, None) == event:
                return
            refuse(f"{event} while the judge was checking a call")
        in_hook.add(me)
        try:
            decide(event, args, me, caller_frame(1))
        finally:
            in_hook.discard(me)
            tokens.pop(me, None)

    def decide(event: str, args: tuple, me: int, caller: object) -> None:
        """Refuse ``event`` (ending the process) or let it be; ``caller`` is the frame that raised it."""
        if event in always:
            refuse(event)
        elif event == "pivotgym.judge":
            if id(code_of(caller)) not in reporter_codes or me != main_thread or untrusted_from(caller):
                refuse("a judge record from somewhere other than the judge")
            record(args)
        elif event == "open":
            path = args[0]
            if type(path) is bytes:
                path = path.decode("utf-8", "replace")
            if type(path) is str and path.startswith("/proc/"):
                part = path.split("/")[2] if path.count("/") >= 2 else ""
                if part in ("self", "thread-self") or part.isdigit():
                    refuse(f"open {path[:80]}")
            elif type(path) is not str and type(path) is not int and (where := untrusted_from(caller)):
                refuse(f"open of a {type(path).__name__} path object (from {where})")
        elif event == "import":
            if args[0] in ("ctypes", "_ctypes"):
                refuse(f"import {args[0]}")
        elif event == "object.__setattr__":
            name = args[1]
            if name in ("__code__", "__defaults__", "__kwdefaults__") and id(args[0]) in own_functions:
                refuse(f"replacing {name} of the judge's own functions")
            if name == "__code__" and (where := untrusted_from(caller)):
                refuse(f"replacing a function's __code__ (from {where})")
        elif event == "object.__getattr__":
            if args[1] in frame_attrs and (where := untrusted_from(caller)):
                refuse(f"reading .{args[1]} (from {where})")
        elif event == "sys._getframe":
            if id(code_of(caller)) not in allowed_getframe and (where := untrusted_from(caller)):
                refuse(f"sys._getframe (from {where})")
        elif event == "code.__new__":
            if where := untrusted_from(caller):
                refuse(f"building a code object (from {where})")
        elif event == "marshal.loads":
            if id(code_of(caller)) in import_codes:
                own("object.__getattr__")
                where = caller.f_locals.get("bytecode_path")  # type: ignore[attr-defined]
                if type(where) is str and (where == root or where.startswith(test_prefix)):
                    refuse(f"loading bytecode from the repository ({where[:80]})")
            elif where := untrusted_from(caller):
                refuse(f"marshal.loads (from {where})")
        elif event == "compile":
            if trusted_file(args[1]) and (where := untrusted_from(caller)):
                refuse(f"compiling code under the trusted file name {str(args[1])[:80]} (from {where})")

    sys.addaudithook(hook)

    import builtins  # noqa: F401 - imported before repository code runs, like the modules it guards
    import collections
    import enum
    import importlib
    import logging
    import pkgutil
    import typing
    from importlib.machinery import SOURCE_SUFFIXES, FileFinder, PathFinder, SourceFileLoader

    import _pytest
    import iniconfig
    import packaging
    import pluggy
    import pytest

    for info in pkgutil.iter_modules(_pytest.__path__, "_pytest."):
        try:
            importlib.import_module(info.name)
        except Exception:
            continue
    from _pytest import reports, runner
    from _pytest.assertion import rewrite
    from _pytest.config import Config
    from _pytest.nodeid import NodeId
    from _pytest.nodes import Node
    from _pytest.python import Function
    from _pytest.python import Module as PytestModule
    from pluggy._hooks import HookImpl

    logging._srcfile = None  # no caller lookup through frames
    trusted_dirs[:] = [
        *(os.path.dirname(m.__file__ or "") + "/" for m in (pytest, _pytest, pluggy, iniconfig, packaging)),
        stdlib_dir + "/",
    ]
    stdlib_names = frozenset(sys.stdlib_module_names)
    import_codes.add(id(sys.modules["_frozen_importlib_external"]._compile_bytecode.__code__))
    # the stdlib functions that read sys._getframe(n).f_globals for a module name and return only a string
    for fn in (collections.namedtuple, typing._caller, enum.EnumType._create_):  # type: ignore[attr-defined]
        allowed_getframe.add(id(fn.__code__))
    # test modules are always rewritten from source: a cached one is keyed by the source's hash, which the
    # agent knows, so code run earlier could plant bytecode for a pristine test file not yet imported
    rewrite._read_pyc = lambda *args, **kwargs: None
    sys.dont_write_bytecode = True

    # ---------------------------------------------------------------- what the hook compares against
    def watched_modules() -> list[tuple[str, object, bool]]:
        """(name, module, every attribute?) of what must stay as it was."""
        mods: list[tuple[str, object, bool]] = []
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
    hot = [
        (reports.TestReport, "from_item_and_call"),
        (reports.TestReport, "__init__"),
        (runner, "call_and_report"),
        (runner, "runtestprotocol"),
        (runner.CallInfo, "from_call"),
        (Function, "runtest"),
        (pluggy.HookCaller, "__call__"),
        (pluggy.PluginManager, "_hookexec"),
        (NodeId, "__str__"),
    ]
    hot_refs = [(obj, attr, vars(obj).get(attr)) for obj, attr in hot]

    # the pristine test code, compiled on the host the way pytest compiles it here (assertions rewritten):
    # {file: [[name, first line, digest], ...]} on stdin's second line, read before the repository could run
    pristine_code: dict[tuple[str, str, int], str] = {}
    for path, codes in pristine.items():
        for name, line, digest in codes:
            pristine_code[(path, name, line)] = digest
    pristine_files = frozenset(pristine)

    # ---------------------------------------------------------------- what the repository can reach
    # closure-free functions: their only capabilities are defaults, which nobody may replace
    def find_spec(
        name, path=None, target=None, _protected=protected, _root=root, _stdlib=stdlib_names, _dir=stdlib_dir,
        _finder=PathFinder, _missing=ModuleNotFoundError,
    ):  # fmt: skip
        """Top-level names: the repository's packages from the repository only, stdlib names from the stdlib."""
        if "." in name:
            return None
        if name in _protected:
            spec = _finder.find_spec(name, [_root])
            if spec is None:
                raise _missing(f"{name} is not in the repository (an installed copy is not used)", name=name)
            return spec
        if name in _stdlib:
            return _finder.find_spec(name, [_dir, _dir + "/lib-dynload"])
        return None

    def source_only(
        entry, _root=root, _prefix=test_prefix, _ff=FileFinder, _how=(SourceFileLoader, tuple(SOURCE_SUFFIXES)),
        _err=ImportError,
    ):  # fmt: skip
        """Directories of the repository load ``.py`` sources only (no bytecode, no extension modules)."""
        if entry == _root or entry.startswith(_prefix):
            return _ff(entry, _how)
        raise _err("not in the repository")

    def runtest_call(item, _audit=audit, _base=BaseException):
        # a second witness besides the report: did the test function raise? (a report patched to say
        # "passed", even one that restores the patch before anyone looks, disagrees with it)
        _audit("pivotgym.judge", "item", item)
        try:
            return (yield)
        except _base:
            _audit("pivotgym.judge", "raised", item)
            raise

    def logreport(report, _audit=audit, _exc=Exception):
        try:  # only for display: the outcome is read by the hook itself
            text = report.longreprtext[-1500:] if report.outcome == "failed" else ""
        except _exc:
            text = ""
        _audit("pivotgym.judge", "report", report, text)

    def collectreport(report, _audit=audit, _exc=Exception):
        try:
            text = report.longreprtext[-1500:] if report.outcome == "failed" else ""
        except _exc:
            text = ""
        _audit("pivotgym.judge", "collect", report, text)

    # rebuilt on a globals dict of their own with no builtins: their __globals__ is all the repository can reach
    # from them, and it leads nowhere (the hook's functions run on globals no reachable object refers to)
    bare: dict[str, object] = {"__builtins__": {}}
    find_spec, source_only, runtest_call, logreport, collectreport = (
        FunctionType(f.__code__, bare, f.__name__, f.__defaults__)
        for f in (find_spec, source_only, runtest_call, logreport, collectreport)
    )
    guard = SimpleNamespace(find_spec=find_spec)  # importlib calls .find_spec
    plugin = SimpleNamespace(
        pytest_runtest_call=pytest.hookimpl(wrapper=True)(runtest_call),
        pytest_runtest_logreport=logreport,
        pytest_collectreport=collectreport,
    )
    for fn in (find_spec, source_only, runtest_call, logreport, collectreport):
        own_functions.add(id(fn))
        reporter_codes.add(id(fn.__code__))

    # ---------------------------------------------------------------- the hook's side of the records
    # a failing subtest's report counts against its test (the host lets "failed" win)
    report_types = (
        reports.TestReport,
        *(c for c in [getattr(sys.modules.get("_pytest.subtests"), "SubtestReport", None)] if c),
    )
    state: dict[str, object] = {}  # pytest's plugin manager, from the first test item
    raised: set[str] = set()

    # slot descriptors of pytest's and pluggy's classes, captured now: reading through them runs no Python code
    slot_descriptors: dict[str, list[tuple[type, object]]] = {}
    for cls, names in (
        (Node, ("_id", "parent", "config")),
        (pluggy.HookCaller, ("_hookimpls",)),
        (HookImpl, ("function", "plugin")),
    ):
        for name in names:
            slot_descriptors.setdefault(name, []).append((cls, vars(cls)[name]))

    def field(obj: object, name: str) -> object:
        """An attribute from an object's own ``__dict__`` or one of the slots above (no descriptor of the
        object's class, no ``__getattr__`` runs), else None."""
        if obj is None:
            return None
        try:
            own_dict = vars(obj)
        except TypeError:
            own_dict = {}
        if type(own_dict) is dict and name in own_dict:
            return own_dict[name]
        for cls, descriptor in slot_descriptors.get(name, ()):
            if issubclass(type(obj), cls):
                try:
                    return descriptor.__get__(obj, cls)  # type: ignore[attr-defined]
                except AttributeError:
                    return None
        return None

    def check_framework() -> None:
        """Emit a tampered record for each thing that is no longer what the hook saw before the run."""
        for obj, attr, ref in hot_refs:
            if vars(obj).get(attr) is not ref:
                emit("tampered", f"{getattr(obj, '__name__', '?')}.{attr}")
        if not any(f is guard for f in sys.meta_path) or field(guard, "find_spec") is not find_spec:
            emit("tampered", "the import guard")
        if not any(h is source_only for h in sys.path_hooks):
            emit("tampered", "the repository's path hook")
        pm = state.get("pm")
        if pm is None:
            return
        for name, caller in list(vars(field(pm, "hook") or SimpleNamespace()).items()):
            if type(caller) is not pluggy.HookCaller:
                continue
            for impl in field(caller, "_hookimpls") or ():  # type: ignore[attr-defined]
                code = function_code(field(impl, "function"))
                if code is None or not (id(code) in trusted_codes or trusted_file(code.co_filename)):
                    where = code.co_filename if code is not None else "not a function"
                    emit("tampered", f"a hook implementation of {name} from {str(where)[:120]}")

    def node_id(obj: object) -> str | None:
        """A node's or report's test id, read from its own fields (``NodeId.__str__`` is hot-checked)."""
        ident = field(obj, "_id")
        if type(ident) is str:
            return ident
        return str(ident) if type(ident) is NodeId else None

    def check_item(item: object) -> None:
        """The test function comes from its pristine file, in the module pytest imported from it, and every
        test-file function the test can reach through that module is the pristine code."""
        if not issubclass(type(item), Function):
            emit("tampered", "a test item pytest did not make")
            return
        node = node_id(item)
        if field(item, "runtest") is not None:  # an instance's own runtest (the classes': the snapshot)
            emit("tampered", f"the test item {node} carries its own runtest")
        parent = field(item, "parent")
        while parent is not None and type(parent) is not PytestModule:
            parent = field(parent, "parent")
        module = field(parent, "_obj")
        origin = field(field(module, "__spec__"), "origin")
        fn = field(item, "_obj")
        for _ in range(8):  # decorators (mock.patch, functools.wraps) keep the test as __wrapped__
            inner = field(fn.__func__ if type(fn) is MethodType else fn, "__wrapped__")
            fn = inner if inner is not None else fn
        code = function_code(fn)
        if not pristine_files:  # a run without pristine tests to compare with (synthesis screens its own trees)
            return
        if type(module) is not ModuleType or origin not in pristine_files:
            emit("tampered", f"the module of {node} is not the one imported from its file")
        elif code is None or code.co_filename != origin:
            emit("tampered", f"the function of {node} is not defined in its test file")
        else:
            for value in [fn, *vars(module).values()]:
                c = function_code(value)
                if c is not None and c.co_filename in pristine_files:
                    if pristine_code.get((c.co_filename, c.co_name, c.co_firstlineno)) != code_digest(c):
                        emit("tampered", f"{c.co_name} in {c.co_filename} is not the pristine test code")

    def record(args: tuple) -> None:
        kind = args[0]
        if kind == "item" and "pm" not in state:
            config = field(args[1], "config")
            if type(config) is Config:
                state["pm"] = field(config, "pluginmanager")
        check_framework()
        if kind == "item":
            check_item(args[1])
        elif kind == "raised":
            node = node_id(args[1])
            if type(node) is str:
                raised.add(node)
        elif kind in ("report", "collect"):
            report, text = args[1], args[2] if type(args[2]) is str else ""
            if type(report) not in (report_types if kind == "report" else (reports.CollectReport,)):
                emit("tampered", "a report pytest did not make")
                return
            node, when, outcome = node_id(report), field(report, "when"), field(report, "outcome")
            if type(node) is not str or type(outcome) is not str:
                emit("tampered", "a report without a test id or outcome")
                return
            if kind == "collect":
                if outcome == "failed":
                    emit("test", "<collection>:" + node, "collect", "failed", text)
                return
            if type(when) is not str:
                return
            if when == "call" and outcome == "passed" and node in raised:
                emit("tampered", f"report of {node} says passed but the test raised")
                outcome = "failed"
            if when == "call" or outcome != "passed":
                emit("test", node, when, outcome, text if outcome == "failed" else "")
        elif kind == "end":
            after = snapshot()
            for key, value in before.items():
                if key not in volatile and after.get(key) is not value:
                    emit("tampered", ".".join(key))
            emit("end", str(args[1]) if type(args[1]) is int else "-1")
            exit_now(0)
        else:
            refuse(f"an unknown judge record {kind!r}")

    def codes_of(code: object, into: set[int]) -> None:
        into.add(id(code))
        for const in getattr(code, "co_consts", ()):
            if type(const) is CodeType:
                codes_of(const, into)

    this = getframe(0).f_code
    codes_of(this, trusted_codes)
    trusted_codes.add(id(getframe(1).f_code))  # the ``-c`` text that called this function
    reporter_codes.add(id(this))  # the end record

    sys.meta_path.insert(0, guard)
    sys.path_hooks.insert(0, source_only)
    sys.path_importer_cache.clear()
    sys.path.insert(0, root)
    args = [
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:randomly",
        "-p",
        "no:faulthandler",  # it installs signal handlers, which the kernel confinement refuses
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
    armed[0] = True
    try:
        code = int(pytest.main(args, plugins=[plugin]))
    except BaseException as exc:  # SystemExit or anything else raised by the code under test
        code = -1
        emit("test", "<session>", "session", "failed", repr(type(exc)))
    audit("pivotgym.judge", "end", code)
    exit_now(3)  # not reached: the hook ends the process on "end"


if __name__ == "__main__":  # as ``python -c TEXT``; importing this module does nothing
    import builtins as _builtins
    from types import FunctionType as _FunctionType

    # the runner runs on globals of its own, with a private copy of the builtins: names planted later in
    # __main__ or builtins never reach the hook, and no object the repository can reach refers to them
    _private: dict[str, object] = {"__builtins__": dict(vars(_builtins)), "__name__": "pivotgym_judge"}
    _private["code_digest"] = _FunctionType(code_digest.__code__, _private, "code_digest", code_digest.__defaults__)
    _code = _main.__code__
    del _main, code_digest
    _FunctionType(_code, _private)()
