"""BFCL data: questions, function docs and acceptable answers read from the installed ``bfcl_eval`` package.

``bfcl-eval`` is installed ``--no-deps``; we only read its data files and import its stdlib-only multi-turn
simulators, never modules that pull provider SDKs. Splits are deterministic: a task is in ``test`` when the
sha256 of its id falls in the first ``TEST_FRACTION`` of the hash space, so splits never change between runs
or machines.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
from pathlib import Path
from typing import Any

TEST_FRACTION = 0.2

SINGLE_TURN_CATEGORIES = (
    "simple_python",
    "simple_java",
    "simple_javascript",
    "multiple",
    "parallel",
    "parallel_multiple",
    "live_simple",
    "live_multiple",
    "live_parallel",
    "live_parallel_multiple",
    "irrelevance",
    "live_irrelevance",
)
MULTI_TURN_CATEGORIES = ("multi_turn_base", "multi_turn_long_context", "multi_turn_miss_func", "multi_turn_miss_param")


class BFCLMissing(RuntimeError):
    """bfcl-eval is not installed; the message says how to install it."""


@functools.cache
def data_dir() -> Path:
    """The ``bfcl_eval/data`` folder of the installed package."""
    spec = importlib.util.find_spec("bfcl_eval")
    if spec is None or not spec.submodule_search_locations:
        raise BFCLMissing(
            "the BFCL data package is not installed: run "
            "`pip install --no-deps bfcl-eval==2026.3.23` (see requirements/assets.txt)"
        )
    return Path(list(spec.submodule_search_locations)[0]) / "data"


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


@functools.cache
def load_category(category: str) -> tuple[dict[str, Any], ...]:
    """Every entry of a BFCL category, with its acceptable answers under ``"answers"`` when BFCL has them."""
    path = data_dir() / f"BFCL_v4_{category}.json"
    if not path.exists():
        raise KeyError(f"no BFCL category {category!r} (looked for {path})")
    entries = _read_jsonl(path)
    answer_path = data_dir() / "possible_answer" / path.name
    if answer_path.exists():
        answers = {a["id"]: a["ground_truth"] for a in _read_jsonl(answer_path)}
        for entry in entries:
            entry["answers"] = answers.get(entry["id"])
    return tuple(entries)


def language_of(category: str) -> str:
    if category.endswith("java"):
        return "java"
    if category.endswith("javascript"):
        return "javascript"
    return "python"


def in_test_split(task_id: str) -> bool:
    """The deterministic train/test assignment of a task id."""
    digest = int(hashlib.sha256(task_id.encode()).hexdigest()[:8], 16)
    return digest < TEST_FRACTION * 0x1_0000_0000


@functools.cache
def multi_turn_docs() -> dict[str, tuple[dict[str, Any], ...]]:
    """The function docs of every multi-turn simulator class, keyed by class name."""
    from bfcl_eval.constants.executable_backend_config import MULTI_TURN_FUNC_DOC_FILE_MAPPING

    folder = data_dir() / "multi_turn_func_doc"
    return {
        cls: tuple(_read_jsonl(folder / fname))
        for cls, fname in MULTI_TURN_FUNC_DOC_FILE_MAPPING.items()
        if (folder / fname).exists()
    }
