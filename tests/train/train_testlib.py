"""Shared pieces of the trainer tests (importable from test modules and from the worker scripts).

* :func:`make_tiny_llama` - a random-init Llama built from a config (no tokenizer), for update tests (it lives
  in ``tests/core_helpers.py``, which the log-probability tests share);
* :func:`write_arith_data` - arith expert trajectories and a pivot set with every one of their turns;
* :class:`EvenLength` - the tiny random model never solves arith, so its functional verifier gives every
  group zero variance; tests that need mixed rewards with the tiny model use this deterministic reward of
  the completion text, registered in the live registry the way a plugin's hook registers a verifier.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the worker scripts run outside pytest

from core_helpers import make_tiny_llama

from pivotgym.types import PivotSet, TurnProfile, Verdict

__all__ = ["EvenLength", "make_tiny_llama", "write_arith_data"]


class EvenLength:
    """Reward 1 when the completion text has an even number of characters."""

    name = "test/even-length"
    version = "1"

    def verify(self, context, candidate: str) -> Verdict:
        even = len(candidate) % 2 == 0
        return Verdict(1.0 if even else 0.0, even, "even" if even else "odd")


def register_test_verifier() -> None:
    from pivotgym.registry import get_registry

    registry = get_registry()
    if EvenLength.name not in registry.verifiers:
        registry._register_verifiers("tests", EvenLength.name, EvenLength)


def write_arith_data(directory: Path, n_trajectories: int = 3, split: str = "train") -> tuple[Path, Path]:
    """Expert trajectories of arith/chain-v0 and a pivot set with every one of their turns."""
    from pivotgym.jsonl import write_pivot_set, write_trajectories
    from pivotgym.registry import make

    env = make("arith/chain-v0")
    trajectories = list(env.expert_trajectories(split, limit=n_trajectories))
    traj_path, pivots_path = Path(directory) / "expert.jsonl", Path(directory) / "pivots.jsonl"
    write_trajectories(traj_path, trajectories)
    profiles = [
        TurnProfile(t.id, n, t.env_id, t.task_id, 4, [0.0, 1.0, 0.0, 1.0], 0.5, 1 / 3, [], {}, {}, f"k{n}")
        for t in trajectories
        for n in range(len(t.assistant_turns()))
    ]
    write_pivot_set(pivots_path, PivotSet({"max_mean": 0.6, "min_var": 0.0}, profiles))
    return traj_path, pivots_path
