"""The statistics of suite results: a score's 95% interval, the per-member summary, role averages, and the
interval of a difference between two scorings (paired over items when both record per-item scores)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

#: the roles a suite member can have; ``role_averages`` and ``compare`` average within each
ROLES = ("in_domain", "ood")
Z95 = 1.959963984540054


def ci95(values: Sequence[float]) -> list[float]:
    """A 95% confidence interval for the mean: Wilson's for 0/1 outcomes (sound at small n and near 0 or 1),
    the normal approximation otherwise (clipped to [0, 1] when every value is a share)."""
    n = len(values)
    if n == 0:
        return [0.0, 0.0]
    if all(v in (0.0, 1.0) for v in values):
        return wilson(int(sum(values)), n)
    lo, hi = normal_interval(values)
    if all(0.0 <= v <= 1.0 for v in values):  # a share (e.g. per-task turn accuracy) stays within [0, 1]
        return [max(0.0, lo), min(1.0, hi)]
    return [lo, hi]


def wilson(successes: int, n: int) -> list[float]:
    """Wilson's 95% interval for a share of ``successes`` in ``n`` 0/1 outcomes (``[0, 0]`` for none):
    sound at small n and near 0 or 1, where the normal approximation covers too little."""
    if n <= 0:
        return [0.0, 0.0]
    share = successes / n
    denom = 1 + Z95 * Z95 / n
    centre = (share + Z95 * Z95 / (2 * n)) / denom
    half = Z95 * math.sqrt(share * (1 - share) / n + Z95 * Z95 / (4 * n * n)) / denom
    low = 0.0 if successes <= 0 else max(0.0, centre - half)  # exact ends: no 1e-17 rounding residue
    high = 1.0 if successes >= n else min(1.0, centre + half)
    return [low, high]


def agreement(labels: Sequence[bool], verdicts: Sequence[bool]) -> dict[str, Any]:
    """How often a verifier's ``verdicts`` (credited?) match ``labels`` (correct?): the rate with its 95% Wilson
    interval, and the false positives (credited, wrong) and false negatives (refused, correct)."""
    n = len(labels)
    agree = sum(v == lab for lab, v in zip(labels, verdicts, strict=True))
    low, high = wilson(agree, n)
    return {
        "n": n,
        "agree": agree,
        "rate": round(agree / n, 4) if n else None,
        "ci95": [round(low, 4), round(high, 4)],
        "fp": sum(v and not lab for lab, v in zip(labels, verdicts, strict=True)),
        "fn": sum(lab and not v for lab, v in zip(labels, verdicts, strict=True)),
    }


def normal_interval(values: Sequence[float]) -> list[float]:
    """mean +- 1.96 standard errors (a single value: the value itself; none: [0, 0])."""
    n = len(values)
    if n == 0:
        return [0.0, 0.0]
    mean = sum(values) / n
    half = Z95 * statistics.stdev(values) / math.sqrt(n) if n > 1 else 0.0
    return [mean - half, mean + half]


def summarize(values: Sequence[float], metric: str, item_ids: Sequence[str] | None = None) -> dict[str, Any]:
    """The contract's per-member score ``{"metric", "value", "n", "ci95"}``; with ``item_ids`` (one per value)
    also ``"per_item": {item id: value}``, which lets :func:`pivotgym.eval.compare.compare` check that two
    results scored the same items and pair their differences."""
    out: dict[str, Any] = {
        "metric": metric,
        "value": (sum(values) / len(values)) if values else 0.0,
        "n": len(values),
        "ci95": ci95(values),
    }
    if item_ids is not None:
        if len(item_ids) != len(values):
            raise ValueError(f"summarize: {len(item_ids)} item ids for {len(values)} values")
        out["per_item"] = {str(i): float(v) for i, v in zip(item_ids, values)}
    return out


def role_averages(scores: Mapping[str, Mapping[str, Any]], roles: Mapping[str, str]) -> dict[str, float | None]:
    """The unweighted mean score of the in-domain members and of the OOD members (None when a role is empty)."""
    out: dict[str, float | None] = {}
    for role in ROLES:
        vals = [s["value"] for k, s in scores.items() if roles.get(k) == role]
        out[role] = sum(vals) / len(vals) if vals else None
    return out


def paired_interval(base: Mapping[str, float], trained: Mapping[str, float]) -> list[float]:
    """95% interval of the mean per-item difference ``trained - base`` over the items both score (normal
    approximation on the differences: the items' own difficulty cancels out)."""
    shared = [k for k in base if k in trained]
    return normal_interval([float(trained[k]) - float(base[k]) for k in shared])


def unpaired_interval(
    base_value: float, base_ci: Sequence[float], trained_value: float, trained_ci: Sequence[float]
) -> list[float]:
    """95% interval of ``trained_value - base_value`` from the two scores' own intervals, taken as
    independent (Newcombe's square-and-add: each side of the difference combines the matching sides of
    the two intervals, so asymmetric Wilson intervals stay asymmetric)."""
    delta = trained_value - base_value
    low = math.hypot(trained_value - trained_ci[0], base_ci[1] - base_value)
    high = math.hypot(trained_ci[1] - trained_value, base_value - base_ci[0])
    return [delta - low, delta + high]


def mean_interval(deltas: Sequence[float], intervals: Sequence[Sequence[float]]) -> list[float]:
    """95% interval of the unweighted mean of independent differences, each with its own interval (the half
    widths add in quadrature and shrink by the number of differences)."""
    k = len(deltas)
    if k == 0:
        return [0.0, 0.0]
    mean = sum(deltas) / k
    low = math.sqrt(sum((d - i[0]) ** 2 for d, i in zip(deltas, intervals))) / k
    high = math.sqrt(sum((i[1] - d) ** 2 for d, i in zip(deltas, intervals))) / k
    return [mean - low, mean + high]


__all__ = [
    "ROLES",
    "ci95",
    "mean_interval",
    "normal_interval",
    "paired_interval",
    "role_averages",
    "summarize",
    "unpaired_interval",
    "wilson",
]
