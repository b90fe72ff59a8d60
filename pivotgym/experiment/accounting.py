"""What each training run spent (data, optimiser steps, tokens, rollout turns, wall-clock), and the step
arithmetic that matches continued SFT to PivotRL."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pivotgym.eval import write_json
from pivotgym.experiment.config import ExperimentConfig
from pivotgym.experiment.layout import METHOD_LABELS, RunLayout

__all__ = [
    "ACCOUNTED",
    "accounting_table",
    "matched_sft_steps",
    "optimizer_steps",
    "rl_total_steps",
    "write_accounting",
]

#: the methods of the cost table, in its row order
ACCOUNTED = ("warmup", "sft", "sft-more", "pivot", "e2e")
#: a run's recorded ``start`` -> the method tag whose cost "from base" adds (older runs wrote ``SFT``)
START_TAGS = {"sft": "sft", "warmup": "warmup"}


def optimizer_steps(section: Mapping[str, Any], steps: int | None = None) -> int:
    """Optimiser steps a trainer section spends: ``steps`` x ``updates_per_batch`` (1 for SFT)."""
    return int(section.get("steps", 0) if steps is None else steps) * int(section.get("updates_per_batch", 1))


def rl_total_steps(config: ExperimentConfig) -> int:
    """Optimiser steps from the common start to the end of PivotRL (SFT's included when RL starts from SFT;
    the warm-up model is every method's start, so its steps count for none)."""
    sft = optimizer_steps(config.sft) if config.rl_init == "sft" else 0
    return sft + optimizer_steps(config.pivot)


def matched_sft_steps(config: ExperimentConfig) -> int:
    """Extra SFT steps (continuing the SFT model) that give continued SFT as many optimiser steps as the
    PivotRL row; 0 when SFT alone already has as many."""
    return max(0, rl_total_steps(config) - optimizer_steps(config.sft))


def write_accounting(
    path: Path,
    *,
    method: str,
    start: str,
    data: str,
    summary: Mapping[str, Any],
    optimizer_steps: int,
    extra_turns: int = 0,
    extra_seconds: float = 0.0,
    tasks: int | None = None,
) -> dict[str, Any]:
    """What one training run spent, from its trainer summary, written to ``path``: a row of the report's
    side-by-side table.

    ``optimizer_steps`` is what the config asked for, ``optimizer_steps_applied`` what happened (an RL step
    short of informative groups is skipped); ``rollout_turns`` counts every generated training turn (kept,
    filtered and profiling; ``extra_turns`` adds profiling done outside the trainer); ``wall_seconds``
    excludes evaluation and adds ``extra_seconds`` (profiling)."""
    c = summary.get("counters", {})
    row = {
        "method": method,
        "start": start,
        "data": data,
        "tasks": tasks,
        "optimizer_steps": optimizer_steps,
        "steps": int(summary.get("steps", 0)),
        # what actually moved the weights (RL trainers skip or shrink steps short of signal); SFT applies all
        "optimizer_steps_applied": int(c.get("optimizer_steps_applied", optimizer_steps)),
        "steps_applied": int(c.get("steps_applied", summary.get("steps", 0))),
        "groups_sampled": c.get("groups_sampled"),
        "groups_applied": c.get("groups_applied"),
        "tokens_trained": int(c.get("tokens_trained", 0)),
        "tokens_generated": int(c.get("tokens_generated", 0)),
        "rollout_turns": int(c.get("total_turns", 0)) + extra_turns,
        "profiling_turns": int(c.get("profiling_turns", 0)) + extra_turns,
        "wall_seconds": float(c.get("wall_seconds", 0.0)) - float(c.get("seconds_eval", 0.0)) + extra_seconds,
    }
    write_json(path, row)
    return row


def _read(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def accounting_table(layout: RunLayout, seeds: Sequence[int]) -> tuple[list[list[Any]], dict[str, Any]]:
    """Rows of the side-by-side cost table (mean over seeds) from each run's ``accounting.json``; "from base"
    adds the cost of the model a run starts from (SFT's, the warm-up model's), itself counted from base."""

    def mean(rows: Sequence[Mapping[str, Any]], key: str) -> float:
        return sum(float(r[key]) for r in rows) / len(rows)

    keys = ("optimizer_steps", "tokens_trained", "rollout_turns", "wall_seconds")
    table: list[list[Any]] = []
    data: dict[str, Any] = {}
    for tag in ACCOUNTED:
        rows = [r for s in seeds if (r := _read(layout.accounting(tag, s)))]
        if not rows:
            continue
        row = {k: mean(rows, k) for k in keys}
        applied = mean([{"v": r.get("optimizer_steps_applied", r["optimizer_steps"])} for r in rows], "v")
        start = START_TAGS.get(str(rows[0].get("start", "")).lower())
        before = data.get(start, {}).get("from_base") if start else None  # the start's own cost from base
        total = {k: row[k] + (before[k] if before else 0.0) for k in row}
        data[tag] = {
            **row,
            "optimizer_steps_applied": applied,
            "from_base": total,
            "start": rows[0].get("start"),
            "data": rows[0].get("data"),
            "seeds": len(rows),
        }
        table.append(
            [
                METHOD_LABELS[tag],
                METHOD_LABELS.get(start or "", rows[0].get("start")),
                rows[0].get("data"),
                f"{applied:.{0 if applied.is_integer() else 1}f} of {row['optimizer_steps']:.0f}",
                f"{total['optimizer_steps']:.0f}",
                f"{total['tokens_trained']:.0f}",
                f"{row['rollout_turns']:.0f}",
                f"{row['wall_seconds']:.0f}",
                f"{total['wall_seconds']:.0f}",
            ]
        )
    return table, data
