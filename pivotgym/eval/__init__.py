"""Evaluation: suites of envs scored greedily (episodes run by :mod:`pivotgym.rollout`), statistics and
comparisons.

* :mod:`pivotgym.eval.suites` - suite members and :func:`evaluate_suite` (the ``pivotgym eval`` result);
* :mod:`pivotgym.eval.scoring` - how one member's tasks are scored (each turn capped by :func:`generation_cap`);
* :mod:`pivotgym.eval.stats` - intervals (:func:`ci95`), :func:`summarize`, role averages, paired intervals;
* :mod:`pivotgym.eval.compare` - :func:`compare` two results (refusing unlike ones) and format the table;
* :mod:`pivotgym.eval.io` - :func:`write_json` and :func:`load_result`.
"""

from __future__ import annotations

from pivotgym.eval.compare import compare, format_comparison, mismatches
from pivotgym.eval.io import load_result, write_json
from pivotgym.eval.scoring import generate_single, generation_cap, loglik_scores
from pivotgym.eval.stats import (
    ROLES,
    ci95,
    paired_interval,
    pass_hat_k,
    role_averages,
    summarize,
    unpaired_interval,
    wilson,
)
from pivotgym.eval.suites import Member, evaluate_suite, suite_members

__all__ = [
    "ROLES",
    "Member",
    "ci95",
    "compare",
    "evaluate_suite",
    "format_comparison",
    "generate_single",
    "generation_cap",
    "load_result",
    "loglik_scores",
    "mismatches",
    "paired_interval",
    "pass_hat_k",
    "role_averages",
    "suite_members",
    "summarize",
    "unpaired_interval",
    "wilson",
    "write_json",
]
