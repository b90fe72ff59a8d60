"""Verifiers of the planning domain.

``planning/optimal`` (functional): a candidate action earns reward 1 when it is applicable in the state
of the turn and keeps the goal reachable at optimal cost, h*(s') = h*(s) - 1, so every optimal action is
credited, not only the expert's. Layers, cheapest first: parse, applicability (the failed precondition is
the reason), identity with the expert's action or its successor state, goal reached, then h* of both states
from the problem's exact table (symmetry-reduced breadth-first search, see ``statespace``), else budgeted A*.

When h* cannot be computed within the budget the verdict is undecided (``Verdict.undecided_because``, reason
``budget_exhausted: ...``): the candidate was not judged, so the profiler leaves it out of a state's rewards
and ``pivotgym check`` reports it, never as a wrong action.

Both verifiers read a reply with :meth:`PlanningProblem.parse` from the state of the turn: exactly one
action per reply (several different actions are rejected as ``multiple_actions``), and left-out trailing
arguments are filled in when exactly one applicable completion fits, so they accept the same replies.

``planning/exact`` (ablation): the candidate must name the expert's ground action (format-lenient).
"""

from __future__ import annotations

import math
import threading
from typing import Any

from pivotgym import Verdict, VerifyContext
from pivotgym_planning.env import PlanningEnv
from pivotgym_planning.model import ActionError, PlanningProblem
from pivotgym_planning.search import DEFAULT_MAX_EXPANSIONS, OptimalCost
from pivotgym_planning.statespace import DEFAULT_MAX_STATES


class OptimalActionVerifier:
    """Credits any applicable action that preserves the optimal cost to the goal (see module docstring).

    ``use_cache=False`` recomputes h* by A* for every verification (the benchmark's baseline). With the
    cache, problems with at most ``table_limit`` reachable states up to symmetry get an exact h* table on
    first use; larger ones use A* per new state, seeded with the h* values cached so far.
    """

    name = "planning/optimal"
    version = "2"

    def __init__(
        self,
        *,
        max_expansions: int = DEFAULT_MAX_EXPANSIONS,
        use_cache: bool = True,
        table_limit: int = DEFAULT_MAX_STATES,
    ) -> None:
        self.max_expansions = max_expansions
        self.use_cache = use_cache
        self.table_limit = table_limit
        self._oracles: dict[str, OptimalCost] = {}
        self._lock = threading.Lock()

    def oracle(self, problem: PlanningProblem) -> OptimalCost:
        """The h* oracle of ``problem`` (one per problem, holding its per-state cache)."""
        with self._lock:
            if problem.key not in self._oracles:
                self._oracles[problem.key] = OptimalCost(
                    problem.search_task(),
                    self.max_expansions,
                    use_cache=self.use_cache,
                    table_limit=self.table_limit,
                    root=problem.init,
                )
            return self._oracles[problem.key]

    def verify(self, context: VerifyContext, candidate: str) -> Verdict:
        env = context.env()
        if not isinstance(env, PlanningEnv) or env.problem is None:
            return Verdict.fail("not_a_planning_env")
        problem = env.problem
        if env.done:
            return Verdict.fail("episode_over: the episode had ended before this turn")
        state = env.state
        try:
            expert = problem.parse(context.expert_text, state)
            expert_next = problem.apply(state, expert)
        except ActionError as exc:
            return Verdict.fail(f"bad_expert: the expert's action is not executable here ({exc})")
        components: dict[str, Any] = {"expert": expert.text}
        try:
            action = problem.parse(candidate, state)
        except ActionError as exc:
            return Verdict.fail(f"{exc.code}: {exc}", layer="parse", **components)
        components.update(action=action.text, layer="applicability")
        try:
            nxt = problem.apply(state, action)
        except ActionError as exc:
            return Verdict.fail(f"{exc.code}: {exc}", missing=exc.details.get("missing", []), **components)
        components["applicable"] = True
        if action.text == expert.text:
            return Verdict.ok("expert_action", **{**components, "layer": "identity"})
        if nxt == expert_next:
            return Verdict.ok(
                "same_successor: same resulting state as the expert's action", **{**components, "layer": "identity"}
            )
        if problem.goal_reached(nxt):
            return Verdict.ok("reaches_goal", **{**components, "layer": "goal"})
        oracle = self.oracle(problem)
        before, after = oracle(state), oracle(nxt)
        components.update(layer="optimal_cost", h_star_before=_num(before), h_star_after=_num(after))
        if before is None or after is None:
            return Verdict.undecided_because(
                f"budget_exhausted: h* unknown (the state space has more than {self.table_limit} states up to "
                f"symmetry and A* exceeded {self.max_expansions} expansions); the candidate was not judged",
                **components,
            )
        if math.isinf(after):
            return Verdict.fail("dead_end: the goal is unreachable after this action", **components)
        if after == before - 1:
            return Verdict.ok(f"optimal_action: h* drops from {before} to {after}", **components)
        return Verdict.fail(f"suboptimal: h* after is {after}, an optimal action leads to {before - 1}", **components)


class PlanningExactVerifier:
    """Reward 1 only for the expert's ground action, compared after lenient parsing (case, format)."""

    name = "planning/exact"
    version = "2"

    def verify(self, context: VerifyContext, candidate: str) -> Verdict:
        env = context.env()
        if not isinstance(env, PlanningEnv) or env.problem is None:
            return Verdict.fail("not_a_planning_env")
        problem = env.problem
        try:  # parsed from the turn's state, as planning/optimal and the env do (short forms alike)
            expected = problem.parse(context.expert_text, env.state).text
            got = problem.parse(candidate, env.state).text
        except ActionError as exc:
            return Verdict.fail(f"{exc.code}: {exc}")
        if got == expected:
            return Verdict.ok("exact_action", action=got)
        return Verdict.fail("different_action", action=got, expert=expected)


def _num(value: float | None) -> int | str | None:
    """h* for JSON components: an int, ``"inf"`` for a dead end, ``None`` when unknown."""
    if value is None:
        return None
    return "inf" if math.isinf(value) else int(value)
