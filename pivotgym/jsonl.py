"""JSON-lines reading and writing for trajectories, turn profiles and pivot sets.

Appends are line-atomic and flushed to disk, so a job killed mid-write loses at most the line it was
writing; readers skip (and count) a torn last line instead of failing. Every file written here loads
with ``datasets.load_dataset("json", data_files=...)``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from pivotgym.errors import JsonlError
from pivotgym.types import PivotSet, Trajectory, TurnProfile

R = TypeVar("R")


def iter_jsonl(path: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """Yield one dict per line. Blank lines are skipped; a torn (unterminated) last line is ignored."""
    for _, row in _numbered_rows(path):
        yield row


def _records(
    path: str | os.PathLike[str], cls: type[R], rows: Iterable[tuple[int, dict[str, Any]]] | None = None
) -> list[R]:
    """Every row of ``path`` (or the already read, numbered ``rows`` of it) as a ``cls`` record; a row lacking a
    field or holding a mistyped one is a :class:`JsonlError` naming the file, the line and the field."""
    records = []
    for lineno, row in _numbered_rows(path) if rows is None else rows:
        try:
            records.append(cls.from_dict(row))  # type: ignore[attr-defined]
        except (TypeError, ValueError) as exc:
            raise JsonlError(f"{path}:{lineno}: {cls.__name__} row: {exc}") from exc
    return records


def _numbered_rows(path: str | os.PathLike[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    path = Path(path)
    with path.open("rb") as fh:
        data = fh.read()
    lines = data.split(b"\n")
    for lineno, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw)
        except json.JSONDecodeError as exc:
            if lineno == len(lines):  # no trailing newline: a write that was killed half-way
                return
            raise JsonlError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from exc
        if not isinstance(row, dict):
            raise JsonlError(f"{path}:{lineno}: expected a JSON object, got {type(row).__name__}")
        yield lineno, row


def read_jsonl(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    return list(iter_jsonl(path))


def write_jsonl(path: str | os.PathLike[str], rows: Iterable[Any]) -> int:
    """Write rows (dicts or records with ``to_dict``) atomically: to a temp file, then rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    n = 0
    with tmp.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(_dumps(row) + "\n")
            n += 1
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    return n


def repair_torn_tail(path: str | os.PathLike[str]) -> None:
    """Drop a torn last line left by a killed writer, so later appends start on a fresh line."""
    path = Path(path)
    if not path.exists() or path.stat().st_size == 0:
        return
    with path.open("rb+") as fh:
        data = fh.read()
        if data.endswith(b"\n"):
            return
        fh.truncate(data.rfind(b"\n") + 1)


class JsonlAppender:
    """Append rows one line at a time, flushed and fsynced, for resumable jobs."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        repair_torn_tail(self.path)
        self._fh = self.path.open("a", encoding="utf-8")

    def write(self, row: Any) -> None:
        self._fh.write(_dumps(row) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> JsonlAppender:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _dumps(row: Any) -> str:
    """One JSON line; strings with lone surrogates (not encodable as UTF-8) are written as ``\\uXXXX`` escapes,
    which every JSON reader turns back into the same string, so hostile text never loses a row."""
    if hasattr(row, "to_dict"):
        row = row.to_dict()
    text = json.dumps(row, ensure_ascii=False, default=str)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(row, ensure_ascii=True, default=str)
    return text


def read_trajectories(path: str | os.PathLike[str]) -> list[Trajectory]:
    return _records(path, Trajectory)


def write_trajectories(path: str | os.PathLike[str], trajectories: Iterable[Trajectory]) -> int:
    return write_jsonl(path, trajectories)


def read_profiles(path: str | os.PathLike[str]) -> list[TurnProfile]:
    return _records(path, TurnProfile)


def write_profiles(path: str | os.PathLike[str], profiles: Iterable[TurnProfile]) -> int:
    return write_jsonl(path, profiles)


def write_pivot_set(path: str | os.PathLike[str], pivot_set: PivotSet) -> int:
    """One turn-profile row per pivot, each with the selection rule under ``"selection"``."""
    rows = ({**p.to_dict(), "selection": pivot_set.rule} for p in pivot_set.pivots)
    return write_jsonl(path, rows)


def read_pivot_set(path: str | os.PathLike[str]) -> PivotSet:
    rows = list(_numbered_rows(path))
    rule = rows[0][1].get("selection", {}) if rows else {}
    return PivotSet(rule=rule, pivots=_records(path, TurnProfile, rows))
