"""Fan-out of independent tasks (verifications, rollouts) over processes or a Ray cluster.

Three backends share one small interface, :class:`Executor`:

* ``serial``  - in the calling process (debugging; a deadline is reported but the task cannot be stopped);
* ``process`` - the default: a pool of local worker processes that the supervisor kills and replaces when a
  task overruns its deadline or its process dies, so one hung or crashing verifier costs one failed result
  and never the run;
* ``ray``     - Ray tasks on a local or remote cluster (``ray.init(address=...)``), with the same deadline
  and crash handling (``ray.cancel(force=True)`` kills an overdue task's worker).

``Executor.map(fn, items, timeout=...)`` returns one :class:`TaskResult` per item, in input order. ``fn``
must be a module-level function (it is pickled by reference). Workers see the same plugins as the caller:
each task carries a :class:`WorkerSetup` (``sys.path`` additions and the ``PIVOTGYM_*`` environment
variables) that a worker applies, rebuilding its plugin registry when they changed, before it unpickles
the task. A registry installed programmatically with ``reset_registry(custom)`` is not visible to workers;
use the ``serial`` executor for that.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import sys
import threading
import time
import traceback
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any

__all__ = [
    "Executor",
    "ProcessExecutor",
    "RayExecutor",
    "SerialExecutor",
    "TaskResult",
    "WorkerSetup",
    "ray_init_kwargs",
    "make_executor",
    "EXECUTORS",
]

EXECUTORS = ("process", "ray", "serial")


@dataclass
class TaskResult:
    """The outcome of one task: ``ok`` with ``value``, or a failure with ``error`` saying why.

    ``error`` starts with a tag: ``timeout:``, ``crashed:`` (the worker died; the Ray executor sends such a
    task once more first) or ``exception:``.
    """

    index: int
    ok: bool
    value: Any = None
    error: str | None = None
    elapsed: float = 0.0


# ---------------------------------------------------------------------------------------- worker setup
@dataclass(frozen=True)
class WorkerSetup:
    """What a worker needs to see the caller's plugins: extra ``sys.path`` entries and env variables."""

    sys_path: tuple[str, ...] = ()
    env: tuple[tuple[str, str | None], ...] = ()

    @classmethod
    def capture(cls) -> WorkerSetup:
        names = sorted({k for k in os.environ if k.startswith("PIVOTGYM_")} | _PLUGIN_VARS)
        return cls(tuple(p or os.getcwd() for p in sys.path), tuple((k, os.environ.get(k)) for k in names))

    def apply(self) -> None:
        """Make this process match the caller; rebuild the plugin registry if anything changed."""
        global _applied
        if _applied == self:
            return
        changed = False
        for path in reversed(self.sys_path):
            if path not in sys.path:
                sys.path.insert(0, path)
                changed = True
        for name, value in self.env:
            if os.environ.get(name) != value:
                changed = True
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
        if changed or _applied is None:
            import importlib

            importlib.invalidate_caches()
            if _on_plugins_changed is not None:
                _on_plugins_changed()
        _applied = self


_PLUGIN_VARS = {"PIVOTGYM_LOAD_PLUGINS", "PIVOTGYM_DISABLE_PLUGIN_AUTOLOAD"}
_applied: WorkerSetup | None = None
#: called when a worker's plugin environment changed; the registry installs its ``reset_registry`` here
#: (:func:`set_plugins_changed_hook`), as this layer sits below it and never imports it
_on_plugins_changed: Callable[[], None] | None = None


def set_plugins_changed_hook(hook: Callable[[], None]) -> None:
    """Install what a worker calls after :meth:`WorkerSetup.apply` changed its plugin environment (the
    registry's ``reset_registry``, so the worker rebuilds the plugins it sees)."""
    global _on_plugins_changed
    _on_plugins_changed = hook


def _load_payload(setup: WorkerSetup, payload: bytes) -> tuple[Callable[[Any], Any], Any]:
    """Apply the setup, then unpickle ``(fn, item)`` (the order matters: fn may live on an added path)."""
    setup.apply()
    return pickle.loads(payload)


def _run(fn: Callable[[Any], Any], item: Any) -> tuple[bool, Any, str | None, float]:
    """Run one task; never raises."""
    start = time.perf_counter()
    try:
        return True, fn(item), None, time.perf_counter() - start
    except Exception as exc:
        tb = traceback.format_exc(limit=6)
        return False, None, f"exception: {exc!r}\n{tb}", time.perf_counter() - start


def _run_payload(setup: WorkerSetup, payload: bytes) -> tuple[bool, Any, str | None, float]:
    try:
        fn, item = _load_payload(setup, payload)
    except Exception as exc:
        return False, None, f"exception: could not load the task ({exc!r})", 0.0
    return _run(fn, item)


#: seconds a worker may take to start and load a task before the task counts as failed
START_TIMEOUT = 300.0


# ---------------------------------------------------------------------------------------- the interface
class Executor(ABC):
    """Runs ``fn(item)`` for many items concurrently, each under an optional deadline."""

    name: str = "executor"

    def __init__(self, workers: int | None = None, timeout: float | None = None) -> None:
        self.workers = max(1, int(workers or os.cpu_count() or 1))
        self.timeout = timeout

    @abstractmethod
    def map(
        self,
        fn: Callable[[Any], Any],
        items: Sequence[Any],
        *,
        timeout: float | None = None,
        on_result: Callable[[TaskResult], None] | None = None,
    ) -> list[TaskResult]:
        """Run ``fn`` on every item; results in input order. ``timeout`` (seconds, per task) overrides the
        executor's default; ``on_result`` is called in the caller's thread as each task finishes."""

    def close(self) -> None:  # noqa: B027 - a hook with nothing to release by default, not abstract
        """Release workers (idempotent)."""

    def describe(self) -> dict[str, Any]:
        return {"executor": self.name, "workers": self.workers}

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _deadline(self, timeout: float | None) -> float | None:
        return timeout if timeout is not None else self.timeout


class SerialExecutor(Executor):
    """Runs tasks one after another in this process. A deadline marks an overrunning task failed, but the
    thread running it cannot be stopped (use ``process`` for verifiers that may hang)."""

    name = "serial"

    def __init__(self, workers: int | None = None, timeout: float | None = None) -> None:
        super().__init__(1, timeout)

    def map(self, fn, items, *, timeout=None, on_result=None):
        deadline = self._deadline(timeout)
        results = []
        for index, item in enumerate(items):
            start = time.perf_counter()
            box: dict[str, Any] = {}

            def target(item: Any = item, box: dict[str, Any] = box) -> None:
                try:
                    box["value"] = fn(item)
                except Exception as exc:
                    box["error"] = f"exception: {exc!r}\n{traceback.format_exc(limit=6)}"

            if deadline is None:
                target()
            else:
                thread = threading.Thread(target=target, daemon=True, name="pivotgym-serial-task")
                thread.start()
                thread.join(deadline)
                if thread.is_alive():
                    box = {"error": f"timeout: task did not finish within {deadline}s"}
            elapsed = time.perf_counter() - start
            if "error" in box:
                result = TaskResult(index, False, None, box["error"], elapsed)
            else:
                result = TaskResult(index, True, box.get("value"), None, elapsed)
            results.append(result)
            if on_result:
                on_result(result)
        return results


# ---------------------------------------------------------------------------------------- process pool
def _worker_main(conn: Connection) -> None:
    """A pool worker: receive ``(index, setup, payload)``; send ``("started", index)`` once the task is loaded
    (its deadline counts from then), then ``("done", index, ok, value, error, elapsed)``."""
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        index, setup, payload = message
        try:
            fn, item = _load_payload(setup, payload)
        except Exception as exc:
            conn.send(("done", index, False, None, f"exception: could not load the task ({exc!r})", 0.0))
            continue
        conn.send(("started", index))
        ok, value, error, elapsed = _run(fn, item)
        try:
            conn.send(("done", index, ok, value, error, elapsed))
        except Exception as exc:
            conn.send(("done", index, False, None, f"exception: result could not be sent back ({exc!r})", elapsed))


@dataclass
class _Worker:
    process: Any
    conn: Connection
    task: tuple[int, float, float | None] | None = None  # (index, started, deadline)
    extra: dict[str, Any] = field(default_factory=dict)


class ProcessExecutor(Executor):
    """A pool of local worker processes with per-task deadlines and crash isolation.

    Workers start lazily on the first :meth:`map` and persist across calls (so per-worker caches, like a
    verifier's replayed env state, stay warm). The start method defaults to ``forkserver`` on Linux (workers
    forked from a small clean server, so a model loaded in the caller is neither copied nor inherited with
    its threads) and ``spawn`` elsewhere.
    """

    name = "process"

    def __init__(
        self, workers: int | None = None, timeout: float | None = None, start_method: str | None = None
    ) -> None:
        super().__init__(workers, timeout)
        if start_method is None:
            start_method = "forkserver" if sys.platform.startswith("linux") else "spawn"
        self.start_method = start_method
        self._ctx: Any = mp.get_context(start_method)  # a concrete context (BaseContext declares no Process)
        if start_method == "forkserver":
            self._ctx.set_forkserver_preload(["pivotgym.execution"])
        self._workers: list[_Worker] = []
        self.restarts = 0

    def _spawn(self) -> _Worker:
        parent, child = self._ctx.Pipe(duplex=True)
        process = self._ctx.Process(target=_worker_main, args=(child,), daemon=True, name="pivotgym-worker")
        process.start()
        child.close()
        return _Worker(process, parent)

    def _ensure_workers(self, n: int) -> None:
        self._workers = [w for w in self._workers if w.process.is_alive()]
        while len(self._workers) < n:
            self._workers.append(self._spawn())

    def _replace(self, worker: _Worker) -> None:
        """Kill a worker (hung or dead) and start a fresh one in its place."""
        try:
            worker.process.kill()
        except Exception:
            pass
        worker.process.join(5)
        worker.conn.close()
        self._workers[self._workers.index(worker)] = self._spawn()
        self.restarts += 1

    def map(self, fn, items, *, timeout=None, on_result=None):
        items = list(items)
        results: list[TaskResult | None] = [None] * len(items)
        if not items:
            return []
        deadline_s = self._deadline(timeout)
        setup = WorkerSetup.capture()
        pending = deque(range(len(items)))
        self._ensure_workers(min(self.workers, len(items)))

        def finish(result: TaskResult) -> None:
            results[result.index] = result
            if on_result:
                on_result(result)

        while pending or any(w.task for w in self._workers):
            for worker in list(self._workers):
                if worker.task is None and pending:
                    index = pending.popleft()
                    try:
                        payload = pickle.dumps((fn, items[index]))
                    except Exception as exc:
                        finish(TaskResult(index, False, None, f"exception: task could not be pickled ({exc!r})"))
                        continue
                    now = time.monotonic()
                    worker.task = (index, now, now + START_TIMEOUT)  # until the worker says it started
                    try:
                        worker.conn.send((index, setup, payload))
                    except (BrokenPipeError, OSError) as exc:
                        worker.task = None
                        finish(TaskResult(index, False, None, f"crashed: could not reach worker ({exc!r})"))
                        self._replace(worker)
            busy = [w for w in self._workers if w.task is not None]
            if not busy:
                continue
            deadlines = [w.task[2] for w in busy if w.task[2] is not None]
            wait_s = max(0.0, min(deadlines) - time.monotonic()) if deadlines else None
            ready = wait([w.conn for w in busy], timeout=wait_s)
            for worker in busy:
                index, started, deadline = worker.task
                if worker.conn in ready:
                    try:
                        message = worker.conn.recv()
                    except (EOFError, OSError):
                        worker.process.join(1)
                        code = worker.process.exitcode
                        worker.task = None
                        finish(
                            TaskResult(
                                index,
                                False,
                                None,
                                f"crashed: worker process died (exit code {code})",
                                time.monotonic() - started,
                            )
                        )
                        self._replace(worker)
                        continue
                    if message[0] == "started":
                        now = time.monotonic()
                        worker.task = (index, now, None if deadline_s is None else now + deadline_s)
                        continue
                    _, r_index, ok, value, error, elapsed = message
                    worker.task = None
                    finish(TaskResult(r_index, ok, value, error, elapsed))
                elif deadline is not None and time.monotonic() >= deadline:
                    worker.task = None
                    finish(
                        TaskResult(
                            index,
                            False,
                            None,
                            f"timeout: task did not finish within {deadline_s}s; its worker was killed",
                            time.monotonic() - started,
                        )
                    )
                    self._replace(worker)
        return results

    def close(self) -> None:
        for worker in self._workers:
            try:
                worker.conn.send(None)
            except Exception:
                pass
        for worker in self._workers:
            worker.process.join(2)
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join(2)
            worker.conn.close()
        self._workers = []

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "start_method": self.start_method}


# ---------------------------------------------------------------------------------------- ray
#: seconds a Ray worker whose task overran its deadline lives on after answering (so the answer gets out)
_RAY_ENDING_S = 0.5
#: what such a worker answers a task Ray hands it meanwhile, without running it; the driver sends it again
_RAY_RETRY = "retry: the worker is ending after a timed-out task"
#: tries of one task that met an ending worker before it counts as crashed
_RAY_RETRIES = 3
#: set in a Ray worker once a task overran its deadline: the process ends in a moment, so it runs no more tasks
_ray_ending = threading.Event()


def _ray_call(setup: WorkerSetup, payload: bytes, timeout: float | None) -> tuple[bool, Any, str | None, float]:
    """Run a task in a Ray worker under a deadline that counts from when it really starts. On timeout the
    worker answers, then ends its own process a moment later (the hung thread dies with it); a task that
    reaches it in that moment is answered with :data:`_RAY_RETRY` (Ray reuses idle workers, so without this
    it would die with the worker, as a ``crashed:`` failure)."""
    if _ray_ending.is_set():
        return False, None, _RAY_RETRY, 0.0
    try:
        fn, item = _load_payload(setup, payload)
    except Exception as exc:
        return False, None, f"exception: could not load the task ({exc!r})", 0.0
    if timeout is None:
        return _run(fn, item)
    box: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: box.setdefault("result", _run(fn, item)), daemon=True)
    thread.start()
    thread.join(timeout)
    if "result" in box:
        return box["result"]
    _ray_ending.set()
    threading.Timer(_RAY_ENDING_S, os._exit, args=(1,)).start()
    return False, None, f"timeout: task did not finish within {timeout}s; its worker was killed", float(timeout)


def ray_init_kwargs(address: str | None, workers: int, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``ray.init`` arguments of a :class:`RayExecutor`, by address form (Ray's own conventions):

    * ``None`` - the cluster in ``RAY_ADDRESS`` when that is set (``ray job submit`` sets it for the
      driver), else a fresh local cluster of ``workers`` CPUs (``address="local"``, so a cluster that
      ``ray start`` left on this machine is not joined by accident);
    * ``"auto"`` - ``RAY_ADDRESS``, else the cluster ``ray start`` recorded on this machine;
    * ``"host:port"`` - the GCS of a cluster started with ``ray start --head`` (the driver joins it);
    * ``"ray://host:10001"`` - Ray Client (needs ``ray[client]``): only ``extra`` is passed, as the
      driver-side logging switches mean nothing there.

    A local cluster is sized here (``num_cpus``); an existing one brings its own resources (Ray refuses
    ``num_cpus`` when joining one). ``extra`` (e.g. ``runtime_env``) is passed through and wins.
    """
    if address is None and os.environ.get("RAY_ADDRESS"):
        address = "auto"
    kwargs: dict[str, Any]
    if address is None or address == "local":
        kwargs = {"address": "local", "num_cpus": workers, "include_dashboard": False}
    else:
        kwargs = {"address": address}
    if "://" not in (address or ""):
        kwargs.update(log_to_driver=False, configure_logging=False)
    kwargs.update(extra or {})
    return kwargs


class RayExecutor(Executor):
    """Ray tasks: a local cluster started on first use (``address=None``, unless ``RAY_ADDRESS`` names one),
    or an existing one (``"auto"``, ``"host:port"``, ``"ray://host:10001"``; see :func:`ray_init_kwargs`).
    At most ``workers`` tasks are in flight, so a deadline counts from when a task can actually start;
    without ``workers``, on an existing cluster that is the cluster's CPU count when the executor connects.

    Workers import ``pivotgym`` and the plugins from their own Python: on a cluster of several machines,
    install the same packages on every node, or submit the run as a Ray job with a ``runtime_env`` (its
    ``pip``/``py_modules``/``working_dir``), which ``ray.init`` inherits; ``init_kwargs`` (e.g.
    ``runtime_env=...``) go to ``ray.init`` as they are."""

    name = "ray"

    def __init__(
        self, workers: int | None = None, timeout: float | None = None, address: str | None = None, **init_kwargs: Any
    ) -> None:
        super().__init__(workers, timeout)
        self.address = address
        self.init_kwargs = init_kwargs
        self._size_from_cluster = workers is None
        self._joined: str | None = None  # the address ray.init was given, once connected
        self._started = False
        self._remote: Any = None

    def _ray(self) -> Any:
        try:
            import ray
        except ImportError as exc:  # pragma: no cover - ray is in requirements/base.txt
            raise RuntimeError("the ray executor needs Ray: pip install 'ray==2.60.0'") from exc
        if not ray.is_initialized():
            kwargs = ray_init_kwargs(self.address, self.workers, self.init_kwargs)
            ray.init(**kwargs)
            self._started = True
            self._joined = kwargs["address"]
            if self._size_from_cluster and kwargs["address"] != "local":
                self.workers = max(1, int(ray.cluster_resources().get("CPU", 0)) or self.workers)
        if self._remote is None:
            self._remote = ray.remote(max_retries=0, num_cpus=1)(_ray_call)
        return ray

    def map(self, fn, items, *, timeout=None, on_result=None):
        items = list(items)
        if not items:
            return []
        ray = self._ray()
        deadline_s = self._deadline(timeout)
        setup = WorkerSetup.capture()
        results: list[TaskResult | None] = [None] * len(items)
        pending = deque(range(len(items)))
        in_flight: dict[Any, tuple[int, float]] = {}
        # tasks an ending worker sent back (_RAY_RETRY): (when to send again, index), once that worker is gone
        delayed: list[tuple[float, int]] = []
        tries: dict[int, int] = {}
        recrashed: set[int] = set()  # tasks whose worker died under them once already

        def finish(result: TaskResult) -> None:
            results[result.index] = result
            if on_result:
                on_result(result)

        while pending or in_flight or delayed:
            for due, index in sorted(delayed, reverse=True):
                if due <= time.monotonic():
                    delayed.remove((due, index))
                    pending.appendleft(index)
            while pending and len(in_flight) < self.workers:
                index = pending.popleft()
                try:
                    payload = pickle.dumps((fn, items[index]))
                except Exception as exc:
                    finish(TaskResult(index, False, None, f"exception: task could not be pickled ({exc!r})"))
                    continue
                in_flight[self._remote.remote(setup, payload, deadline_s)] = (index, time.monotonic())
            refs = list(in_flight)
            if not refs:
                if delayed:
                    time.sleep(max(0.0, min(due for due, _ in delayed) - time.monotonic()))
                continue
            # the worker enforces the deadline itself; this backstop covers a worker that cannot start or
            # answer at all (e.g. stuck in C code holding the GIL)
            backstop = None if deadline_s is None else deadline_s + START_TIMEOUT
            wakeups = [due for due, _ in delayed]
            if backstop is not None:
                wakeups.append(min(t for _, t in in_flight.values()) + backstop)
            wait_s = max(0.0, min(wakeups) - time.monotonic()) if wakeups else None
            ready, _ = ray.wait(refs, num_returns=1, timeout=wait_s)
            now = time.monotonic()
            for ref in ready:
                index, started = in_flight.pop(ref)
                try:
                    ok, value, error, elapsed = ray.get(ref)
                    if error == _RAY_RETRY and tries.get(index, 0) < _RAY_RETRIES:
                        tries[index] = tries.get(index, 0) + 1
                        delayed.append((now + _RAY_ENDING_S + 0.25, index))
                        continue
                    if error == _RAY_RETRY:
                        error = f"crashed: met an ending worker {_RAY_RETRIES + 1} times"
                    finish(TaskResult(index, ok, value, error, elapsed))
                except Exception as exc:
                    if index not in recrashed:
                        # Ray may have leased the task to a worker that a timeout was ending (the task
                        # dies with it, unrun): send it once more, as Ray's own retries of system failures do
                        recrashed.add(index)
                        pending.appendleft(index)
                        continue
                    finish(
                        TaskResult(
                            index,
                            False,
                            None,
                            f"crashed: its worker died twice; {type(exc).__name__}: {exc}"[:2000],
                            now - started,
                        )
                    )
            if backstop is not None:
                for ref, (index, started) in list(in_flight.items()):
                    if now - started >= backstop:
                        in_flight.pop(ref)
                        ray.cancel(ref, force=True)
                        finish(
                            TaskResult(
                                index,
                                False,
                                None,
                                f"timeout: task did not finish within {deadline_s}s; its worker was killed",
                                now - started,
                            )
                        )
        return results

    def close(self) -> None:
        if self._started:
            import ray

            ray.shutdown()
            self._started = False
        self._remote = None

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "address": self.address or self._joined or "local"}


def make_executor(
    spec: str | Executor | None = None, *, workers: int | None = None, timeout: float | None = None, **kwargs: Any
) -> Executor:
    """Build an executor from a name: ``process`` (default), ``serial``, ``ray`` or ``ray:ADDRESS``."""
    if isinstance(spec, Executor):
        return spec
    spec = (spec or "process").strip()
    name, _, address = spec.partition(":")
    if name == "process":
        return ProcessExecutor(workers, timeout, **kwargs)
    if name == "serial":
        return SerialExecutor(workers, timeout)
    if name == "ray":
        return RayExecutor(workers, timeout, address=address or kwargs.pop("address", None), **kwargs)
    raise ValueError(f"unknown executor {spec!r}; choose one of {', '.join(EXECUTORS)} (or ray:ADDRESS)")


def chunks(items: Iterable[Any], size: int) -> Iterable[list[Any]]:
    """Split ``items`` into lists of at most ``size``."""
    batch: list[Any] = []
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch
