"""Reading and writing suite results (``pivotgym eval --out`` files)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def write_json(path: str | Path, data: Any) -> None:
    """Write JSON atomically (temp file, then rename), creating the parent folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def load_result(path: str | Path) -> dict[str, Any]:
    """Read a suite result JSON, checking it has the contract's keys (``role`` defaults to empty)."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, dict) or "scores" not in data:
        raise ValueError(f"{path} is not a suite result (no 'scores'); write one with `pivotgym eval --out`")
    data.setdefault("role", {})
    return data


__all__ = ["load_result", "write_json"]
