"""A difference measured on a seeds x problems table, with seeds and problems both random.

An experiment trains each method once per seed and scores every trained model on the same test problems, so a
difference between two methods is a table ``D[s][p]`` (seed s, problem p). Its grand mean estimates the
difference a user would see with a *new* run on *new* problems only if both are treated as samples: the two-way
random-effects model without replication::

    D[s][p] = mu + a_s + b_p + e_sp,   var(a) = seed, var(b) = problem, var(e) = residual

    var(mean) = seed / S + problem / P + residual / (S P)

Averaging each problem over the seeds and running a t test over problems (what the report did before) drops the
``seed / S`` term: a run that is better or worse on every problem never widens that interval. Here the variance
of the mean comes from the three mean squares (ANOVA, method of moments), with each component clipped at 0
(its estimate can be negative by chance); the degrees of freedom are Satterthwaite's for the linear combination
of mean squares that the clipped estimate uses. Where both seed and problem components are positive that is
``(MS_seed + MS_problem - MS_residual) / (S P)``; where the seed component is 0 it is ``MS_problem / (S P)``, the
old per-problem t interval exactly, so the change only ever widens an interval where the data show a seed
effect. One seed cannot show one: its result says so (``seed_effect: "not estimable"``).

The minimum detectable difference (two-sided 5%, 80% power) uses the same standard error and degrees of
freedom, and :meth:`CrossedDesign.mdd_at` projects it to another number of seeds or problems: more problems
shrink only the ``problem`` and ``residual`` terms, so they never take it below what the seed term allows.
``tests/experiment/test_crossed.py`` checks the coverage by simulation with a known seed effect.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pivotgym.eval.stats import ALPHA, POWER, t_quantile

__all__ = ["CrossedDesign", "crossed_design", "difference_table"]


@dataclass(frozen=True)
class CrossedDesign:
    """The variance components of a seeds x problems table of differences and what follows from them."""

    #: seeds (rows) and problems (columns) of the table
    seeds: int
    problems: int
    #: the grand mean: the estimated difference
    mean: float
    #: the mean squares of the two-way ANOVA without replication (NaN where a factor has one level)
    ms_seed: float
    ms_problem: float
    ms_residual: float
    #: the variance components, each clipped at 0 (``seed`` is NaN with one seed: not estimable)
    var_seed: float
    var_problem: float
    var_residual: float

    # ---------------------------------------------------------------- the design as run
    @property
    def se(self) -> float:
        """The standard error of :attr:`mean` with seeds and problems both random."""
        return self.se_at(self.seeds, self.problems)

    @property
    def df(self) -> float:
        """Satterthwaite's degrees of freedom of :attr:`se`."""
        return self.df_at(self.seeds, self.problems)

    def interval(self, level: float = 0.95) -> tuple[float, float]:
        """The ``level`` t interval of the difference (NaN ends when no interval can be formed, including a
        table without any spread: every cell the same difference, e.g. two models that score 0 everywhere,
        which estimates a variance of 0 from too little to say so)."""
        se, df = self.se, self.df
        if not (math.isfinite(se) and math.isfinite(df) and df > 0 and se > 0):
            return math.nan, math.nan
        half = t_quantile(1 - (1 - level) / 2, df) * se
        return self.mean - half, self.mean + half

    @property
    def mdd(self) -> float:
        """The minimum detectable difference of this design (two-sided 5%, 80% power)."""
        return self.mdd_at(self.seeds, self.problems)

    # ---------------------------------------------------------------- another design
    def _mean_squares_at(self, seeds: int, problems: int) -> list[tuple[float, float, float]]:
        """``(coefficient, expected mean square, df)`` of the mean squares whose combination estimates
        ``S P var(mean)`` at ``seeds`` x ``problems``, with the clipped components of this table."""
        seed = 0.0 if math.isnan(self.var_seed) else self.var_seed
        resid = self.var_residual
        terms = []
        if seed > 0:
            terms.append((1.0, resid + problems * seed, float(seeds - 1)))
        if self.var_problem > 0:
            terms.append((1.0, resid + seeds * self.var_problem, float(problems - 1)))
        if seed > 0 and self.var_problem > 0:
            terms.append((-1.0, resid, float((seeds - 1) * (problems - 1))))
        elif not terms:
            terms.append((1.0, resid, float(max(seeds - 1, 1) * (problems - 1))))
        return terms

    def se_at(self, seeds: int, problems: int) -> float:
        """The standard error of the mean difference with ``seeds`` x ``problems`` (same components)."""
        if seeds < 1 or problems < 2 or not math.isfinite(self.var_residual):
            return math.nan
        seed = 0.0 if math.isnan(self.var_seed) else self.var_seed
        return math.sqrt(seed / seeds + self.var_problem / problems + self.var_residual / (seeds * problems))

    def df_at(self, seeds: int, problems: int) -> float:
        """Satterthwaite's degrees of freedom of :meth:`se_at` (``problems - 1`` where only the problem and
        residual terms count, as in the per-problem t test)."""
        if seeds < 1 or problems < 2:
            return math.nan
        terms = self._mean_squares_at(seeds, problems)
        total = sum(c * ms for c, ms, _ in terms)
        spread = sum((c * ms) ** 2 / df for c, ms, df in terms if df > 0)
        if not (total > 0 and spread > 0):
            return float(problems - 1)
        return total * total / spread

    def mdd_at(self, seeds: int, problems: int, *, alpha: float = ALPHA, power: float = POWER) -> float:
        """The minimum detectable difference at ``seeds`` x ``problems``:
        ``(t(1 - alpha/2, df) + t(power, df)) * se``. More problems never take it below the seed term's
        ``(t + t) * sqrt(seed / seeds)``."""
        se, df = self.se_at(seeds, problems), self.df_at(seeds, problems)
        if not (math.isfinite(se) and math.isfinite(df) and df > 0 and se > 0):
            return math.nan  # no spread in the table: no variance to size a design from (not "any difference")
        return (t_quantile(1 - alpha / 2, df) + t_quantile(power, df)) * se

    @property
    def seed_effect(self) -> str:
        """``"not estimable"`` (one seed), ``"none seen"`` (its component estimate is 0) or ``"counted"``."""
        if self.seeds < 2:
            return "not estimable"
        return "counted" if self.var_seed > 0 else "none seen"

    def to_dict(self, level: float = 0.95) -> dict[str, Any]:
        """JSON-ready: the difference, its interval, df, se, MDD and the components (NaN as None)."""
        low, high = self.interval(level)
        return {
            "diff": _finite(self.mean),
            "low": _finite(low),
            "high": _finite(high),
            "level": level,
            "method": "crossed" if self.seeds > 1 else "paired-t",
            "items": self.problems,
            "seeds": self.seeds,
            "se": _finite(self.se),
            "df": _finite(self.df),
            "mdd": _finite(self.mdd),
            "seed_effect": self.seed_effect,
            "components": {
                "seed": _finite(self.var_seed),
                "problem": _finite(self.var_problem),
                "residual": _finite(self.var_residual),
            },
        }


def _finite(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


def crossed_design(table: Sequence[Sequence[float]]) -> CrossedDesign:
    """The :class:`CrossedDesign` of ``table[s][p]``, the difference on problem p in seed s (every row the same
    problems in the same order). One row: the per-problem t test's components (``var_seed`` NaN)."""
    rows = [[float(v) for v in row] for row in table]
    if not rows or not rows[0]:
        raise ValueError("a difference table needs at least one seed and one problem")
    n_s, n_p = len(rows), len(rows[0])
    if any(len(row) != n_p for row in rows):
        raise ValueError(f"every seed must score the same problems; row lengths {sorted({len(r) for r in rows})}")
    grand = sum(map(sum, rows)) / (n_s * n_p)
    seed_means = [sum(row) / n_p for row in rows]
    problem_means = [sum(row[p] for row in rows) / n_s for p in range(n_p)]
    ss_seed = n_p * sum((m - grand) ** 2 for m in seed_means)
    ss_problem = n_s * sum((m - grand) ** 2 for m in problem_means)
    ss_resid = sum((rows[s][p] - seed_means[s] - problem_means[p] + grand) ** 2 for s in range(n_s) for p in range(n_p))
    ms_seed = ss_seed / (n_s - 1) if n_s > 1 else math.nan
    ms_problem = ss_problem / (n_p - 1) if n_p > 1 else math.nan
    if n_s > 1 and n_p > 1:
        ms_resid = ss_resid / ((n_s - 1) * (n_p - 1))
        var_seed = max(0.0, (ms_seed - ms_resid) / n_p)
        var_problem = max(0.0, (ms_problem - ms_resid) / n_s)
        var_resid = ms_resid
    else:  # one seed: the problem and residual terms cannot be told apart; together they are the t test's
        ms_resid, var_seed = math.nan, math.nan
        var_problem, var_resid = (ms_problem, 0.0) if n_p > 1 else (math.nan, math.nan)
    return CrossedDesign(n_s, n_p, grand, ms_seed, ms_problem, ms_resid, var_seed, var_problem, var_resid)


def difference_table(
    a: Sequence[Mapping[str, float]], b: Sequence[Mapping[str, float]]
) -> tuple[list[str], list[list[float]]]:
    """The problems every mapping scored and the table ``a[s][p] - b[s][p]``; ``a[s]`` and ``b[s]`` map item
    ids to scores for seed s. Raises ValueError when the seeds do not pair up or no item is shared."""
    if not a or len(a) != len(b):
        raise ValueError(f"need one item mapping per seed for both models, got {len(a)} and {len(b)}")
    items = sorted(set.intersection(*(set(m) for m in (*a, *b))))
    if not items:
        raise ValueError("the two models share no scored items")
    return items, [[float(x[i]) - float(y[i]) for i in items] for x, y in zip(a, b)]
