"""The arithmetic behind the report's claims: the cost to reach a target score, scores at a matched budget,
and intervals of score differences over seeds x problems (both random), each with its minimum detectable
difference and a verdict."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from pivotgym.eval.stats import t_interval
from pivotgym.experiment.crossed import crossed_design, difference_table
from pivotgym.experiment.plots import Curve

__all__ = [
    "CONTRADICTED",
    "NOT_MEASURABLE",
    "REPRODUCED",
    "check_curves",
    "difference_text",
    "matched_budget",
    "item_difference",
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


def _difference(table: Sequence[Sequence[float]], level: float) -> dict[str, Any]:
    """The crossed interval of a seeds x items table of differences (:mod:`pivotgym.experiment.crossed`), its
    minimum detectable difference, that MDD with five times the items (which only more seeds can push lower
    when the seed term dominates) and the verdict."""
    design = crossed_design(table)
    out = design.to_dict(level)
    out["mdd_more_items"] = _finite_or_none(design.mdd_at(design.seeds, 5 * design.problems))
    out["mdd_more_seeds"] = _finite_or_none(design.mdd_at(4 * design.seeds, design.problems))
    out["verdict"] = verdict_of(out["low"], out["high"])
    return out


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


def item_difference(
    a: Sequence[Mapping[str, float]], b: Sequence[Mapping[str, float]], *, level: float = 0.95
) -> dict[str, Any]:
    """Mean score of ``a`` minus ``b`` over seeds and items, with seeds and items both random.

    ``a[i]`` and ``b[i]`` map item ids to scores for seed i (the two models of one seed); only items present in
    every mapping count. The per-cell table (seed x item) gives the variance components, the t interval with
    Satterthwaite's degrees of freedom and the minimum detectable difference (:func:`crossed_design`): a seed
    that is better or worse on every item widens the interval, which averaging each item over the seeds and
    testing over items did not. With one seed it is the paired t interval over items, and says the seed effect
    is not estimable."""
    _, table = difference_table(a, b)
    return _difference(table, level)


def seed_difference(diffs: Sequence[float], *, level: float = 0.95) -> dict[str, Any]:
    """The paired t interval over seeds of one difference per seed, for a figure the trainers log per seed
    only (the non-pivot pass rate before and after training): as :func:`item_difference`'s result, with a seed
    as the unit. It needs no per-item record, and counts only the seed-to-seed spread."""
    interval = t_interval(diffs, level)
    out = interval.to_dict()
    # every seed changed by the same amount (a pass rate over a few states moves in steps of 1/states): the t
    # interval has no width, which says the seeds' spread went unseen, not that it is 0
    unseen = len(diffs) > 1 and interval.sd < 1e-12
    if unseen:
        out["low"] = out["high"] = out["se"] = None
    mdd = interval.mdd()
    result: dict[str, Any] = {
        "diff": out["mean"],
        "low": out["low"],
        "high": out["high"],
        "level": level,
        "method": "paired-t over seeds",
        "items": interval.n,
        "seeds": len(diffs),
        "se": out["se"],
        "mdd": None if unseen or math.isnan(mdd) else mdd,
        "verdict": verdict_of(out["low"], out["high"]),
    }
    if unseen:
        result["reason"] = f"all {len(diffs)} seeds gave the same difference: no spread to build an interval on"
    return result


def score_at(curve: Curve, budget: float, x: str = "turns", offset: float = 0.0) -> list[float] | None:
    """Per-task scores of ``curve`` at ``budget`` of ``x`` (minus ``offset``), linearly interpolated between the
    two curve points around it; None when the curve has no point other than its start at or under the budget
    (the method had not trained yet, or its first evaluation came later), or ends before it.

    The start point is where training begins (for PivotRL, after profiling): a budget that ends before the
    first trained point is not a comparison of the method, so it is refused rather than read as the start."""
    xs = [float(point[x]) - offset for point in curve]
    inside = [i for i, v in enumerate(xs) if i > 0 and v <= budget + 1e-9]
    if not inside or xs[-1] < budget - 1e-9:
        return None
    i = inside[-1]
    low = [float(v) for v in curve[i]["per_task"]]
    if i + 1 >= len(curve) or xs[i] >= budget - 1e-9:
        return low
    high = [float(v) for v in curve[i + 1]["per_task"]]
    w = (budget - xs[i]) / (xs[i + 1] - xs[i]) if xs[i + 1] > xs[i] else 0.0
    return [p + w * (q - p) for p, q in zip(low, high)]


def matched_budget(
    fast: Sequence[Curve],
    reference: Sequence[Curve],
    x: str = "turns",
    *,
    profiling: bool = True,
    level: float = 0.95,
    names: tuple[str, str] = ("fast", "reference"),
    seeds: Sequence[int] | None = None,
) -> dict[str, Any]:
    """``fast`` minus ``reference`` in score at a matched budget of ``x`` (any cost a curve point records:
    rollout turns, seconds, optimiser steps, tokens trained, the sum of learning rates, ...).

    Per seed the budget is the smaller of the two methods' final costs, and each method's per-task scores are
    interpolated inside its own curve at that budget (:func:`score_at`). When a method has no curve point
    other than its start inside the budget, the comparison is **not measurable**: its score there would be its
    start model's, and the difference that of the other method against that start model under another name.
    Otherwise the seeds x tasks table of differences gives the crossed interval (:func:`item_difference`).
    ``profiling=False`` leaves the cost of the curves' start points out (PivotRL's profiling: the paper does
    not count it). ``names`` and ``seeds`` (the seed of each curve pair) only label the reason of a comparison
    that is not measurable."""
    n_tasks = check_curves(fast, reference)
    if any(x not in point for c in (*fast, *reference) for point in c):
        raise ValueError(f"curve points lack {x!r} (curves written before it was recorded; rerun pivot and e2e)")
    budgets, table, missing = [], [], []
    scores = {"fast": 0.0, "reference": 0.0}
    labels = list(seeds) if seeds is not None else list(range(len(fast)))
    for s, f, r in zip(labels, fast, reference):
        off_f, off_r = (0.0, 0.0) if profiling else (float(f[0][x]), float(r[0][x]))
        budget = min(float(f[-1][x]) - off_f, float(r[-1][x]) - off_r)
        budgets.append(budget)
        sf, sr = score_at(f, budget, x, off_f), score_at(r, budget, x, off_r)
        missing += [f"{name} in seed {s} (budget {budget:.4g})" for name, got in zip(names, (sf, sr)) if got is None]
        if sf is None or sr is None:
            continue
        table.append([p - q for p, q in zip(sf, sr)])
        scores["fast"] += sum(sf) / n_tasks / len(fast)
        scores["reference"] += sum(sr) / n_tasks / len(fast)
    common = {"x": x, "profiling": profiling, "budget": sum(budgets) / len(budgets), "budgets": budgets}
    if missing:
        return {
            **common,
            "verdict": NOT_MEASURABLE,
            "reason": "no curve point other than the start inside the matched budget: " + ", ".join(missing),
            "tasks": n_tasks,
            "seeds": len(fast),
        }
    out = _difference(table, level)
    out.update({**common, **scores})
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
    """``+3.1 points, 95% CI [-1.0, +7.2] over 40 items x 5 seeds (seeds and items random), smallest difference
    detectable (80% power) 5.8 points: **not measurable ...**``; ``verdict=False`` leaves out the verdict (for a
    difference whose sign the caller reads against its claim). A result that could not be computed (a matched
    budget with no trained point inside it) is its verdict and reason."""

    def pts(v: float | None) -> str:
        return "-" if v is None else f"{100 * v:+.1f}"

    if "diff" not in result:
        return f"{result['verdict']} ({result.get('reason') or result.get('error', 'no comparison')})"
    mdd, level = result.get("mdd"), 100 * result.get("level", 0.95)
    seeds = result["seeds"]
    how = {
        "crossed": "seeds and " + unit + " random",
        "paired-t": "one seed: the seed effect is not estimable" if seeds == 1 else "paired t",
    }.get(result.get("method", ""), result.get("method", ""))
    flat = result.get("low") is None and result.get("se") == 0  # every cell the same difference: no spread
    detectable = (
        "not estimable (every item and seed gave the same difference: no spread to size the design from)"
        if mdd is None and flat
        else f"{'-' if mdd is None else f'{100 * mdd:.1f}'} points"
    )
    return (
        f"{pts(result['diff'])} points, {level:.0f}% CI [{pts(result['low'])}, {pts(result['high'])}] "
        f"over {result.get('items', result.get('tasks'))} {unit} x {seeds} seed(s) ({how}), smallest difference "
        f"detectable (80% power) {detectable}" + (f": **{result['verdict']}**" if verdict else "")
    )
