"""A stage clock that survives being killed: the seconds a resumable stage spent over all its attempts.

A resumed stage (profiling appends rows and skips the ones already written) would otherwise report only the
time of its last attempt, and the cost comparison would undercount the method it belongs to. The clock
rewrites its file every few seconds while it runs, so an attempt killed outright (SIGKILL, a lost machine)
loses at most that interval.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from types import TracebackType

__all__ = ["StageClock"]


class StageClock:
    """``with StageClock(path) as clock: ...`` then ``clock.total``: seconds of this attempt plus every
    earlier attempt recorded in ``path`` (``{"seconds": [s0, s1, ...]}``)."""

    def __init__(self, path: Path, every: float = 5.0) -> None:
        self.path = Path(path)
        self.every = every
        self.earlier: list[float] = self._read()
        self._started = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def _read(self) -> list[float]:
        if not self.path.exists():
            return []
        try:
            return [float(s) for s in json.loads(self.path.read_text(encoding="utf-8"))["seconds"]]
        except (ValueError, KeyError, TypeError):
            return []  # a torn write of an earlier attempt: its seconds are lost, not the run

    @property
    def elapsed(self) -> float:
        """Seconds of this attempt so far."""
        return time.perf_counter() - self._started if self._started else 0.0

    @property
    def total(self) -> float:
        """Seconds of every attempt, this one included."""
        return sum(self.earlier) + self.elapsed

    def _write(self, seconds: float | None = None) -> None:
        with self._lock:
            now = round(self.elapsed, 3) if seconds is None else seconds
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps({"seconds": [*self.earlier, now]}), encoding="utf-8")
            tmp.replace(self.path)

    def _tick(self) -> None:
        while not self._stop.wait(self.every):
            self._write()

    def __enter__(self) -> StageClock:
        self._started = time.perf_counter()
        self._write()
        self._thread = threading.Thread(target=self._tick, name="stage-clock", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        seconds = round(self.elapsed, 3)
        self._write(seconds)
        self.earlier.append(seconds)
        self._started = 0.0
