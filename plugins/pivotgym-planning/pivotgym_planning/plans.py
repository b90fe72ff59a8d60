"""Optimal plans of a problem from a state: A* within a budget, else the exact h* table.

The env (expert plans, continuations) and the problem generators (each accepted problem's optimal length)
both plan here, so they agree on every plan.
"""

from __future__ import annotations

from pivotgym_planning.model import PlanningProblem
from pivotgym_planning.search import DEFAULT_MAX_EXPANSIONS, astar
from pivotgym_planning.statespace import DEFAULT_MAX_STATES

__all__ = ["EXPERT_ASTAR_EXPANSIONS", "optimal_plan"]


def optimal_plan(
    problem: PlanningProblem, state: frozenset[str], max_expansions: int = DEFAULT_MAX_EXPANSIONS
) -> tuple[list[str], str] | None:
    """An optimal plan from ``state`` and how it was found: A* within ``EXPERT_ASTAR_EXPANSIONS``
    (``"astar"``), else the exact h* table of the states reachable from the problem's initial state
    (``"exact"``). None when neither settles it."""
    task = problem.search_task()
    start = task.project(state)
    result = astar(task, start, max_expansions=min(max_expansions, EXPERT_ASTAR_EXPANSIONS))
    if result.solved and result.plan is not None:
        return list(result.plan), "astar"
    table = task.exact_table(problem.init, DEFAULT_MAX_STATES)
    found = table.plan(start) if table.complete else None
    return (list(found), "exact") if found is not None else None


#: A* budget for expert plans before the exact table is tried (the manifest's A* budget: shipped problems
#: that A* solved keep the very plans they had)
EXPERT_ASTAR_EXPANSIONS = 30_000
