"""The arithmetic behind the report's claims: the cost to reach a target score, scores at a matched budget,
and paired t intervals over problems (or items) of score differences, each with its minimum detectable
difference and a verdict."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from pivotgym.eval.stats import t_interval
from pivotgym.experiment.plots import Curve

__all__ = [
    "CONTRADICTED",
    "NOT_MEASURABLE",
    "REPRODUCED",
    "check_curves",
    "difference_text",
    "matched_budget",
    "paired_item_difference",
    "reach_ratio",
    "score_at",
    "seed_difference",
    "time_to_reach",
    "verdict_of",
]


def time_to_reach(curve: Curve, target: float, x: str = "turns") -> float | None:
    """The cost (``x`` of the first point) at which ``curve`` first scores at least ``target``; None if never."""
    for point in curve:
        if point["score"] >= target - 1e-12:
            return float(point[x])
    return None


def reach_ratio(fast: Curve, reference: Curve, x: str = "turns") -> dict[str, Any]:
    """How much of ``reference``'s cost ``fast`` needs to match ``reference``'s final score.

    Returns ``{"target", "fast", "reference", "ratio"}``: ``ratio`` = reference cost / fast cost (> 1 means
    ``fast`` got there cheaper), None when ``fast`` never reaches the target or either cost is 0.
    """
    if not reference or not fast:
        return {"target": None, "fast": None, "reference": None, "ratio": None}
    target = float(reference[-1]["score"])
    ref_cost = time_to_reach(reference, target, x)
    fast_cost = time_to_reach(fast, target, x)
    ratio = ref_cost / fast_cost if ref_cost and fast_cost else None
    return {"target": target, "fast": fast_cost, "reference": ref_cost, "ratio": ratio}


# ----------------------------------------------------------------------------------------- uncertainty
#: a claim's verdicts: the interval of the difference lies above 0, below 0, or straddles it
REPRODUCED, CONTRADICTED, NOT_MEASURABLE = "reproduced", "contradicted", "not measurable at this scale"


def verdict_of(low: float | None, high: float | None) -> str:
    """:data:`REPRODUCED` when an interval of a difference lies above 0, :data:`CONTRADICTED` below,
    otherwise (or without an interval) :data:`NOT_MEASURABLE`."""
    if low is None or high is None:
        return NOT_MEASURABLE
    return REPRODUCED if low > 0 else CONTRADICTED if high < 0 else NOT_MEASURABLE


def _difference(diffs: Sequence[float], seeds: int, level: float) -> dict[str, Any]:
    """The paired t interval of per-unit differences, its minimum detectable difference and verdict."""
    interval = t_interval(diffs, level)
    out = interval.to_dict()
    return {
        "diff": out["mean"],
        "low": out["low"],
        "high": out["high"],
        "level": level,
        "method": "paired-t",
        "items": interval.n,
        "seeds": seeds,
        "sd": out["sd"],
        "mdd": None if math.isnan(mdd := interval.mdd()) else mdd,
        "verdict": verdict_of(out["low"], out["high"]),
    }


def paired_item_difference(
    a: Sequence[Mapping[str, float]], b: Sequence[Mapping[str, float]], *, level: float = 0.95
) -> dict[str, Any]:
    """Mean score of ``a`` minus ``b`` with a paired t interval over items, and the minimum detectable
    difference of that design (two-sided 5%, power 80%).

    ``a[i]`` and ``b[i]`` map item ids to scores for seed i; only items present in every mapping count. Each
    item's difference is averaged over the seeds first, so an item (a test problem, an OOD question) is the
    unit, as in the design's power calculation; the t interval keeps its coverage over few problems where a
    percentile bootstrap does not (``tests/eval/test_stats.py``)."""
    if not a or len(a) != len(b):
        raise ValueError(f"need one item mapping per seed for both models, got {len(a)} and {len(b)}")
    items = sorted(set.intersection(*(set(m) for m in (*a, *b))))
    if not items:
        raise ValueError("the two models share no scored items")
    diffs = [sum(x[i] - y[i] for x, y in zip(a, b)) / len(a) for i in items]
    return _difference(diffs, len(a), level)


def seed_difference(diffs: Sequence[float], *, level: float = 0.95) -> dict[str, Any]:
    """The paired t interval over seeds of one difference per seed, for a figure the trainers log per seed
    only (the non-pivot pass rate before and after training): as :func:`paired_item_difference`'s result,
    with a seed as the unit. Wider than an interval over problems, but it needs no per-item record."""
    return _difference(diffs, len(diffs), level)


def score_at(curve: Curve, budget: float, x: str = "turns", offset: float = 0.0) -> list[float]:
    """Per-task scores a method had reached within ``budget`` (of ``x`` minus ``offset``): those of its last
    curve point at or under the budget, or its start point's when even that cost more (before profiling has
    finished, PivotRL is still its start model)."""
    reached = curve[0]
    for point in curve:
        if float(point[x]) - offset <= budget + 1e-9:
            reached = point
    return [float(v) for v in reached["per_task"]]


def matched_budget(
    fast: Sequence[Curve], reference: Sequence[Curve], x: str = "turns", *, profiling: bool = True, level: float = 0.95
) -> dict[str, Any]:
    """``fast`` minus ``reference`` in score at a matched budget of ``x`` (rollout turns or seconds).

    Per seed the budget is the smaller of the two methods' final costs, and each method scores what it had
    reached within it (:func:`score_at`); each task's difference is averaged over seeds and a paired t interval
    over tasks gives the verdict and the minimum detectable difference. ``profiling=False`` leaves the cost
    of the curves' start points out (PivotRL's profiling: the paper does not count it). Unlike a ratio of
    costs to reach a target, this stays defined when a method never improves."""
    n_tasks = check_curves(fast, reference)
    budgets, diffs = [], [[0.0] * n_tasks for _ in fast]
    scores = {"fast": 0.0, "reference": 0.0}
    for s, (f, r) in enumerate(zip(fast, reference)):
        off_f, off_r = (0.0, 0.0) if profiling else (float(f[0][x]), float(r[0][x]))
        budget = min(float(f[-1][x]) - off_f, float(r[-1][x]) - off_r)
        budgets.append(budget)
        sf, sr = score_at(f, budget, x, off_f), score_at(r, budget, x, off_r)
        diffs[s] = [p - q for p, q in zip(sf, sr)]
        scores["fast"] += sum(sf) / n_tasks / len(fast)
        scores["reference"] += sum(sr) / n_tasks / len(fast)
    per_task = [sum(d[t] for d in diffs) / len(fast) for t in range(n_tasks)]
    out = _difference(per_task, len(fast), level)
    out.update({"x": x, "profiling": profiling, "budget": sum(budgets) / len(budgets), "budgets": budgets, **scores})
    out["tasks"] = out.pop("items")
    return out


def check_curves(fast: Sequence[Curve], reference: Sequence[Curve]) -> int:
    """The number of curve tasks, after checking that every point of every curve scores the same tasks
    (``per_task``) and that both methods have one curve per seed; raises ValueError naming what differs."""
    if not fast or len(fast) != len(reference):
        raise ValueError(f"need one curve per seed for both methods, got {len(fast)} and {len(reference)}")
    sizes = {len(p.get("per_task") or []) for c in (*fast, *reference) for p in c}
    if len(sizes) != 1 or 0 in sizes or any(not c for c in (*fast, *reference)):
        raise ValueError(
            f"every curve point needs per_task scores on the same tasks; task counts seen {sorted(sizes)}"
            " (rerun the pivot and e2e stages: older curve.json files lack per_task)"
        )
    return sizes.pop()


def difference_text(result: Mapping[str, Any], unit: str = "items", verdict: bool = True) -> str:
    """``+3.1 points, 95% t [-1.0, +7.2] over 40 items x 5 seed(s), detectable ≥ 5.8: **not measurable ...**``;
    ``verdict=False`` leaves out the verdict (for a difference whose sign the caller reads against its claim)."""

    def pts(v: float | None) -> str:
        return "-" if v is None else f"{100 * v:+.1f}"

    mdd, level = result.get("mdd"), 100 * result.get("level", 0.95)
    return (
        f"{pts(result['diff'])} points, {level:.0f}% t [{pts(result['low'])}, {pts(result['high'])}] "
        f"over {result.get('items', result.get('tasks'))} {unit} x {result['seeds']} seed(s), smallest difference "
        f"detectable (80% power) {'-' if mdd is None else f'{100 * mdd:.1f}'} points"
        + (f": **{result['verdict']}**" if verdict else "")
    )
