"""Smoke mode for the benchmarks: every script's smallest real run, so none can rot (tests/test_benchmarks.py).

With ``PIVOTGYM_BENCH_SMOKE=1`` a script takes its toy sizes (fewest items, one repeat, the tiny random Llama
of :mod:`pivotgym.sampling.testing` for a model) as its defaults, runs its real code path once and prints its
figures and ratio line as usual; goals a toy size cannot meet are printed but not judged. A script that needs
what a smoke run cannot have (a vLLM venv, a Docker engine, a finished experiment run) prints ``skipped:``
and why, and exits 0. In a script (run as ``python benchmarks/NAME.py``, its folder is on ``sys.path``)::

    from _smoke import parse_args, smoke, tiny_model

    args = parse_args(parser, argv, steps=2, model=tiny_model)  # toy defaults; explicit options still win

Run as a script, this module runs the named benchmarks (default: all) in smoke mode, one after the other in
this one process, so the imports (torch, transformers) and the tiny model are paid for once::

    PIVOTGYM_BENCH_SMOKE=1 python benchmarks/_smoke.py [NAME.py ...] [--json-out FILE] [--timeout S]
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import io
import json
import os
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

#: the environment variable that turns smoke mode on ("1"; unset, "" or "0": off)
SMOKE_ENV = "PIVOTGYM_BENCH_SMOKE"

HERE = Path(__file__).resolve().parent

_tiny_model_dir: Path | None = None


def smoke() -> bool:
    """Whether this run is a smoke run (``PIVOTGYM_BENCH_SMOKE=1``)."""
    return os.environ.get(SMOKE_ENV, "") not in ("", "0")


def tiny_model() -> str:
    """A folder holding the tiny random Llama (~3M parameters, SmolLM2's tokenizer), saved once per process:
    what ``--model`` means in smoke mode. Its text is gibberish; the code paths are the real ones."""
    global _tiny_model_dir
    if _tiny_model_dir is None:
        from pivotgym.sampling.testing import tiny_llama

        model, tokenizer = tiny_llama(seed=0)
        folder = Path(tempfile.mkdtemp(prefix="bench-smoke-model-"))
        atexit.register(shutil.rmtree, folder, True)
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        _tiny_model_dir = folder
    return str(_tiny_model_dir)


def parse_args(parser: argparse.ArgumentParser, argv: list[str] | None = None, **toy: Any) -> argparse.Namespace:
    """``parser.parse_args(argv)``; in smoke mode the ``toy`` values become the defaults first, so options given
    on the command line still win. A callable toy value (e.g. :func:`tiny_model`) is called only then."""
    if smoke():
        parser.set_defaults(**{name: value() if callable(value) else value for name, value in toy.items()})
    return parser.parse_args(argv)


def skip(reason: str) -> NoReturn:
    """End a smoke run that cannot happen here: ``skipped: REASON`` on stdout, exit status 0."""
    print(f"skipped: {reason}", flush=True)
    raise SystemExit(0)


def goal_met(ok: bool, what: str) -> bool:
    """``ok``, except in smoke mode, where a toy size decides nothing: the goal is named as not judged."""
    if ok or not smoke():
        return ok
    print(f"(smoke run: goal {what} not judged at toy size)")
    return True


# ------------------------------------------------------------------------------------------------ the runner
def scripts() -> list[Path]:
    """Every benchmark: ``benchmarks/*.py`` but the helpers (``_*.py``)."""
    return sorted(p for p in HERE.glob("*.py") if not p.name.startswith("_"))


class _Timeout(BaseException):
    """Raised in a script that ran past its time (a BaseException, so no ``except Exception`` swallows it)."""


def _exit_code(value: object) -> int:
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    print(value, file=sys.stderr)  # sys.exit("message"), as the interpreter would print it
    return 1


def run_one(path: Path, timeout: float) -> dict[str, Any]:
    """Run one script in this process as ``__main__`` (no arguments, smoke mode); its exit code, captured
    output and wall time. The environment, ``sys.argv``, the working directory and the registry are restored
    afterwards, so the next script starts as in a fresh process (but for what is already imported)."""
    import runpy

    from pivotgym.registry import reset_registry

    saved_env, saved_argv, saved_cwd, saved_path = dict(os.environ), sys.argv, os.getcwd(), list(sys.path)
    out, err = io.StringIO(), io.StringIO()

    def expire(signum: int, frame: Any) -> NoReturn:
        raise _Timeout(f"{path.name} ran past {timeout:.0f} s")

    previous: Callable[..., Any] | int | None = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    start = time.perf_counter()
    try:
        os.environ[SMOKE_ENV] = "1"
        sys.argv = [str(path)]
        sys.path.insert(0, str(HERE))
        reset_registry()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                runpy.run_path(str(path), run_name="__main__")
                code = 0
            except SystemExit as exc:
                code = _exit_code(exc.code)
            except (Exception, _Timeout):
                traceback.print_exc()
                code = 1
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        seconds = time.perf_counter() - start
        os.environ.clear()
        os.environ.update(saved_env)
        sys.argv, sys.path[:] = saved_argv, saved_path
        os.chdir(saved_cwd)
        reset_registry()
    return {
        "script": path.name,
        "code": code,
        "seconds": round(seconds, 2),
        "stdout": out.getvalue(),
        "stderr": err.getvalue(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run benchmarks in smoke mode in one process.")
    parser.add_argument("names", nargs="*", help="script file names (default: every benchmark)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per script")
    parser.add_argument("--json-out", type=Path, help="write the results (code, seconds, output) here")
    args = parser.parse_args(argv)
    os.environ[SMOKE_ENV] = "1"
    paths = [HERE / name for name in args.names] if args.names else scripts()
    results = []
    for path in paths:
        print(f"== {path.name}", file=sys.stderr, flush=True)
        result = run_one(path, args.timeout)
        results.append(result)
        print(f"   exit {result['code']}, {result['seconds']:.1f} s", file=sys.stderr, flush=True)
        if args.json_out is not None:  # after each script: a later hang still leaves the finished ones
            args.json_out.write_text(json.dumps(results, indent=2))
        if result["code"] != 0 and args.json_out is None:
            print(result["stdout"] + result["stderr"], file=sys.stderr)
    total = sum(r["seconds"] for r in results)
    print(f"{sum(r['code'] == 0 for r in results)} of {len(results)} ran clean in {total:.1f} s", file=sys.stderr)
    return 0 if all(r["code"] == 0 for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
