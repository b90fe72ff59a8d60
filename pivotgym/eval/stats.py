"""The statistics of suite results: a score's 95% interval, the per-member summary, role averages, and the
interval of a difference between two scorings (paired over items when both record per-item scores).

Over problems (the experiment's unit: a score per problem, averaged), a few problems call for intervals that
keep their coverage at small n: :func:`t_interval` and :func:`paired_t_interval` (Student's t over the
per-problem scores or paired differences), :func:`bca_interval` (the bias-corrected and accelerated bootstrap,
as an option), and :func:`min_detectable_difference` / :func:`mdd_from_half_width`, the smallest true
difference a paired comparison detects with the stated power. A percentile bootstrap over 5 problems covers
far less than its nominal 95% (``tests/eval/test_stats.py`` measures it), which is why these exist."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
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


def pass_hat_k(successes: Mapping[str, Sequence[bool]], k: int) -> float:
    """τ²-bench's pass^k: the chance that ``k`` episodes of a task, drawn from its ``n`` recorded ones without
    replacement, all succeed, averaged over tasks (``C(c, k) / C(n, k)`` with ``c`` successes). pass^1 is the
    success rate; the drop from pass^1 to pass^k measures how consistent a policy is. Each task needs ``k`` or
    more episodes."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if not successes:
        raise ValueError("pass^k of no task")
    short = sorted(task for task, runs in successes.items() if len(runs) < k)
    if short:
        raise ValueError(f"pass^{k} needs {k} or more episodes of each task; fewer for {short[:5]}")
    return sum(math.comb(sum(map(bool, runs)), k) / math.comb(len(runs), k) for runs in successes.values()) / len(
        successes
    )


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


# ---------------------------------------------------------------------------------------------- over problems
#: the power and two-sided level of :func:`min_detectable_difference` unless told otherwise
POWER = 0.8
ALPHA = 0.05


@dataclass(frozen=True)
class MeanInterval:
    """A mean over ``n`` units (problems) with its interval: of a score, or of paired differences.

    ``sd`` is the sample standard deviation of the units' values (of the differences, for a paired interval),
    the input :func:`min_detectable_difference` needs. With fewer than two units there is no interval:
    ``low``/``high`` are NaN (``None`` in :meth:`to_dict`). ``low``/``high`` may be clipped to the values'
    possible range (``bounds``: a share cannot leave [0, 1]); ``half_width`` is the unclipped one."""

    mean: float
    low: float
    high: float
    n: int
    sd: float
    method: str
    confidence: float = 0.95
    #: half the interval's width before any clipping (NaN without an interval)
    half: float = math.nan

    @property
    def half_width(self) -> float:
        """Half the interval's width before clipping (NaN without an interval)."""
        return self.half if math.isfinite(self.half) else (self.high - self.low) / 2

    @property
    def se(self) -> float:
        """The standard error of the mean, ``sd / sqrt(n)`` (NaN below two units)."""
        return self.sd / math.sqrt(self.n) if self.n > 1 else math.nan

    def mdd(self, alpha: float = ALPHA, power: float = POWER) -> float:
        """The minimum detectable difference of a paired comparison with this spread over as many units
        (:func:`min_detectable_difference`); meaningful for an interval of paired differences."""
        return min_detectable_difference(self.sd, self.n, alpha=alpha, power=power)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``{"mean", "low", "high", "n", "sd", "se", "method", "confidence"}`` (NaN as None), and
        for a paired interval ``"mdd"``, the comparison's minimum detectable difference (:meth:`mdd`)."""
        out: dict[str, Any] = {
            "mean": _finite(self.mean),
            "low": _finite(self.low),
            "high": _finite(self.high),
            "n": self.n,
            "sd": _finite(self.sd),
            "se": _finite(self.se),
            "method": self.method,
            "confidence": self.confidence,
        }
        if self.method.startswith("paired"):
            out["mdd"] = _finite(self.mdd())
        return out


def _finite(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


def t_quantile(q: float, df: float) -> float:
    """The ``q`` quantile of Student's t with ``df`` degrees of freedom (scipy; ``df`` may be fractional,
    as Satterthwaite's are)."""
    from scipy import stats as sps

    return float(sps.t.ppf(q, df))


def t_interval(
    values: Sequence[float], confidence: float = 0.95, bounds: tuple[float, float] | None = None
) -> MeanInterval:
    """Student's t interval for the mean of per-problem ``values``: ``mean +- t(1-a/2, n-1) * sd / sqrt(n)``,
    clipped to ``bounds`` when given (``(0, 1)`` for a share: clipping never drops a possible true value).

    Over a few problems this keeps its coverage where the normal approximation and the percentile bootstrap
    do not (both ignore that the SD is itself estimated from n values). Below two values: no interval (NaN)."""
    n, mean, sd = _spread(values, confidence)
    if n < 2:
        return MeanInterval(mean, math.nan, math.nan, n, math.nan, "t", confidence)
    half = t_quantile(1 - (1 - confidence) / 2, n - 1) * sd / math.sqrt(n)
    low, high = _clip(mean - half, mean + half, bounds)
    return MeanInterval(mean, low, high, n, sd, "t", confidence, half)


def _clip(low: float, high: float, bounds: tuple[float, float] | None) -> tuple[float, float]:
    if bounds is None:
        return low, high
    return max(bounds[0], low), min(bounds[1], high)


def paired_differences(
    base: Mapping[str, float] | Sequence[float], trained: Mapping[str, float] | Sequence[float]
) -> list[float]:
    """``trained - base`` per unit: over the keys both mappings have (in ``base``'s order), or position by
    position for two sequences of equal length (anything else is a ValueError: pairing needs the same units)."""
    if isinstance(base, Mapping) and isinstance(trained, Mapping):
        return [float(trained[k]) - float(base[k]) for k in base if k in trained]
    if isinstance(base, Mapping) or isinstance(trained, Mapping):
        raise ValueError("paired_differences: give two mappings (unit id -> score) or two sequences, not one of each")
    if len(base) != len(trained):
        raise ValueError(f"paired_differences: {len(base)} base scores but {len(trained)} trained scores")
    return [float(t) - float(b) for b, t in zip(base, trained)]


def paired_t_interval(
    base: Mapping[str, float] | Sequence[float],
    trained: Mapping[str, float] | Sequence[float],
    confidence: float = 0.95,
    bounds: tuple[float, float] | None = None,
) -> MeanInterval:
    """The t interval of the mean paired difference ``trained - base`` over the units both score (problems,
    or seeds): each unit's own difficulty cancels out, and the interval's ``sd`` feeds
    :func:`min_detectable_difference`. ``bounds``: ``(-1, 1)`` for a difference of shares."""
    out = t_interval(paired_differences(base, trained), confidence, bounds)
    return MeanInterval(out.mean, out.low, out.high, out.n, out.sd, "paired-t", confidence, out.half)


def bca_interval(
    values: Sequence[float],
    confidence: float = 0.95,
    bounds: tuple[float, float] | None = None,
    *,
    resamples: int = 9999,
    seed: int = 0,
) -> MeanInterval:
    """The bias-corrected and accelerated (BCa) bootstrap interval of the mean (scipy), an option beside
    :func:`t_interval` for skewed scores over many problems; over very few problems it undercovers like any
    bootstrap. Values that are all equal give a zero-width interval at the value."""
    import numpy as np
    from scipy import stats as sps

    n, mean, sd = _spread(values, confidence)
    if n < 2:
        return MeanInterval(mean, math.nan, math.nan, n, math.nan, "bca", confidence)
    if sd == 0:
        return MeanInterval(mean, mean, mean, n, 0.0, "bca", confidence)
    result = sps.bootstrap(
        (np.asarray(values, dtype=float),),
        np.mean,
        confidence_level=confidence,
        n_resamples=resamples,
        method="BCa",
        random_state=np.random.default_rng(seed),
    )
    low, high = float(result.confidence_interval.low), float(result.confidence_interval.high)
    half = (high - low) / 2
    low, high = _clip(low, high, bounds)
    return MeanInterval(mean, low, high, n, sd, "bca", confidence, half)


def mean_interval_over(
    values: Sequence[float], method: str = "t", confidence: float = 0.95, bounds: tuple[float, float] | None = None
) -> MeanInterval:
    """:func:`t_interval` (``method="t"``) or :func:`bca_interval` (``"bca"``) of per-problem ``values``,
    clipped to ``bounds``."""
    if method == "t":
        return t_interval(values, confidence, bounds)
    if method == "bca":
        return bca_interval(values, confidence, bounds)
    raise ValueError(f"unknown interval method {method!r}; use 't' or 'bca'")


def min_detectable_difference(sd: float, n: int, *, alpha: float = ALPHA, power: float = POWER) -> float:
    """The smallest true mean difference a paired two-sided t test at level ``alpha`` detects with probability
    ``power``, given the SD of the per-unit differences ``sd`` and ``n`` units:
    ``(t(1 - alpha/2, n-1) + t(power, n-1)) * sd / sqrt(n)``.

    The usual t-quantile form of the power calculation (it slightly understates the exact noncentral-t answer
    at very small n). NaN below two units or without an SD."""
    if not 0 < alpha < 1 or not 0 < power < 1:
        raise ValueError(f"alpha and power must lie in (0, 1), got alpha={alpha}, power={power}")
    if n < 2 or not math.isfinite(sd):
        return math.nan
    return (t_quantile(1 - alpha / 2, n - 1) + t_quantile(power, n - 1)) * sd / math.sqrt(n)


def mdd_from_half_width(
    half_width: float, n: int, *, confidence: float = 0.95, alpha: float = ALPHA, power: float = POWER
) -> float:
    """:func:`min_detectable_difference` from a t interval's half-width over ``n`` units (the SE is the
    half-width over ``t(1 - (1-confidence)/2, n-1)``): what a reported interval implies about power. At 95%
    and ``alpha`` 0.05 it is ``half_width * (1 + t(power, n-1) / t(0.975, n-1))``."""
    _check_confidence(confidence)
    if n < 2 or not math.isfinite(half_width):
        return math.nan
    se = half_width / t_quantile(1 - (1 - confidence) / 2, n - 1)
    return min_detectable_difference(se * math.sqrt(n), n, alpha=alpha, power=power)


def _spread(values: Sequence[float], confidence: float) -> tuple[int, float, float]:
    """``(n, mean, sd)`` of per-problem ``values`` after checking ``confidence`` (NaN mean without values,
    NaN SD below two)."""
    _check_confidence(confidence)
    n = len(values)
    mean = sum(values) / n if n else math.nan
    return n, mean, statistics.stdev(values) if n > 1 else math.nan


def _check_confidence(confidence: float) -> None:
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")


__all__ = [
    "ALPHA",
    "POWER",
    "ROLES",
    "MeanInterval",
    "bca_interval",
    "ci95",
    "mdd_from_half_width",
    "mean_interval",
    "mean_interval_over",
    "min_detectable_difference",
    "normal_interval",
    "paired_differences",
    "paired_interval",
    "paired_t_interval",
    "role_averages",
    "summarize",
    "t_interval",
    "t_quantile",
    "unpaired_interval",
    "wilson",
]
