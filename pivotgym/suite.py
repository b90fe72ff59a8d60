"""Temporary re-export of :mod:`pivotgym.eval` for the modules not yet moved to it (``pivotgym.experiment``,
``pivotgym.report``); the lead deletes this module once they import :mod:`pivotgym.eval`. New code imports
:mod:`pivotgym.eval`.

``run_episodes`` here keeps its old meaning for those callers: one greedy episode per task as row dicts
(:func:`pivotgym.eval.rollout.greedy_episodes`), not :func:`pivotgym.eval.rollout.run_episodes`.
"""

from __future__ import annotations

from pivotgym.eval import (
    ROLES,
    Member,
    ci95,
    compare,
    evaluate_suite,
    format_comparison,
    generate_single,
    generation_cap,
    load_result,
    loglik_scores,
    role_averages,
    suite_members,
    summarize,
    write_json,
)
from pivotgym.eval import greedy_episodes as run_episodes

__all__ = ["ROLES", "Member", "ci95", "compare", "evaluate_suite", "format_comparison", "generate_single",
           "generation_cap", "load_result", "loglik_scores", "role_averages", "run_episodes", "suite_members",
           "summarize", "write_json"]
