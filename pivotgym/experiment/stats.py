"""The arithmetic behind the report's claims: the cost to reach a target score, and percentile bootstrap
intervals (over seeds, then tasks or items) of cost ratios and paired score differences, each with a verdict."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

from pivotgym.experiment.plots import Curve

__all__ = [
    "CONTRADICTED",
    "NOT_MEASURABLE",
    "REPRODUCED",
    "bootstrap_cost_ratio",
    "bootstrap_mean_difference",
    "check_curves",
    "cost_ratio",
    "interval_text",
    "reach_ratio",
    "time_to_reach",
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
#: a claim's verdicts: the bootstrap interval of the cost ratio lies above 1x, below 1x, or straddles it
REPRODUCED, CONTRADICTED, NOT_MEASURABLE = "reproduced", "contradicted", "not measurable at this scale"


def _mean_curve(curves: Sequence[Curve], seeds: Sequence[int], tasks: Sequence[int], x: str) -> list[dict[str, float]]:
    """Average of the curves ``seeds`` (indices into ``curves``, repeats allowed) over the task indices
    ``tasks`` (repeats allowed): point i has the mean ``x`` and the mean per-task score of point i."""
    length = min(len(curves[s]) for s in seeds)
    out = []
    for i in range(length):
        xs = [float(curves[s][i][x]) for s in seeds]
        scores = [float(curves[s][i]["per_task"][t]) for s in seeds for t in tasks]
        out.append({x: sum(xs) / len(xs), "score": sum(scores) / len(scores)})
    return out


def cost_ratio(
    fast: Sequence[Curve],
    reference: Sequence[Curve],
    x: str = "turns",
    seeds: Sequence[int] | None = None,
    tasks: Sequence[int] | None = None,
) -> float:
    """``reference``'s cost / ``fast``'s cost to reach ``reference``'s final score, on curves averaged over
    ``seeds`` and ``tasks`` (default: all).

    ``fast`` never reaching the target gives 0 (infinitely costlier). A reference that never rises above its
    own start score has no cost to beat (it "reaches" its target at its first point): that counts as 1x, no
    evidence either way, so a flat or identical pair of curves can never look like a speed-up."""
    seeds = list(range(len(reference))) if seeds is None else list(seeds)
    tasks = list(range(len(reference[0][0]["per_task"]))) if tasks is None else list(tasks)
    ref, fst = _mean_curve(reference, seeds, tasks, x), _mean_curve(fast, seeds, tasks, x)
    target = ref[-1]["score"]
    if ref[0]["score"] >= target - 1e-12:
        return 1.0
    ref_cost, fast_cost = time_to_reach(ref, target, x), time_to_reach(fst, target, x)
    if fast_cost is None:
        return 0.0
    if not fast_cost:  # fast reached the target at no cost while the reference needed some
        return float("inf")
    return float(ref_cost) / fast_cost  # type: ignore[arg-type]


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


def bootstrap_cost_ratio(
    fast: Sequence[Curve],
    reference: Sequence[Curve],
    x: str = "turns",
    *,
    resamples: int = 2000,
    level: float = 0.95,
    seed: int = 0,
) -> dict[str, Any]:
    """:func:`cost_ratio` with a percentile bootstrap interval over tasks and seeds.

    ``fast[i]`` and ``reference[i]`` are seed i's curves, each point carrying ``per_task`` scores on the same
    curve tasks. Every resample draws seeds with replacement, then tasks with replacement (the same draw for
    both methods: the comparison is paired), and recomputes the ratio. The verdict is :data:`REPRODUCED`
    only when the whole interval lies above 1x, :data:`CONTRADICTED` when it lies below, otherwise
    :data:`NOT_MEASURABLE` (the data cannot tell the methods apart)."""
    n_tasks = check_curves(fast, reference)
    n_seeds = len(reference)
    rng = random.Random(seed)
    draws = []
    for _ in range(resamples):
        seeds = [rng.randrange(n_seeds) for _ in range(n_seeds)]
        tasks = [rng.randrange(n_tasks) for _ in range(n_tasks)]
        draws.append(cost_ratio(fast, reference, x, seeds, tasks))
    draws.sort()
    lo = draws[int((1 - level) / 2 * (resamples - 1))]
    hi = draws[int((1 + level) / 2 * (resamples - 1))]
    verdict = REPRODUCED if lo > 1.0 else CONTRADICTED if hi < 1.0 else NOT_MEASURABLE
    return {
        "ratio": cost_ratio(fast, reference, x),
        "low": lo,
        "high": hi,
        "level": level,
        "resamples": resamples,
        "seeds": n_seeds,
        "tasks": n_tasks,
        "verdict": verdict,
    }


def bootstrap_mean_difference(
    a: Sequence[Mapping[str, float]],
    b: Sequence[Mapping[str, float]],
    *,
    resamples: int = 2000,
    level: float = 0.95,
    seed: int = 0,
) -> dict[str, Any]:
    """Mean score of ``a`` minus ``b`` with a paired percentile bootstrap over seeds, then items.

    ``a[i]`` and ``b[i]`` map item ids to scores for seed i; only items present in every mapping count.
    The verdict is :data:`REPRODUCED` when the interval lies above 0, :data:`CONTRADICTED` below, otherwise
    :data:`NOT_MEASURABLE`."""
    if not a or len(a) != len(b):
        raise ValueError(f"need one item mapping per seed for both models, got {len(a)} and {len(b)}")
    items = sorted(set.intersection(*(set(m) for m in (*a, *b))))
    if not items:
        raise ValueError("the two models share no scored items")

    def diff(seeds: Sequence[int], picks: Sequence[str]) -> float:
        return sum(a[s][i] - b[s][i] for s in seeds for i in picks) / (len(seeds) * len(picks))

    rng = random.Random(seed)
    draws = sorted(
        diff([rng.randrange(len(a)) for _ in a], [items[rng.randrange(len(items))] for _ in items])
        for _ in range(resamples)
    )
    lo, hi = draws[int((1 - level) / 2 * (resamples - 1))], draws[int((1 + level) / 2 * (resamples - 1))]
    verdict = REPRODUCED if lo > 0 else CONTRADICTED if hi < 0 else NOT_MEASURABLE
    return {
        "diff": diff(range(len(a)), items),
        "low": lo,
        "high": hi,
        "level": level,
        "items": len(items),
        "seeds": len(a),
        "verdict": verdict,
    }


def interval_text(result: Mapping[str, Any]) -> str:
    """``1.40x [0.80x, 2.10x] (95%, 5 tasks x 3 seeds): not measurable at this scale``."""

    def x(v: float) -> str:
        return "never" if v == 0 else "inf" if v == float("inf") else f"{v:.2f}x"

    return (
        f"{x(result['ratio'])} [{x(result['low'])}, {x(result['high'])}] ({100 * result['level']:.0f}% bootstrap, "
        f"{result['tasks']} tasks x {result['seeds']} seed(s)): **{result['verdict']}**"
    )
