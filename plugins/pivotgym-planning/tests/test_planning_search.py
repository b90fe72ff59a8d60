"""Search: A* is optimal (checked against breadth-first search), pruning keeps h*, the oracle caches."""

import math

import pytest

from pivotgym_planning.model import load_problem
from pivotgym_planning.search import OptimalCost, SearchTask, _best_first, astar, greedy


@pytest.mark.parametrize(
    "folder,name",
    [("blocks", "problem3.pddl"), ("hanoi", "problem1.pddl"), ("gripper", "prob01.pddl"), ("depot", "pfile1.pddl")],
)
def test_astar_is_optimal_and_greedy_finds_a_plan(folder, name):
    problem = load_problem(folder, name)
    task = problem.search_task()
    start = task.project(problem.init)
    optimal = astar(task, start)
    blind = _best_first(task, start, lambda _s: 0, weight_g=1, max_expansions=10**6)
    assert optimal.solved and blind.solved and len(optimal.plan) == len(blind.plan)
    assert astar(task, start, heuristic="lmcut").plan is not None
    quick = greedy(task, start)
    assert quick.solved and len(quick.plan) >= len(optimal.plan)


def test_relevance_pruning_preserves_optimal_cost():
    from pyperplan.grounding import ground

    from pivotgym_planning.model import _pyperplan_parse

    problem = load_problem("depot", "pfile1.pddl")
    full = SearchTask(
        ground(_pyperplan_parse(problem.domain_text, problem.problem_text), remove_irrelevant_operators=False)
    )
    pruned = problem.search_task()
    assert len(pruned.operators) <= len(full.operators)
    assert len(astar(full, full.project(problem.init)).plan) == len(astar(pruned, pruned.project(problem.init)).plan)


def test_oracle_caches_the_plan_states_and_reports_budget():
    problem = load_problem("blocks", "problem3.pddl")
    oracle = OptimalCost(problem.search_task())
    h0 = oracle(problem.init)
    assert h0 == 8 and oracle.searches == 1 and len(oracle.cache) == 9
    assert oracle(problem.init) == 8 and oracle.searches == 1  # cached
    tiny = OptimalCost(problem.search_task(), max_expansions=1, use_cache=False)
    assert tiny(problem.init) is None


def test_dead_end_is_infinite():
    problem = load_problem("blocks", "problem1.pddl")
    task = problem.search_task()
    oracle = OptimalCost(task)
    # a state where the robot holds nothing and the hand is neither empty nor full: no action applies
    stuck = frozenset(f for f in problem.init if "handempty" not in f)
    assert math.isinf(oracle(stuck))


def test_exhaustive_table_matches_astar_on_reachable_states():
    import random

    problem = load_problem("blocks", "problem3.pddl")
    task = problem.search_task()
    table = OptimalCost(task, table_limit=100_000, root=problem.init)
    assert table(problem.init) == 8 and table.table is None  # A* suffices: no table is built
    big = load_problem("gripper_test", "prob06.pddl")  # ~2M states: A* runs out, the table answers
    oracle = OptimalCost(big.search_task(), table_limit=100_000, root=big.init)
    assert oracle(big.init) == 41 and oracle.table.complete and oracle.searches == 1
    plain = OptimalCost(task, use_cache=False)
    rng = random.Random(0)
    state = task.project(problem.init)
    for _ in range(30):  # a random walk: every state on it is reachable
        assert table(state) == plain(state)
        state = rng.choice(task.successors(state))[1]
    small = OptimalCost(task, table_limit=10, root=problem.init)
    assert small(problem.init) == 8 and small.searches == 1  # space too large for the table: A*
