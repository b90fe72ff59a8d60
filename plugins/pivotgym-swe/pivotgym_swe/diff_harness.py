"""The sandboxed half of the differential check. Never imported: its text runs as ``python -s -P -B -c TEXT``
(with ``PYTHONHASHSEED=0``, so set and dict orders are the same in every run).

It reads one JSON payload from stdin *before* any repository code runs, moves its output channel to a private
descriptor (fd 1 and 2 then point at /dev/null, so what the code under test prints never mixes with it), and
writes one bounded JSON line per observation, each prefixed by the payload's nonce. Two modes:

* ``record`` (run on the **pristine** tree only, trusted code): wraps the target functions, runs the task's
  own test files with pytest and the docstring examples of the targets, and writes the arguments of every
  call as *value specs* (JSON descriptions of plain values: numbers, strings, containers, finite iterators,
  ranges, named functions of the standard library or the project, and functions written in the test files -
  lambdas, helpers - by value: marshalled code with the globals, cells and defaults it needs). Calls with
  anything else (an object of a test class, an infinite iterator) are skipped.
* ``run``: imports the module from the repository copy it runs in, calls each target on each input (built
  from its spec), and writes, per call, a digest of the canonical form of the result (exact type names,
  container element types and values, iterators drained up to a cap, exceptions by type) together with the
  state of mutable arguments after the call and what the call printed; then runs each docstring example (the
  host sends the originals and copies with changed literals alike) and writes what it printed or raised.

Nothing here decides a verdict. The host compares the lines of a candidate's run with those of the reference
run (which the candidate's process never sees): code under test that rewrites this harness can change what is
printed, but to be credited it has to print what the reference prints for inputs it learns only at run time.
"""


def _main() -> None:
    import builtins
    import collections
    import functools
    import hashlib
    import importlib
    import io
    import itertools
    import json
    import marshal
    import os
    import random
    import re
    import signal
    import sys
    import traceback
    import types

    clock = __import__("time").perf_counter
    payload = json.loads(sys.stdin.read())
    nonce = str(payload["nonce"])
    write, exit_now = os.write, os._exit
    channel = os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.dup2(null, 2)
    real_stdout: io.StringIO = io.StringIO()  # what is printed outside a call or an example is dropped
    sys.stdout = real_stdout
    sys.stderr = io.StringIO()

    cap_items = int(payload.get("cap_items", 200))
    cap_text = int(payload.get("cap_text", 2000))
    per_call = float(payload.get("per_call_seconds", 2.0))
    root = str(payload["root"])

    def emit(record: dict) -> None:
        data = (nonce + "\t" + json.dumps(record, sort_keys=True, default=str)[:65536] + "\n").encode()
        while data:
            data = data[write(channel, data) :]

    class Timeout(BaseException):
        pass

    def on_alarm(_signum, _frame):
        raise Timeout()

    signal.signal(signal.SIGALRM, on_alarm)
    # the kernel confinement put in front of this text (pivotgym_swe.confine), installed now: after the one
    # signal handler this harness needs (it refuses new ones) and before any repository code is imported
    globals()["confine"]()

    def timed(fn, *args, **kwargs):
        signal.setitimer(signal.ITIMER_REAL, per_call)
        try:
            return fn(*args, **kwargs)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)

    def type_name(t: type) -> str:
        return f"{getattr(t, '__module__', '?')}.{getattr(t, '__qualname__', '?')}"

    # ------------------------------------------------------------------ value specs -> values
    allowed_ref_modules = {
        "builtins",
        "operator",
        "math",
        "itertools",
        "functools",
        "collections",
        "string",
        "random",
        *payload.get("packages", []),
    }

    def resolve(ref: str):
        module, _, qual = ref.partition(":")
        if module.split(".")[0] not in allowed_ref_modules:
            raise ValueError(f"reference to {ref} not allowed")
        obj = importlib.import_module(module)
        for part in qual.split("."):
            obj = getattr(obj, part)
        return obj

    def build(spec):
        t, v = spec["t"], spec.get("v")
        if t == "none":
            return None
        if t == "bool":
            return bool(v)
        if t == "int":
            return int(v)
        if t == "float":
            return float(v)
        if t == "complex":
            return complex(v)
        if t == "str":
            return str(v)
        if t == "bytes":
            return bytes.fromhex(v)
        if t == "list":
            return [build(x) for x in v]
        if t == "tuple":
            return tuple(build(x) for x in v)
        if t == "set":
            return {build(x) for x in v}
        if t == "frozenset":
            return frozenset(build(x) for x in v)
        if t == "dict":
            return {build(k): build(x) for k, x in v}
        if t == "ordereddict":
            return collections.OrderedDict((build(k), build(x)) for k, x in v)
        if t == "counter":
            return collections.Counter({build(k): build(x) for k, x in v})
        if t == "defaultdict":
            return collections.defaultdict(
                resolve(spec["f"]) if spec.get("f") else None, {build(k): build(x) for k, x in v}
            )
        if t == "range":
            return range(*v)
        if t == "iter":
            return iter([build(x) for x in v])
        if t == "ref":
            return resolve(v)
        if t == "module":
            if str(v).split(".")[0] not in allowed_ref_modules:
                raise ValueError(f"module {v} not allowed")
            return importlib.import_module(v)
        if t == "code":  # a function of the tests (a lambda, a helper): its code, globals, cells and defaults
            namespace = {"__builtins__": builtins, "__name__": "<test function>"}
            namespace.update({name: build(g) for name, g in spec.get("g", {}).items()})
            cells = tuple(types.CellType(build(c)) for c in spec.get("c", []))
            defaults = tuple(build(d) for d in spec.get("d", [])) or None
            code = marshal.loads(bytes.fromhex(v))
            return types.FunctionType(code, namespace, code.co_name, defaults, cells or None)
        raise ValueError(f"unknown spec {t}")

    # ------------------------------------------------------------------ values -> canonical form
    iterator_types: tuple[type, ...] = (
        types.GeneratorType,
        type(iter([])),
        type(iter(())),
        type(iter(range(0))),
        map,
        filter,
        zip,
    )

    def canon(v, depth=0, budget=None):
        budget = budget if budget is not None else [20000]
        budget[0] -= 1
        if budget[0] < 0:
            return ["..."]
        t = type(v)
        if v is None:
            return ["None"]
        if t is bool:
            return ["bool", v]
        if t is int:
            h = hex(v)
            return ["int", h if len(h) <= 200 else "#" + hashlib.sha256(h.encode()).hexdigest()]
        if t is float or t is complex:
            return [t.__name__, repr(v)]
        if t is str:
            if len(v) <= cap_text:
                return ["str", v]
            return ["str", f"#{len(v)}#" + hashlib.sha256(v.encode("utf-8", "surrogatepass")).hexdigest()]
        if t is bytes or t is bytearray:
            return [t.__name__, v[:cap_text].hex(), len(v)]
        if depth > 8:
            return ["deep", type_name(t)]
        if t is list or t is tuple:
            return [t.__name__, [canon(x, depth + 1, budget) for x in v[:cap_items]], len(v)]
        if t is set or t is frozenset:
            items = sorted(json.dumps(canon(x, depth + 1, budget)) for x in itertools.islice(v, cap_items))
            return [t.__name__, items, len(v)]
        if t is dict or t is collections.Counter or t is collections.defaultdict:
            pairs = sorted(
                (json.dumps(canon(k, depth + 1, budget)), canon(x, depth + 1, budget))
                for k, x in itertools.islice(dict.items(v), cap_items)
            )
            extra = [canon(v.default_factory, depth + 1, budget)] if t is collections.defaultdict else []
            return [t.__name__, pairs, len(v), *extra]
        if t is collections.OrderedDict:
            pairs = [
                [canon(k, depth + 1, budget), canon(x, depth + 1, budget)]
                for k, x in itertools.islice(dict.items(v), cap_items)
            ]
            return ["OrderedDict", pairs, len(v)]
        if t is range:
            return ["range", v.start, v.stop, v.step]
        if t in (types.BuiltinFunctionType, types.FunctionType, type):
            return ["callable", type_name(t), getattr(v, "__module__", "?"), getattr(v, "__qualname__", "?")]
        if isinstance(v, iterator_types) or hasattr(t, "__next__"):
            label = "iter" if (isinstance(v, iterator_types) or t.__module__ == "itertools") else type_name(t)
            items, raised = [], None
            try:
                for x in itertools.islice(v, cap_items + 1):
                    items.append(canon(x, depth + 1, budget))
            except Timeout:
                raise
            except BaseException as exc:
                raised = type_name(type(exc))
            return ["iter", label, items[:cap_items], len(items) > cap_items, raised]
        return ["obj", type_name(t), re.sub(r"0x[0-9a-fA-F]{4,}", "0x?", repr(v)[: 4 * cap_text])[:cap_text]]

    def digest(value) -> str:
        return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()

    # ------------------------------------------------------------------ the module under test
    sys.path.insert(0, root)
    module_name = str(payload["module"])

    def load_module():
        module = importlib.import_module(module_name)
        origin = os.path.realpath(getattr(module, "__file__", "") or "")
        if not origin.startswith(os.path.realpath(root) + os.sep):
            raise ImportError(f"{module_name} was not imported from the repository")
        return module

    def lookup(module, qualname: str):
        obj = module
        for part in qualname.split("."):
            obj = getattr(obj, part)
        return obj

    def run_examples(module, groups) -> None:
        for group in groups:
            globs = dict(vars(module))
            globs["__name__"] = module.__name__
            random.seed(0)
            for example in group["examples"]:
                buf = io.StringIO()
                sys.stdout = buf
                exc_line = None
                started = clock()
                try:
                    code = compile(example["source"], "<doctest>", "single", dont_inherit=True)
                    timed(exec, code, globs)
                except Timeout:
                    exc_line = "<timeout>"
                except BaseException as exc:
                    try:
                        exc_line = traceback.format_exception_only(type(exc), exc)[-1]
                    except BaseException:
                        exc_line = type_name(type(exc)) + "\n"
                finally:
                    sys.stdout = real_stdout
                emit(
                    {
                        "k": "doc",
                        "id": example["id"],
                        "got": buf.getvalue()[:cap_text],
                        "exc": exc_line and exc_line[:cap_text],
                        "ms": int((clock() - started) * 1000),
                    }
                )

    # ------------------------------------------------------------------ record mode
    if payload["mode"] == "record":
        import pytest  # before the repository joins the import system's view

        module = load_module()
        calls: list = []
        limit = int(payload.get("max_calls", 400))
        seen: set = set()

        class Unsupported(Exception):
            pass

        def ref_of(v) -> str:
            """``module:qualname`` of a named callable of the standard library or the project (``_operator``'s
            functions by their public module), checked to resolve to the same object."""
            mod, qual = getattr(v, "__module__", None), getattr(v, "__qualname__", None)
            if not isinstance(mod, str) or not isinstance(qual, str) or "<" in qual:
                raise Unsupported()
            for name in (mod.lstrip("_"), mod) if mod.startswith("_") else (mod,):
                if name.split(".")[0] not in allowed_ref_modules:
                    continue
                try:
                    if resolve(f"{name}:{qual}") is v:
                        return f"{name}:{qual}"
                except (ImportError, AttributeError, ValueError):
                    continue
            raise Unsupported()

        def from_tests(fn) -> bool:
            """Whether a function was written in a test file (only those travel by value: the project's own
            functions, the fixed one included, must come from the candidate's code)."""
            path = os.path.realpath(fn.__code__.co_filename)
            rel = os.path.relpath(path, os.path.realpath(root))
            parts = rel.split(os.sep)
            return not rel.startswith("..") and (
                parts[-1].startswith("test_")
                or parts[-1] == "conftest.py"
                or any(p in ("tests", "test") for p in parts)
            )

        def enc(v, depth=0):
            if depth > 6:
                raise Unsupported()
            t = type(v)
            if v is None:
                return {"t": "none"}
            if t is bool:
                return {"t": "bool", "v": v}
            if t is int:
                if abs(v) > 10**100:
                    raise Unsupported()
                return {"t": "int", "v": str(v)}
            if t is float or t is complex:
                return {"t": t.__name__, "v": repr(v)}
            if t is str:
                if len(v) > 2000:
                    raise Unsupported()
                return {"t": "str", "v": v}
            if t is bytes:
                return {"t": "bytes", "v": v.hex()}
            if t in (list, tuple, set, frozenset):
                if len(v) > 200:
                    raise Unsupported()
                return {"t": t.__name__, "v": [enc(x, depth + 1) for x in v]}
            if t in (dict, collections.OrderedDict, collections.Counter, collections.defaultdict):
                if len(v) > 200:
                    raise Unsupported()
                name = {dict: "dict", collections.OrderedDict: "ordereddict", collections.Counter: "counter"}.get(
                    t, "defaultdict"
                )
                spec = {"t": name, "v": [[enc(k, depth + 1), enc(x, depth + 1)] for k, x in dict.items(v)]}
                if t is collections.defaultdict:
                    spec["f"] = ref_of(v.default_factory) if v.default_factory is not None else None
                return spec
            if t is range:
                return {"t": "range", "v": [v.start, v.stop, v.step]}
            if t is types.ModuleType:
                if v.__name__.split(".")[0] not in allowed_ref_modules:
                    raise Unsupported()
                return {"t": "module", "v": v.__name__}
            if t is types.FunctionType and from_tests(v):
                return enc_function(v, depth)
            if callable(v):
                return {"t": "ref", "v": ref_of(v)}
            raise Unsupported()

        def enc_function(fn, depth):
            """A function of the tests, by value: its code object (marshalled: the reference and the candidate run
            on the same interpreter), the globals it names, its closure cells and its defaults."""
            code = fn.__code__
            if depth > 3 or code.co_flags & 0x20 or fn.__kwdefaults__:  # nesting, generators, kw-only defaults
                raise Unsupported()
            names = set(code.co_names)
            for const in code.co_consts:  # nested code (comprehensions, inner lambdas) names globals too
                if isinstance(const, types.CodeType):
                    names |= set(const.co_names)
            found = {}
            for name in sorted(names):
                if name in fn.__globals__ and fn.__globals__[name] is not fn:
                    try:
                        found[name] = enc(fn.__globals__[name], depth + 1)
                    except Unsupported:
                        pass  # an attribute name, or something the call may not need: the reference run decides
            cells = [enc(c.cell_contents, depth + 1) for c in fn.__closure__ or ()]
            defaults = [enc(d, depth + 1) for d in fn.__defaults__ or ()]
            return {"t": "code", "v": marshal.dumps(code).hex(), "g": found, "c": cells, "d": defaults}

        def snapshot(v):
            """(spec, value to pass on): a finite iterator is drained into the spec and replayed."""
            if isinstance(v, iterator_types) or (hasattr(type(v), "__next__") and iter(v) is v):
                items = list(itertools.islice(v, 201))
                if len(items) > 200:
                    return None, itertools.chain(items, v)
                try:
                    return {"t": "iter", "v": [enc(x, 1) for x in items]}, iter(items)
                except Exception:
                    return None, iter(items)
            return enc(v), v

        def wrap(qualname: str, fn):
            @functools.wraps(fn)
            def recorder(*args, **kwargs):
                if len(calls) >= limit:
                    return fn(*args, **kwargs)
                passed_args, passed_kwargs, ok = [], {}, True
                specs, kwspecs = [], {}
                for a in args:
                    try:
                        spec, value = snapshot(a)
                    except Exception:
                        spec, value = None, a
                    ok = ok and spec is not None
                    specs.append(spec)
                    passed_args.append(value)
                for key, a in kwargs.items():
                    try:
                        spec, value = snapshot(a)
                    except Exception:
                        spec, value = None, a
                    ok = ok and spec is not None
                    kwspecs[key] = spec
                    passed_kwargs[key] = value
                if ok:
                    key = json.dumps([qualname, specs, kwspecs], sort_keys=True)
                    if key not in seen and len(key) <= 20000:
                        seen.add(key)
                        calls.append({"target": qualname, "args": specs, "kwargs": kwspecs})
                return fn(*passed_args, **passed_kwargs)

            return recorder

        for qualname in payload["targets"]:
            original = lookup(module, qualname)
            wrapped = wrap(qualname, original)
            for mod in list(sys.modules.values()):
                for name, value in list(getattr(mod, "__dict__", {}).items()):
                    if value is original:
                        setattr(mod, name, wrapped)
        tests = [os.path.join(root, t) for t in payload.get("tests", [])]
        if tests:
            pytest.main(
                [*tests, "-q", "-p", "no:cacheprovider", "-p", "no:faulthandler", "-c", os.devnull, "--rootdir", root]
                + ["-o", "addopts="]
            )
        run_examples(module, payload.get("examples", []))
        for call in calls:
            emit({"k": "seed", **call})
        emit({"k": "end"})
        exit_now(0)

    # ------------------------------------------------------------------ run mode
    try:
        module = load_module()
    except BaseException as exc:
        emit({"k": "import_error", "error": type_name(type(exc))})
        exit_now(0)
    for item in payload.get("inputs", []):
        buf = io.StringIO()
        result: dict = {}
        try:
            fn = lookup(module, item["target"])
            args = [build(s) for s in item["args"]]
            kwargs = {k: build(s) for k, s in item["kwargs"].items()}
            random.seed(0)
            sys.stdout = buf
            started = clock()
            try:
                value = timed(fn, *args, **kwargs)
                signal.setitimer(signal.ITIMER_REAL, per_call)
                try:
                    result["ret"] = canon(value)
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
            except Timeout:
                result["ret"] = ["timeout"]
            except BaseException as exc:
                result["ret"] = ["raise", type_name(type(exc))]
            finally:
                sys.stdout = real_stdout
            after = []
            for spec, value in zip(item["args"], args):
                if spec["t"] in ("list", "dict", "set", "iter", "ordereddict", "counter", "defaultdict"):
                    signal.setitimer(signal.ITIMER_REAL, per_call)
                    try:
                        after.append(canon(value))
                    except Timeout:
                        after.append(["timeout"])
                    finally:
                        signal.setitimer(signal.ITIMER_REAL, 0)
            result["after"] = after
            result["out"] = buf.getvalue()[:cap_text]
            text = json.dumps(result["ret"])
            ms = int((clock() - started) * 1000)
            emit({"k": "call", "id": item["id"], "h": digest(result), "p": text[:300], "ms": ms})
        except Timeout:
            emit({"k": "call", "id": item["id"], "h": digest(["timeout"]), "p": "timeout"})
        except BaseException as exc:
            emit({"k": "call", "id": item["id"], "h": digest(["harness", type_name(type(exc))]), "p": "harness error"})
    run_examples(module, payload.get("examples", []))
    emit({"k": "end"})
    exit_now(0)


_main()
