"""Generated planning problems: uniformly random blocks-world states, random gripper problems, train, test
and warm-up splits of hundreds of problems, graded by optimal plan length.

Why: pddlgym ships five train and five test blocks problems, too few to tell methods apart, and blocks has
almost no equivalent actions. These generators give hundreds of problems per domain, deterministic by seed,
in a domain with few equivalent actions (blocks) and one with many (gripper's interchangeable balls and
grippers).

**Blocks world** (the pddlgym ``blocks`` domain, 4 operators and a robot). Initial and goal states are drawn
independently and *uniformly* over all states of ``n`` labelled blocks, by the method of Slaney and
Thiebaux's ``bwstates`` ("Blocks World revisited", Artificial Intelligence 125, 2001). A partial state is a
set of *grounded* towers (standing on the table) and *floating* towers (not yet placed); at the start every
block is a floating tower of its own. Let ``g(m, k)`` be the number of states that can be completed from
``m`` floating and ``k`` grounded towers: ``g(0, k) = 1`` and ``g(m + 1, k) = g(m, k + 1) + (m + k) g(m, k)``,
since the bottom of one chosen floating tower either goes on the table (it becomes grounded) or onto the top
of one of the ``m + k`` other towers (the two merge; the merged tower stays floating or grounded with its
lower part). ``g(n, 0)`` is the number of states (1, 3, 13, 73, 501, 4051, ... - sums of Lah numbers). Each
step draws an integer below ``g(m + 1, k)`` (exact big-integer ratios, no floating point) and takes the
table with probability ``g(m, k + 1) / g(m + 1, k)``, else each other tower top with probability
``g(m, k) / g(m + 1, k)``. Every final state arises from exactly one sequence of choices, and the
probabilities multiply to ``1 / g(n, 0)``: every state is equally likely. The goal lists every ``on`` and
``ontable`` fact of the goal state (a complete goal state, as in bwstates' problems).

**Gripper** (the pddlgym ``gripper`` domain: a robot with two grippers moving balls between rooms). A
problem has ``r`` rooms and ``n`` balls; the robot's room, each ball's initial room and each ball's goal room
are drawn independently and uniformly; both grippers start free. Balls with the same goal room are
interchangeable, and so are the two grippers, so many actions are equivalent (picking either of two such
balls, with either gripper).

**Difficulty and filtering.** Each draw picks its size (blocks ``n``; gripper ``n`` and ``r``) uniformly
from the domain's sizes, and every accepted problem is solved optimally with the plugin's own search
(:func:`pivotgym_planning.plans.optimal_plan`: A*, else the exact h* table; gripper reads the plan from the
exact table first, which its symmetries make small); its optimal plan length is its difficulty
(``optimal_length``). Draws whose optimal length is below ``min_length`` (e.g. the goal already holds) are
rejected, so the problems are uniform *given* their size and a nontrivial length.

**Canonical form and splits.** Two problems that differ only by renaming interchangeable objects are the
same problem. The canonical form of a problem (its ``(init, goal)`` pair) is:

* blocks: every block is renamed (any permutation of the blocks). The initial towers are put in an order
  (longest first; equal lengths in every order), blocks are numbered bottom to top tower after tower, and
  the form is (initial tower lengths, for each number the number of the block under it in the goal or
  ``-1`` for the table); the smallest form over the tower orders is canonical. It is invariant to renaming
  blocks, and two problems have the same form only if one is a renaming of the other.
* gripper: balls are renamed (any permutation), and so are the rooms; the grippers are both free and
  absent from the goal, so they carry nothing. The form is (number of rooms, the robot's room, the sorted
  list of (initial room, goal room) of the balls) under the room permutation that makes it smallest.

The SHA-256 of the form's text is the problem's ``canonical`` hash. A problem goes to ``test`` when that
hash is 0 modulo 3, to ``warmup`` (a small set for a format warm-up model) when it is 1 modulo 6, and to
``train`` otherwise, so the splits are disjoint *by construction*, for every seed and size (a problem of
one seed's test split can never be in another seed's train split), and a duplicate of an earlier problem
is skipped. Draws go on until every split is full; a split is a prefix of the same split with a larger
quota.

**Determinism and cache.** Everything follows from ``random.Random`` seeded with a hash of the domain,
generator version and seed, so a seed gives byte-identical problems. Results are cached as JSON under
``$PIVOTGYM_CACHE/planning/generated/`` (default ``~/.cache/pivotgym``), one file per split keyed by domain,
generator version, seed, split and size, written atomically (a temporary file, then a rename); loading one
split generates and solves only that split's problems.

``pivotgym planning generate --stats`` prints, per domain, the distribution of optimal lengths,
the mean number of legal actions at the held-out expert states, and the share of those states where the
functional verifier credits two or more distinct legal actions.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import os
import random
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pivotgym.errors import ConfigError

#: bump when the sampling, the PDDL text or the split rule changes: cached splits are keyed by it
GENERATOR_VERSION = 1

Towers = list[list[str]]  # towers bottom to top


# ---------------------------------------------------------------------------- blocks world (bwstates)
@functools.cache
def completions(floating: int, grounded: int) -> int:
    """``g(m, k)``: states that can be completed from ``floating`` floating and ``grounded`` grounded towers
    (the bwstates recurrence, see the module docstring)."""
    if floating == 0:
        return 1
    m = floating - 1
    return completions(m, grounded + 1) + (m + grounded) * completions(m, grounded)


def blocks_state_count(n: int) -> int:
    """The number of blocks-world states of ``n`` labelled blocks (1, 3, 13, 73, 501, 4051, ...)."""
    return completions(n, 0)


def sample_blocks_state(blocks: list[str], rng: random.Random) -> Towers:
    """A uniformly random state of ``blocks`` as towers (bottom to top), by bwstates' exact ratios.

    The floating tower placed next is always the first in a fixed order, so the choice sequence is a
    function of the final state; the towers are returned in the order they were grounded."""
    floating: Towers = [[b] for b in blocks]
    grounded: Towers = []
    while floating:
        tower = floating.pop(0)
        m, k = len(floating), len(grounded)
        draw = rng.randrange(completions(m + 1, k))
        to_table = completions(m, k + 1)
        if draw < to_table:
            grounded.append(tower)
        else:
            target = (floating + grounded)[(draw - to_table) // completions(m, k)]
            target.extend(tower)  # the tower goes on top of the target's top block
    return grounded


def blocks_facts(towers: Towers) -> list[str]:
    """The ``ontable``/``on``/``clear`` facts of a state, sorted."""
    facts = []
    for tower in towers:
        facts.append(f"(ontable {tower[0]})")
        facts.extend(f"(on {above} {below})" for below, above in zip(tower, tower[1:]))
        facts.append(f"(clear {tower[-1]})")
    return sorted(facts)


def blocks_pddl(name: str, blocks: list[str], init: Towers, goal: Towers) -> str:
    """Problem text for pddlgym's ``blocks`` domain (one robot; the goal is the complete goal state)."""
    goal_facts = [f for f in blocks_facts(goal) if not f.startswith("(clear")]
    return (
        f"(define (problem {name})\n  (:domain blocks)\n"
        f"  (:objects {' '.join(blocks)} - block robot - robot)\n"
        f"  (:init (handempty robot) {' '.join(blocks_facts(init))})\n"
        f"  (:goal (and {' '.join(goal_facts)})))\n"
    )


def blocks_canonical(init: Towers, goal: Towers) -> str:
    """The canonical text of a blocks problem, invariant to renaming blocks (see the module docstring)."""
    below_goal: dict[str, str | None] = {}
    for tower in goal:
        below_goal[tower[0]] = None
        below_goal.update({above: below for below, above in zip(tower, tower[1:])})
    ordered = sorted(init, key=len, reverse=True)
    groups = [list(g) for _l, g in itertools.groupby(ordered, key=len)]
    lengths = tuple(len(t) for t in ordered)
    best: tuple[int, ...] | None = None
    for arrangement in itertools.product(*(itertools.permutations(g) for g in groups)):
        order = [b for group in arrangement for tower in group for b in tower]
        number = {b: i for i, b in enumerate(order)}
        form = tuple(-1 if (under := below_goal[b]) is None else number[under] for b in order)
        if best is None or form < best:
            best = form
    return f"blocks|init={list(lengths)}|goal={list(best or ())}"


# ---------------------------------------------------------------------------- gripper
@dataclass(frozen=True)
class GripperSpec:
    """One gripper problem: room names, the robot's room, each ball's initial and goal room."""

    rooms: tuple[str, ...]
    robot: str
    balls: tuple[tuple[str, str, str], ...]  # (ball, initial room, goal room)


def sample_gripper(n_balls: int, n_rooms: int, rng: random.Random) -> GripperSpec:
    """Robot room, initial and goal rooms of every ball, each uniform and independent."""
    rooms = tuple(f"room{chr(ord('a') + i)}" for i in range(n_rooms))
    robot = rng.choice(rooms)
    balls = tuple((f"ball{i + 1}", rng.choice(rooms), rng.choice(rooms)) for i in range(n_balls))
    return GripperSpec(rooms, robot, balls)


def gripper_pddl(name: str, spec: GripperSpec) -> str:
    """Problem text for pddlgym's ``gripper`` domain (untyped: ``room``/``ball``/``gripper`` facts)."""
    balls = [b for b, _i, _g in spec.balls]
    init = (
        [f"(room {r})" for r in spec.rooms]
        + [f"(ball {b})" for b in balls]
        + ["(gripper left)", "(gripper right)", "(free left)", "(free right)", f"(at-robby {spec.robot})"]
        + [f"(at {b} {r})" for b, r, _g in spec.balls]
    )
    goal = [f"(at {b} {g})" for b, _i, g in spec.balls]
    return (
        f"(define (problem {name})\n  (:domain gripper-strips)\n"
        f"  (:objects {' '.join(spec.rooms)} {' '.join(balls)} left right)\n"
        f"  (:init {' '.join(init)})\n"
        f"  (:goal (and {' '.join(goal)})))\n"
    )


def gripper_canonical(spec: GripperSpec) -> str:
    """The canonical text of a gripper problem, invariant to renaming balls and rooms (module docstring)."""
    best: tuple[Any, ...] | None = None
    for perm in itertools.permutations(range(len(spec.rooms))):
        to = dict(zip(spec.rooms, perm))
        form = (to[spec.robot], tuple(sorted((to[i], to[g]) for _b, i, g in spec.balls)))
        if best is None or form < best:
            best = form
    assert best is not None
    return f"gripper|rooms={len(spec.rooms)}|robot={best[0]}|balls={[list(p) for p in best[1]]}"


# ---------------------------------------------------------------------------- domains
@dataclass(frozen=True)
class Draw:
    """One drawn problem before solving: its PDDL text, canonical text and size parameters."""

    problem_pddl: str
    canonical: str
    params: dict[str, int]


@dataclass(frozen=True)
class DomainSpec:
    """A generated domain: the pddlgym folder whose domain file it uses, how to draw one problem, and the
    shortest optimal plan accepted."""

    name: str
    folder: str
    draw: Callable[[random.Random, str], Draw]
    min_length: int
    description: str
    #: how the optimal plan is found: ``"astar"`` (:func:`pivotgym_planning.plans.optimal_plan`: A*, else the
    #: exact table) or ``"table"`` (the exact h* table first: fast where interchangeable objects shrink the
    #: state space, as in gripper; A* on a space without symmetry, like blocks, is faster)
    solver: str = "astar"


def _draw_blocks(rng: random.Random, name: str) -> Draw:
    n = rng.choice(BLOCKS_SIZES)
    blocks = [chr(ord("a") + i) for i in range(n)]
    init, goal = sample_blocks_state(blocks, rng), sample_blocks_state(blocks, rng)
    return Draw(blocks_pddl(name, blocks, init, goal), blocks_canonical(init, goal), {"blocks": n})


def _draw_gripper(rng: random.Random, name: str) -> Draw:
    n, r = rng.choice(GRIPPER_BALLS), rng.choice(GRIPPER_ROOMS)
    spec = sample_gripper(n, r, rng)
    return Draw(gripper_pddl(name, spec), gripper_canonical(spec), {"balls": n, "rooms": r})


#: blocks per problem (uniform); 6 blocks have 4,051 states, and A* solves them in well under a second
BLOCKS_SIZES = (3, 4, 5, 6)
#: balls and rooms per gripper problem (uniform)
GRIPPER_BALLS = (2, 3, 4, 5, 6)
GRIPPER_ROOMS = (2, 3)

DOMAINS: dict[str, DomainSpec] = {
    "blocks": DomainSpec(
        "blocks", "blocks", _draw_blocks, 2, "uniformly random initial and goal states (bwstates), 3-6 blocks"
    ),
    "gripper": DomainSpec(
        "gripper",
        "gripper",
        _draw_gripper,
        2,
        "random robot, ball and goal rooms; 2-6 balls, 2-3 rooms",
        solver="table",
    ),
}


def domain(name: str) -> DomainSpec:
    """The generated domain ``name`` (``blocks`` or ``gripper``)."""
    if name not in DOMAINS:
        raise ConfigError(
            f"unknown generated planning domain {name!r}", hint=f"use one of: {', '.join(sorted(DOMAINS))}"
        )
    return DOMAINS[name]


# ---------------------------------------------------------------------------- splits
@dataclass(frozen=True)
class GeneratedProblem:
    """One generated problem with its optimal plan (found by the plugin's own search)."""

    name: str
    domain: str
    folder: str
    problem_pddl: str
    canonical: str
    optimal_length: int
    plan: list[str]
    params: dict[str, int]


def canonical_hash(canonical: str) -> str:
    return hashlib.sha256(canonical.encode()).hexdigest()


#: the splits of a generated domain: ``warmup`` is a small set for a format warm-up model that must not see
#: the training problems
SPLITS = ("train", "test", "warmup")


def split_of_hash(digest: str) -> str:
    """The split of a problem, from its canonical hash (hex) alone: ``test`` when it is 0 modulo 3 (a third of
    all problems), ``warmup`` when it is 1 modulo 6 (a sixth), else ``train`` (a half). Disjoint splits by
    construction."""
    value = int(digest, 16)
    if value % 3 == 0:
        return "test"
    return "warmup" if value % 6 == 1 else "train"


def split_of(canonical: str) -> str:
    """The split of a problem with canonical text ``canonical`` (see :func:`split_of_hash`)."""
    return split_of_hash(canonical_hash(canonical))


def _rng(name: str, seed: int) -> random.Random:
    digest = hashlib.sha256(f"pivotgym-planning/{name}/v{GENERATOR_VERSION}/seed{seed}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def _solve(spec: DomainSpec, problem_pddl: str) -> list[str] | None:
    """An optimal plan by the plugin's own search (see :attr:`DomainSpec.solver`), None if none is found."""
    from pivotgym_planning.model import problem_from_text
    from pivotgym_planning.plans import optimal_plan
    from pivotgym_planning.statespace import DEFAULT_MAX_STATES

    problem = problem_from_text(spec.folder, problem_pddl)
    if spec.solver == "table":  # the verifier's oracle later reuses this very table (same root and cap)
        task = problem.search_task()
        table = task.exact_table(problem.init, DEFAULT_MAX_STATES)
        plan = table.plan(task.project(problem.init)) if table.complete else None
        if plan is not None:
            return list(plan)
    found = optimal_plan(problem, problem.init)
    return None if found is None else found[0]


def generate(
    name: str,
    seed: int = 0,
    n_train: int = 400,
    n_test: int = 200,
    n_warmup: int = 100,
    *,
    splits: tuple[str, ...] = SPLITS,
) -> dict[str, list[GeneratedProblem]]:
    """Generate the ``splits`` (default all: ``train``, ``test``, ``warmup``) of domain ``name`` (no cache;
    see :func:`generated_split`). Only the problems of the requested splits are solved, and each split is the
    same whichever other splits are generated with it, and a prefix of the same split with a larger quota."""
    spec = domain(name)
    rng = _rng(name, seed)
    sizes = {"train": n_train, "test": n_test, "warmup": n_warmup}
    unknown = [s for s in splits if s not in sizes]
    if unknown:
        raise ConfigError(f"{name}: unknown split(s) {unknown}", hint=f"generated splits are {', '.join(SPLITS)}")
    quotas = {s: sizes[s] for s in splits}
    out: dict[str, list[GeneratedProblem]] = {s: [] for s in splits}
    seen: set[str] = set()
    draws = 0
    while any(len(out[s]) < quotas[s] for s in out):
        draws += 1
        if draws > 100 * sum(quotas.values()) + 1000:
            got = ", ".join(f"{len(out[s])}/{quotas[s]} {s}" for s in out)
            raise ConfigError(
                f"{name}: only {got} distinct problems after {draws - 1} draws",
                hint="ask for fewer problems",
            )
        draw = spec.draw(rng, f"{name}-gen")
        if draw.canonical in seen:
            continue
        seen.add(draw.canonical)
        split = split_of(draw.canonical)
        if split not in quotas or len(out[split]) >= quotas[split]:
            continue
        plan = _solve(spec, draw.problem_pddl)
        if plan is None or len(plan) < spec.min_length:
            continue
        index = len(out[split])
        out[split].append(
            GeneratedProblem(
                name=f"{name}-gen/s{seed}/{split}/{index:04d}",
                domain=name,
                folder=spec.folder,
                problem_pddl=draw.problem_pddl,
                canonical=canonical_hash(draw.canonical),
                optimal_length=len(plan),
                plan=plan,
                params=draw.params,
            )
        )
    return out


def cache_path(name: str, split: str, seed: int, size: int) -> Path:
    """Where one split of (domain, generator version, seed, size) is cached."""
    from pivotgym import cache_root

    return cache_root() / "planning" / "generated" / f"{name}-g{GENERATOR_VERSION}-s{seed}-{split}{size}.json"


def to_json(splits: dict[str, list[GeneratedProblem]]) -> str:
    """Splits as canonical JSON text (sorted keys): equal splits give byte-identical text."""
    return json.dumps({s: [asdict(p) for p in problems] for s, problems in splits.items()}, sort_keys=True) + "\n"


@functools.lru_cache(maxsize=64)
def generated_split(name: str, split: str, seed: int = 0, size: int | None = None) -> list[GeneratedProblem]:
    """One split of domain ``name`` (``size`` problems; default 400 train, 200 test, 100 warmup), read from
    the on-disk cache or generated (only this split's problems are solved) and cached atomically."""
    size = DEFAULT_SIZES[split] if size is None and split in DEFAULT_SIZES else size
    if split not in DEFAULT_SIZES or size is None:
        raise ConfigError(f"{name}: unknown split {split!r}", hint=f"generated splits are {', '.join(SPLITS)}")
    path = cache_path(name, split, seed, size)
    if path.is_file():
        try:
            return [GeneratedProblem(**p) for p in json.loads(path.read_text())[split]]
        except (ValueError, KeyError, TypeError):
            pass  # a corrupt or foreign file: regenerate and replace it
    problems = generate(name, seed, **{f"n_{split}": size}, splits=(split,))[split]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")  # unique; umask permissions
    try:
        with open(tmp, "x") as fh:
            fh.write(to_json({split: problems}))
        os.replace(tmp, path)  # atomic: readers see the old file or the whole new one
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return problems


#: default split sizes
DEFAULT_SIZES = {"train": 400, "test": 200, "warmup": 100}


def generated_splits(
    name: str, seed: int = 0, n_train: int = 400, n_test: int = 200, n_warmup: int = 100
) -> dict[str, list[GeneratedProblem]]:
    """Every split of domain ``name`` (each through :func:`generated_split`, cached on disk)."""
    sizes = {"train": n_train, "test": n_test, "warmup": n_warmup}
    return {s: generated_split(name, s, seed, sizes[s]) for s in SPLITS}
