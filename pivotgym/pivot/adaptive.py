"""Adaptive K: sample a state in blocks and stop once its pivot decision is settled, with a stated error bound.

Fixed-K profiling draws K samples and calls a state a pivot when the K rewards are mixed (``var > 0``) and
their mean is below λ (``max_mean``). :class:`AdaptiveK` reads the *same* sample stream block by block and
stops early by three rules. Two are certain - they never change the decision fixed K would make on that
stream - and one is probabilistic, with a bound that :meth:`AdaptiveK.unanimous_after` derives:

* ``mean_settled_high`` (certain): ``s / K >= λ`` - the K-sample mean cannot fall below λ any more;
* ``mixed`` (certain): rewards are mixed and ``(s + K - n) / K < λ`` - a pivot whatever follows;
* ``unanimous`` (bounded): the first m rewards are all equal. This can drop a state that fixed K would have
  called a pivot (a pass, or a fail, among the later K - m samples). For a state whose per-sample pass
  probability is p, that happens with probability exactly

      P_miss(p) = (1-p)^m · P(1 <= X and X/K < λ) + p^m · P(X <= K-m-1 and (m+X)/K < λ),
      X ~ Binomial(K - m, p)

  and m is the smallest value with ``sup over p in [min_pass_rate, 1] of P_miss(p) <= delta``.

**The guarantee** (stated in the profile row under ``metadata.adaptive``): *for every state whose pass rate is
at least ``min_pass_rate``, the probability that adaptive K drops a pivot that fixed K would have found on the
same samples is at most ``delta``.* States with a lower pass rate can be dropped more often: they are the
blind spot the user chooses with ``min_pass_rate`` (and fixed K itself finds them rarely). A later stop (at
a block boundary past m) only shrinks the miss event, so blocks keep the bound. When no m < K meets the bound
(K too small for it) the unanimity rule is off and adaptive K stops by the certain rules only (zero error).

Failed verifications (timeouts, crashes, verifier errors) are not rewards: the profiler passes the valid
rewards and the budget left for valid ones (``K - failed``), so the rules read only real judgements.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

__all__ = ["AdaptiveK", "miss_probability"]


def _binom_pmf(n: int, p: float) -> list[float]:
    return [math.comb(n, x) * p**x * (1 - p) ** (n - x) for x in range(n + 1)]


def miss_probability(p: float, m: int, k: int, max_mean: float) -> float:
    """P(the first ``m`` of ``k`` rewards are unanimous, yet all ``k`` would make a pivot) for a state with
    per-sample pass probability ``p``: the chance that the unanimity rule drops a fixed-K pivot."""
    if m >= k:
        return 0.0
    rest = k - m
    pmf = _binom_pmf(rest, p)
    fail_side = sum(pmf[x] for x in range(1, rest + 1) if x / k < max_mean)
    pass_side = sum(pmf[x] for x in range(rest) if (m + x) / k < max_mean)
    return (1 - p) ** m * fail_side + p**m * pass_side


@lru_cache(maxsize=256)
def _sup_miss(m: int, k: int, max_mean: float, min_pass_rate: float) -> float:
    """``sup_{p in [min_pass_rate, 1]} miss_probability``: a grid of 20,001 pass rates (vectorised), then a
    golden-section refinement around its best point (a smooth polynomial in p with few local maxima)."""
    import numpy as np

    if m >= k:
        return 0.0
    rest = k - m
    fail_terms = [x for x in range(1, rest + 1) if x / k < max_mean]
    pass_terms = [x for x in range(rest) if (m + x) / k < max_mean]

    def f(p: np.ndarray) -> np.ndarray:
        q = 1 - p
        total = np.zeros_like(p)
        for x in fail_terms:
            total += q**m * math.comb(rest, x) * p**x * q ** (rest - x)
        for x in pass_terms:
            total += p**m * math.comb(rest, x) * p**x * q ** (rest - x)
        return total

    grid = np.linspace(min_pass_rate, 1.0, 20001)
    values = f(grid)
    best = int(values.argmax())
    a, b = float(grid[max(0, best - 1)]), float(grid[min(len(grid) - 1, best + 1)])
    for _ in range(60):
        c, d = b - (b - a) * 0.618034, a + (b - a) * 0.618034
        fc, fd = f(np.array([c, d]))
        if fc >= fd:
            b = d
        else:
            a = c
    return float(max(values[best], f(np.array([(a + b) / 2]))[0]))


@dataclass(frozen=True)
class AdaptiveK:
    """Sequential sampling of one state that stops once its pivot decision is settled (see the module
    docstring for the rules and the bound).

    ``min_unanimous`` is derived from ``(min_pass_rate, delta, K)`` when left at None; an explicit value must
    meet the same bound (or the profiler refuses the config). Select with the ``max_mean`` used to profile.
    """

    max_mean: float = 0.6
    #: the bound covers every state whose per-sample pass rate is at least this (p_min)
    min_pass_rate: float = 0.1
    #: at most this probability of dropping a fixed-K pivot, for every state with pass rate >= min_pass_rate
    delta: float = 0.05
    block: int = 2
    #: False: a mixed state stops at once and its partial mean decides (faster, outside the bound)
    settle_mean: bool = True
    #: unanimity run length; None derives the smallest one that meets the bound for the profile's K
    min_unanimous: int | None = None

    def __post_init__(self) -> None:
        if self.block < 1:
            raise ValueError(f"AdaptiveK: block must be >= 1, got {self.block}")
        if self.min_unanimous is not None and self.min_unanimous < 1:
            raise ValueError(f"AdaptiveK: min_unanimous must be >= 1 (or None to derive it), got {self.min_unanimous}")
        if not 0 < self.min_pass_rate <= 1:
            raise ValueError(f"AdaptiveK: min_pass_rate must be in (0, 1], got {self.min_pass_rate}")
        if not 0 < self.delta < 1:
            raise ValueError(f"AdaptiveK: delta must be in (0, 1), got {self.delta}")
        if not 0 < self.max_mean <= 1:
            raise ValueError(f"AdaptiveK: max_mean must be in (0, 1], got {self.max_mean}")

    # ------------------------------------------------------------------ the bound
    def miss_bound(self, m: int, k: int) -> float:
        """The worst miss probability of an m-sample unanimity rule at this K over pass rates >= p_min."""
        return _sup_miss(int(m), int(k), float(self.max_mean), float(self.min_pass_rate))

    def unanimous_after(self, k: int) -> int | None:
        """The unanimity run used at this K: ``min_unanimous`` when given (checked against the bound), else the
        smallest m < K that meets it; None when none does (the rule is off)."""
        return _unanimous_after(self, int(k))

    def check(self, k: int) -> None:
        """Raise ValueError when an explicit ``min_unanimous`` breaks the bound at this K (says how to fix)."""
        m = self.min_unanimous
        if m is None or m >= k:
            return
        bound = self.miss_bound(m, k)
        if bound > self.delta:
            derived = _derived(self, k)
            fix = (
                f"use min_unanimous >= {derived} (or leave it unset to derive it)"
                if derived is not None
                else f"K={k} is too small for this bound: raise K, min_pass_rate or delta, or leave "
                "min_unanimous unset (the unanimity rule is then off)"
            )
            raise ValueError(
                f"AdaptiveK: min_unanimous={m} at K={k} drops a pivot with pass rate >= {self.min_pass_rate} "
                f"with probability up to {bound:.3f} > delta={self.delta}; {fix}"
            )

    def describe(self, k: int) -> dict[str, Any]:
        """What a profile row records: the rule, the unanimity run used at K, and the bound it meets."""
        m = self.unanimous_after(k)
        return {
            "max_mean": self.max_mean,
            "min_pass_rate": self.min_pass_rate,
            "delta": self.delta,
            "block": self.block,
            "settle_mean": self.settle_mean,
            "min_unanimous": m,
            "miss_bound": round(self.miss_bound(m, k), 6) if m is not None else 0.0,
        }

    @staticmethod
    def min_unanimous_for(epsilon: float, delta: float) -> int:
        """Smallest m with ``(1-eps)**m + eps**m <= delta`` (kept for callers of the old rule; the profiler
        uses :meth:`unanimous_after`, which accounts for K and λ exactly)."""
        if not (0 < epsilon <= 0.5 and 0 < delta < 1):
            raise ValueError("need 0 < epsilon <= 0.5 and 0 < delta < 1")
        m = 1
        while (1 - epsilon) ** m + epsilon**m > delta:
            m += 1
        return m

    # ------------------------------------------------------------------ the rules
    def stop_reason(self, rewards: Sequence[float], k: int) -> str | None:
        """Why sampling of a state can stop after ``rewards`` with a budget of ``k`` (None: keep sampling)."""
        n = len(rewards)
        if n >= k:
            return "budget"
        if n == 0:
            return None
        total = float(sum(rewards))
        if total / k >= self.max_mean:
            return "mean_settled_high"
        mixed = max(rewards) > min(rewards)
        if mixed and (not self.settle_mean or (total + (k - n)) / k < self.max_mean):
            return "mixed"
        m = self.unanimous_after(k)
        if not mixed and m is not None and n >= m:
            return "unanimous"
        return None


def _derived(rule: AdaptiveK, k: int) -> int | None:
    for m in range(1, k):
        if rule.miss_bound(m, k) <= rule.delta:
            return m
    return None


@lru_cache(maxsize=256)
def _unanimous_after(rule: AdaptiveK, k: int) -> int | None:
    if rule.min_unanimous is not None:
        rule.check(k)
        return rule.min_unanimous if rule.min_unanimous < k else None
    return _derived(rule, k)
