"""The shipped task sets and how an instance becomes a buggy working copy."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from pivotgym import read_jsonl
from pivotgym.sandbox import fork_dir
from pivotgym_swe.mutate import Mutation
from pivotgym_swe.sources import tree_for

DATA_DIR = Path(__file__).parent / "data"
TASK_SETS = ("toolz", "more-itertools", "humanevalfix")


@lru_cache(maxsize=16)
def load_task_set(path: str) -> tuple[dict[str, Any], ...]:
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"task file {file} is missing; regenerate it with `pivotgym-swe synth`")
    return tuple(read_jsonl(file))


def task_file(name: str) -> Path:
    return DATA_DIR / f"{name}.jsonl"


def pristine_tree(instance: dict[str, Any]) -> Path:
    """The clean repository of an instance (built and cached on first use)."""
    return tree_for(instance["source"])


def materialize(instance: dict[str, Any], dest: Path) -> Path:
    """Create the buggy working copy of ``instance`` at ``dest``."""
    pristine = pristine_tree(instance)
    work = fork_dir(pristine, dest)
    mutation = Mutation(**instance["mutation"])
    target = work / mutation.path
    text = mutation.apply(target.read_text())
    target.unlink()  # never write through a shared inode
    target.write_text(text)
    return work
