"""Search on pyperplan's grounded STRIPS tasks: optimal A*, greedy best-first, and a cached h* oracle.

pyperplan parses and grounds; its search functions have no budget and order successors by hash, so we run
our own small A*/GBF loops over its operators, with a deterministic successor order (operators sorted by
name) and an *expansion* budget (deterministic, unlike a wall-clock limit, so verdicts never depend on how
busy the machine is). Heuristics: a goal-count bound (admissible, cheap; the default for A*), pyperplan's LM-cut
(admissible, informed, slow in pure Python) and pyperplan's hFF (for GBF).
"""

from __future__ import annotations

import heapq
import math
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

State = frozenset  # a frozenset of fact strings such as "(on a b)"

#: default expansion budget of one search (the ceiling a shipped problem's optimal solve must fit in)
DEFAULT_MAX_EXPANSIONS = 100_000
#: A* expansions tried before the exact h* table is built (small problems never need the table)
PRE_TABLE_EXPANSIONS = 5_000


class _Node:
    """The minimal node pyperplan's heuristics read (they only look at ``.state``)."""

    __slots__ = ("state",)

    def __init__(self, state: State) -> None:
        self.state = state


@dataclass
class SearchResult:
    """``status`` is ``"solved"``, ``"unsolvable"`` (search space exhausted) or ``"budget"``."""

    status: str
    plan: list[str] | None
    expansions: int
    #: optimal cost when solved; ``len(plan)`` unless the search stopped at a state of known h*, in which
    #: case ``plan`` is the optimal prefix up to that state
    cost: float | None = None

    @property
    def solved(self) -> bool:
        return self.status == "solved"


class SearchTask:
    """A grounded, relevance-pruned STRIPS task (from pyperplan) ready for repeated searches.

    States given to it may carry facts it does not model (statics, irrelevant facts): :meth:`project`
    keeps only the facts that matter, so equal projections share cache entries.
    """

    def __init__(self, task: Any) -> None:
        self.task = task
        self.operators = sorted(task.operators, key=lambda op: op.name)
        self.goals: frozenset[str] = frozenset(task.goals)
        relevant: set[str] = set(self.goals)
        for op in self.operators:
            relevant |= op.preconditions | op.add_effects | op.del_effects
        self.relevant = frozenset(relevant)
        # successor index: each operator filed under one of its preconditions (checked first)
        self._by_fact: dict[str, list[int]] = {}
        self._no_pre: list[int] = []
        for i, op in enumerate(self.operators):
            if op.preconditions:
                self._by_fact.setdefault(min(op.preconditions), []).append(i)
            else:
                self._no_pre.append(i)
        self._lmcut: Any = None
        self._hff: Any = None
        self._tables: dict[tuple[State, int], Any] = {}
        self._tables_lock = threading.Lock()
        # the most goal facts one operator can add: |unmet goals| / this is a lower bound on plan length
        self._max_goal_adds = max([len(op.add_effects & self.goals) for op in self.operators] + [1])

    def exact_table(self, root: Iterable[str], max_states: int) -> Any:
        """The exact h* table of the states reachable from ``root`` (built once per root and cap, shared
        by every verifier and the env of this problem in the process)."""
        from pivotgym_planning.statespace import ExactTable

        key = (self.project(root), max_states)
        with self._tables_lock:
            if key not in self._tables:
                self._tables[key] = ExactTable(self, key[0], max_states=max_states)
            return self._tables[key]

    def project(self, state: Iterable[str]) -> State:
        return frozenset(state) & self.relevant

    def successors(self, state: State) -> list[tuple[Any, State]]:
        """Applicable operators and their successor states, in operator-name order."""
        idx = list(self._no_pre)
        for fact in state:
            idx.extend(self._by_fact.get(fact, ()))
        idx.sort()
        out = []
        for i in idx:
            op = self.operators[i]
            if op.preconditions <= state:
                out.append((op, (state - op.del_effects) | op.add_effects))
        return out

    def goal_count(self, state: State) -> float:
        """Admissible and almost free: unmet goals divided by the most goals any one operator adds."""
        return -(-len(self.goals - state) // self._max_goal_adds)

    def lmcut(self, state: State) -> float:
        if self._lmcut is None:
            from pyperplan.heuristics.lm_cut import LmCutHeuristic

            self._lmcut = LmCutHeuristic(self.task)
        return self._lmcut(_Node(state))

    def hff(self, state: State) -> float:
        if self._hff is None:
            from pyperplan.heuristics.relaxation import hFFHeuristic

            self._hff = hFFHeuristic(self.task)
        return self._hff(_Node(state))


HEURISTICS = ("goalcount", "lmcut", "blind")


def astar(
    task: SearchTask,
    start: State,
    *,
    heuristic: str = "goalcount",
    max_expansions: int = DEFAULT_MAX_EXPANSIONS,
    deadline: float | None = None,
    exact: dict[State, float] | None = None,
) -> SearchResult:
    """Optimal (unit-cost) A* from ``start`` (already projected) with an admissible heuristic.

    ``goalcount`` (default) costs microseconds per state; pyperplan's ``lmcut`` is far better informed but
    costs milliseconds per state in pure Python, which on the small problems shipped here is the slower
    choice overall (measured: depot pfile1 9 ms/state for LM-cut vs 20 us to generate successors).

    ``exact`` maps states to known h* values: they serve as a perfect heuristic, dead ends are pruned, and
    the search stops when it pops such a state (its f = g + h* is then the optimal cost).
    """
    if heuristic not in HEURISTICS:
        raise ValueError(f"heuristic must be one of {HEURISTICS}, got {heuristic!r}")
    h = {"goalcount": task.goal_count, "lmcut": task.lmcut, "blind": lambda _s: 0}[heuristic]
    if exact:
        base = h

        def h(state: State) -> float:
            known = exact.get(state)
            return base(state) if known is None else known

    return _best_first(task, start, h, weight_g=1, max_expansions=max_expansions, deadline=deadline, exact=exact)


def greedy(
    task: SearchTask, start: State, *, max_expansions: int = DEFAULT_MAX_EXPANSIONS, deadline: float | None = None
) -> SearchResult:
    """Greedy best-first search with hFF: fast, not optimal (the fallback for large problems)."""
    return _best_first(task, start, task.hff, weight_g=0, max_expansions=max_expansions, deadline=deadline)


def _best_first(
    task: SearchTask,
    start: State,
    h,
    *,
    weight_g: int,
    max_expansions: int,
    deadline: float | None = None,
    exact: dict[State, float] | None = None,
) -> SearchResult:
    """Best-first search on f = weight_g * g + h; ``deadline`` (a ``time.monotonic()`` value) is only for
    offline tools: verdicts use the deterministic expansion budget alone."""
    h0 = h(start)
    if math.isinf(h0):
        return SearchResult("unsolvable", None, 0)
    tie = 0
    # entries carry g so that a state reached again more cheaply is re-expanded (LM-cut need not be
    # consistent; re-opening keeps A* optimal with any admissible heuristic)
    open_list: list[tuple[float, float, int, int, State]] = [(h0, h0, tie, 0, start)]
    best_g: dict[State, int] = {start: 0}
    parent: dict[State, tuple[State, str] | None] = {start: None}
    expansions = 0
    while open_list:
        _f, _h, _t, g_state, state = heapq.heappop(open_list)
        if g_state != best_g[state]:
            continue  # a stale entry: the state was reached more cheaply since
        if task.goals <= state:
            return SearchResult("solved", _extract(parent, state), expansions, cost=g_state)
        if exact and state in exact:  # f = g + h* exactly, and no open entry has a smaller f
            return SearchResult("solved", _extract(parent, state), expansions, cost=g_state + exact[state])
        if expansions >= max_expansions or (
            deadline is not None and expansions % 256 == 0 and time.monotonic() > deadline
        ):
            return SearchResult("budget", None, expansions)
        expansions += 1
        g = g_state + 1
        for op, succ in task.successors(state):
            if best_g.get(succ, math.inf) <= g:
                continue
            hs = h(succ)
            if math.isinf(hs):
                continue
            best_g[succ] = g
            parent[succ] = (state, op.name)
            tie += 1
            heapq.heappush(open_list, (weight_g * g + hs, hs, tie, g, succ))
    return SearchResult("unsolvable", None, expansions)


def _extract(parent: dict[State, tuple[State, str] | None], state: State) -> list[str]:
    plan: list[str] = []
    link = parent[state]
    while link is not None:
        state, name = link
        plan.append(name)
        link = parent[state]
    return plan[::-1]


@dataclass
class OptimalCost:
    """h*(s): the optimal plan length from a state, cached per (projected) state.

    Each query first runs A*: a solved search caches every state on the plan it found (a suffix of an
    optimal plan is optimal), and later searches use the cached values as a perfect heuristic and stop at
    the first cached state they pop, so states near expert paths are cheap. With the cache on, the first
    query whose A* exceeds ``PRE_TABLE_EXPANSIONS`` builds an exact table of every state reachable from
    ``root`` up to symmetry (:class:`pivotgym_planning.statespace.ExactTable`: bit-packed states,
    interchangeable objects merged, one backward breadth-first pass), if the quotient space has at most
    ``table_limit`` states; from then on the table answers first. States it does not hold get A* with the
    full budget. Every step is deterministic (expansion and state counts, never a clock).
    ``None`` means unknown (the A* ran out of its expansion budget); ``math.inf`` means a dead end.
    """

    task: SearchTask
    max_expansions: int = DEFAULT_MAX_EXPANSIONS
    heuristic: str = "goalcount"
    use_cache: bool = True
    cache: dict[State, float] = field(default_factory=dict)
    searches: int = 0
    #: the most canonical states of the exact table (0 disables it: A* per query)
    table_limit: int = 0
    root: State | None = None
    #: the exact table, once tried (``table.complete`` says whether it was built)
    table: Any = None
    _ops: dict[str, Any] | None = field(default=None, repr=False)

    def __call__(self, state: Iterable[str]) -> float | None:
        start = self.task.project(state)
        if self.table is not None and self.table.complete:
            known = self.table.lookup(start)
            if known is not None:
                return known
        if self.use_cache and start in self.cache:
            return self.cache[start]
        if self.task.goals <= start:
            return 0
        self.searches += 1
        may_build = self.use_cache and self.table is None and self.table_limit > 0
        # A* first (fast near cached plans); when it runs out of a small budget, build the table once
        budget = min(self.max_expansions, PRE_TABLE_EXPANSIONS) if may_build else self.max_expansions
        result = astar(
            self.task,
            start,
            heuristic=self.heuristic,
            max_expansions=budget,
            exact=self.cache if self.use_cache else None,
        )
        if result.status == "budget" and may_build:
            self.table = self.task.exact_table(self.root if self.root is not None else start, self.table_limit)
            known = self.table.lookup(start) if self.table.complete else None
            if known is not None:
                return known
            if budget < self.max_expansions:
                result = astar(
                    self.task, start, heuristic=self.heuristic, max_expansions=self.max_expansions, exact=self.cache
                )
        if result.status == "budget":
            return None
        if result.status == "unsolvable":
            if self.use_cache:
                self.cache[start] = math.inf
            return math.inf
        plan, cost = result.plan or [], result.cost if result.cost is not None else len(result.plan or [])
        if self.use_cache:
            if self._ops is None:
                self._ops = {op.name: op for op in self.task.operators}
            s = start
            for i, name in enumerate(plan):
                self.cache.setdefault(s, cost - i)
                op = self._ops[name]
                s = (s - op.del_effects) | op.add_effects
            self.cache.setdefault(s, cost - len(plan))
        return cost
