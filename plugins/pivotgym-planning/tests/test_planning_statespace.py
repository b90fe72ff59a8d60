"""The exact h* table: symmetry detection, canonical forms, and h* checked against independent methods
(a plain breadth-first table without symmetry, and pyperplan's own optimal A* with LM-cut)."""

import copy
import math
import random
import time

import pytest

from pivotgym_planning.model import load_problem
from pivotgym_planning.statespace import BitTask, ExactTable


def _walk(problem, table, steps, seed=0):
    """States of a random walk from the initial state (all reachable), as frozensets."""
    rng = random.Random(seed)
    state, out = problem.init, [problem.init]
    for _ in range(steps):
        actions = problem.applicable(state)
        if not actions:
            break
        state = problem.apply(state, rng.choice(actions))
        out.append(state)
    return out


def test_gripper_balls_and_grippers_are_interchangeable_rooms_are_not():
    task = load_problem("gripper", "prob01.pddl").search_task()
    classes = sorted(sorted(c.members) for c in BitTask(task).classes)
    assert classes == [["ball1", "ball2", "ball3", "ball4"], ["left", "right"]]
    # blocks: every block is named in the goal, so nothing may be merged
    assert BitTask(load_problem("blocks", "problem3.pddl").search_task()).classes == []


def test_canonical_form_is_idempotent_and_merges_symmetric_states():
    problem = load_problem("gripper", "prob01.pddl")
    bits = BitTask(problem.search_task())
    a = bits.encode(problem.apply(problem.init, problem.parse("(pick ball1 rooma left)")))
    b = bits.encode(problem.apply(problem.init, problem.parse("(pick ball3 rooma right)")))
    assert a != b and bits.canonical(a) == bits.canonical(b)
    assert bits.canonical(bits.canonical(a)) == bits.canonical(a)


@pytest.mark.parametrize(
    "folder,filename",
    [
        ("gripper", "prob01.pddl"),
        ("blocks", "problem3.pddl"),
        ("manylogistics", "problem0.pddl"),
        ("hanoi", "problem1.pddl"),
    ],
)
def test_symmetry_reduced_table_equals_the_plain_table_on_every_reachable_state(folder, filename):
    problem = load_problem(folder, filename)
    task = problem.search_task()
    reduced = ExactTable(task, problem.init)
    plain = ExactTable(task, problem.init, symmetry=False)
    assert reduced.complete and plain.complete and reduced.stats.states <= plain.stats.states
    for s, j in plain.index.items():  # every reachable state, not only canonical ones
        expected = int(plain.dist[j])
        assert reduced._h(s) == (math.inf if expected < 0 else expected)


@pytest.mark.parametrize(
    "folder,filename",
    [
        ("gripper", "prob01.pddl"),
        ("blocks", "problem1.pddl"),
        ("manylogistics", "problem12.pddl"),
        ("hanoi", "problem1.pddl"),
    ],
)
def test_h_star_matches_pyperplan_optimal_astar_from_random_states(folder, filename):
    """A different method: pyperplan's own A* with the admissible LM-cut heuristic, on its own task."""
    from pyperplan.heuristics.lm_cut import LmCutHeuristic
    from pyperplan.search import astar_search

    problem = load_problem(folder, filename)
    task = problem.search_task()
    table = ExactTable(task, problem.init)
    for state in _walk(problem, table, 6)[::2]:
        pyper = copy.copy(task.task)
        pyper.initial_state = task.project(state)
        plan = astar_search(pyper, LmCutHeuristic(pyper))
        assert plan is not None and table.lookup(state) == len(plan)


def test_plans_from_the_table_are_optimal_and_valid():
    problem = load_problem("gripper_test", "prob06.pddl")
    task = problem.search_task()
    table = task.exact_table(problem.init, 1_000_000)
    plan = table.plan(problem.init)
    assert len(plan) == table.lookup(problem.init) == 41  # 14 balls: 3 * 14 - 1
    state = problem.init
    for name in plan:
        state = problem.apply(state, problem.parse(name))
    assert problem.goal_reached(state)


def test_a_two_million_state_gripper_problem_gets_exact_h_star_in_seconds():
    """gripper_test/prob06: 14 balls, about 2M reachable states; the quotient has under a hundred."""
    problem = load_problem("gripper_test", "prob06.pddl")
    start = time.perf_counter()
    table = ExactTable(problem.search_task(), problem.init)
    assert table.complete and table.stats.states < 1000 and time.perf_counter() - start < 10
    # h* of a state where the robot carries two balls to room b: 3 trips of 2 balls done = 12 balls left
    state = problem.init
    for action in ("(pick ball1 rooma left)", "(pick ball2 rooma right)", "(move rooma roomb)"):
        state = problem.apply(state, problem.parse(action))
    assert table.lookup(state) == 41 - 3
    wasted = problem.apply(state, problem.parse("(move roomb rooma)"))  # back without dropping: 1 wasted
    assert table.lookup(wasted) == 41 - 3 + 1


def test_a_space_over_the_cap_is_reported_not_guessed():
    problem = load_problem("blocks", "problem3.pddl")
    table = ExactTable(problem.search_task(), problem.init, max_states=10)
    assert not table.complete and table.lookup(problem.init) is None
