"""The trusted half of the SWE judge's test process. Never imported: its text runs as ``python -I -c TEXT``.

``argv``: result path, repository root, comma-separated top-level names of the repository, pytest targets and
options. The order of events is the defence (see ``testing.py`` for the whole design):

1. before any code of the repository can run: read the nonce from stdin (then stdin is /dev/null), open the
   result file (``O_EXCL``, on a mount outside the repository), keep private references to ``os.write`` /
   ``os._exit`` / ``json.dumps``, import pytest, every ``_pytest`` module and pluggy, stop pytest from reading
   cached (agent-plantable) bytecode of test modules, and record the identity of every function and class in
   them (plus ``json`` and ``builtins``);
2. install an import guard so the repository's own top-level packages come from the repository or not at
   all (a deleted package must not fall back to an installed copy of the same project);
3. run pytest with plugin autoload off, no cache, no ini, collecting per-test outcomes in a plugin object
   that lives only in this function's locals (nothing in ``__main__`` to replace), with a second witness: a
   wrapper around each test call that sees whether the test function raised;
4. check that nothing recorded in 1 was replaced (on every report, and at the end), write one JSON record
   with the nonce to the result file, and ``os._exit(0)`` at once: ``atexit`` handlers and threads that the
   code under test left behind never run after the verdict is written.
"""


def _main() -> None:  # noqa: C901 - one linear script, kept in one function so nothing lands in __main__
    import os
    import sys

    out_path, root, protected = sys.argv[1], sys.argv[2], {n for n in sys.argv[3].split(",") if n}
    targets = sys.argv[4:]
    nonce = sys.stdin.readline().strip()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    out = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    write, exit_now = os.write, os._exit

    import builtins  # noqa: F401 - imported before repository code runs, like the modules it guards
    import importlib
    import json
    import pkgutil
    from importlib.machinery import PathFinder

    import _pytest
    import pluggy
    import pytest

    for info in pkgutil.iter_modules(_pytest.__path__, "_pytest."):
        try:
            importlib.import_module(info.name)
        except Exception:  # noqa: BLE001,S112 - optional modules (e.g. needing a missing extra)
            continue
    dumps = json.dumps
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
    tampered: set[str] = set()

    class RepoOnly:
        """Import the repository's own top-level packages from ``root`` only."""

        def find_spec(self, name, path=None, target=None):  # noqa: ANN001, ANN201, ARG002
            if "." in name or name not in protected:
                return None
            spec = PathFinder.find_spec(name, [root])
            if spec is None:
                raise ModuleNotFoundError(f"{name} is not in the repository (an installed copy is not used)", name=name)
            return spec

    guard = RepoOnly()
    sys.meta_path.insert(0, guard)
    sys.path.insert(0, root)
    results: dict[str, tuple[str, str]] = {}

    def check_hot() -> None:
        for obj, attr, ref in hot_refs:
            if vars(obj).get(attr) is not ref:
                tampered.add(f"{getattr(obj, '__name__', obj)}.{attr}")
        if not any(finder is guard for finder in sys.meta_path):  # pytest's rewrite hook goes before it
            tampered.add("sys.meta_path")

    raised: set[str] = set()

    class Collect:
        @pytest.hookimpl(wrapper=True)
        def pytest_runtest_call(self, item):  # noqa: ANN001, ANN201
            # a second witness besides the report: did the test function raise? (a report patched to say
            # "passed", even one that restores the patch before anyone looks, disagrees with it)
            try:
                return (yield)
            except BaseException:
                raised.add(item.nodeid)
                raise

        def pytest_runtest_logreport(self, report):  # noqa: ANN001, ANN201
            check_hot()
            prev = results.get(report.nodeid)
            outcome = report.outcome
            if report.when == "call" and outcome == "passed" and report.nodeid in raised:
                outcome = "failed"
                tampered.add(f"report of {report.nodeid} says passed but the test raised")
            if report.when == "call" or outcome != "passed":
                if prev is None or prev[0] == "passed" or outcome == "failed":
                    text = report.longreprtext[-1500:] if outcome == "failed" else ""
                    results[report.nodeid] = (outcome, text)

        def pytest_collectreport(self, report):  # noqa: ANN001, ANN201
            if report.outcome == "failed":
                results["<collection>:" + report.nodeid] = ("failed", report.longreprtext[-1500:])

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
    try:
        code = int(pytest.main(args, plugins=[Collect()]))
    except BaseException as exc:  # noqa: BLE001 - SystemExit or anything else raised by the code under test
        code = -1
        results["<session>"] = ("failed", repr(exc)[-1500:])
    check_hot()
    after = snapshot()
    tampered.update(".".join(k) for k, v in before.items() if k not in volatile and after.get(k) is not v)
    data = dumps({"nonce": nonce, "exit": code, "results": results, "tampered": sorted(tampered)}).encode()
    while data:
        data = data[write(out, data) :]
    exit_now(0)


if __name__ == "__main__":  # as ``python -c TEXT``; importing this module does nothing
    _main()
