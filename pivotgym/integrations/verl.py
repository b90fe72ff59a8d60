"""verl on pivot states: the parquet layout its RL datasets use, and ``compute_score`` in its reward form.

verl reads a parquet file per split whose rows hold::

    data_source   str                     which scorer a reward manager dispatches to: here the env id
    prompt        list of {role, content}  the chat the policy continues (``env.prompt_messages(prefix)``)
    ability       str                     a free label ("pivotgym")
    reward_model  {style, ground_truth}   style "rule" (a program scores it); ground_truth: the expert's action
                                          as the env renders it (for reading; scoring uses the exact state)
    extra_info    {split, index, key, env_id, task_id, state, tools_json, mean, var}
                                          ``state``: the expert state as JSON; ``tools_json``: the
                                          functions offered there (OpenAI ``tools``), "" when none

:func:`write_verl_parquet` writes it from a pivot set; point verl at it with ``data.train_files`` and at this
module's :func:`compute_score` with ``reward.custom_reward_function.path`` (this file, or a file that imports
it) and ``reward.custom_reward_function.name=compute_score`` (verl 0.9.1's keys).

:func:`compute_score` has verl's reward-function signature ``(data_source, solution_str, ground_truth,
extra_info=None)`` and judges ``solution_str`` with the env's functional verifier from the exact state in
``extra_info`` (as our trainer does), not by comparing with ``ground_truth``. It returns a dict: ``score``
(the reward) plus ``undecided`` (1.0 when the verifier could not judge: verl has no "no reward" value, so
such a sample scores 0 and is counted there, which verl's reward manager logs with the other extra keys)
and ``reason`` (the verdict's reason). Every call returns the same keys, as verl's reward managers require.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pivotgym.integrations.common import StateJudge
from pivotgym.types import PivotSet, Trajectory, TurnProfile

__all__ = ["ABILITY", "compute_score", "verl_rows", "write_verl_parquet"]

#: the ``ability`` label of our rows
ABILITY = "pivotgym"

_JUDGE = StateJudge("functional")


def verl_rows(
    pivots: str | Path | PivotSet | Iterable[TurnProfile],
    trajectories: str | Path | Iterable[Trajectory] | None = None,
    split: str = "train",
) -> list[dict[str, Any]]:
    """verl dataset rows (see the module docstring) for every pivot, in pivot-set order (``trajectories`` only
    for pivot sets written before rows carried their state)."""
    from pivotgym.integrations.trl import pivot_dataset

    dataset = pivot_dataset(pivots if not isinstance(pivots, PivotSet) else pivots.pivots, trajectories)
    rows = []
    for index, row in enumerate(dataset):
        rows.append(
            {
                "data_source": row["env_id"],
                "prompt": [{"role": m["role"], "content": m["content"]} for m in row["prompt"]],
                "ability": ABILITY,
                "reward_model": {"style": "rule", "ground_truth": row["expert"]},
                "extra_info": {
                    "split": split,
                    "index": index,
                    "key": row["key"],
                    "env_id": row["env_id"],
                    "task_id": row["task_id"],
                    "state": row["state"],
                    "tools_json": row["tools_json"],
                    "mean": float(row["mean"]),
                    "var": float(row["var"]),
                },
            }
        )
    return rows


def write_verl_parquet(
    out: str | Path,
    pivots: str | Path | PivotSet | Iterable[TurnProfile],
    trajectories: str | Path | Iterable[Trajectory] | None = None,
    split: str = "train",
) -> int:
    """Write the pivots as a verl parquet file at ``out`` (parent folders made); returns the row count."""
    import pandas as pd

    rows = verl_rows(pivots, trajectories, split)
    if not rows:
        raise ValueError("no pivots to write: the pivot set is empty")
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(path, index=False)
    return len(rows)


def compute_score(
    data_source: str, solution_str: str, ground_truth: Any, extra_info: Mapping[str, Any] | None = None, **_: Any
) -> dict[str, Any]:
    """verl's reward function: ``solution_str`` judged at the pivot state in ``extra_info`` by the env's
    functional verifier. Returns ``{"score", "undecided", "reason"}`` (see the module docstring).

    ``extra_info`` must carry ``state`` (as :func:`write_verl_parquet` writes it); a row without one is an
    error naming what is missing, not a silent 0 (it is not one of ours)."""

    if not extra_info or not extra_info.get("state"):
        raise ValueError(
            f"compute_score: the {data_source!r} row has no extra_info.state; write the dataset with "
            "pivotgym.integrations.verl.write_verl_parquet"
        )
    verdict = _JUDGE.verdict(str(extra_info["state"]), extra_info.get("tools_json") or None, solution_str)
    undecided = not verdict.decided
    return {
        "score": 0.0 if undecided else float(verdict.reward),
        "undecided": 1.0 if undecided else 0.0,
        "reason": verdict.reason,
    }
