"""Which pddlgym problems each environment serves, and why some are left out.

A problem is shipped only if, when the manifest (``data/manifest.json``) was built by
``python -m pivotgym_planning.catalog``, optimal A* solved it within the budget below or the exact h* table
(symmetry-reduced breadth-first search, :mod:`pivotgym_planning.statespace`) was built within its time
limit, and its optimal plan is short enough for an episode. The verifier needs h* from arbitrary states of
an episode, so a problem whose h* is slow to get would make every verification slow; those are filtered out,
and the manifest records each one with its status (``budget``: neither finished in budget; ``too_long``;
``error``: pyperplan cannot parse it) so the choice is visible. Reading the manifest is a single small JSON
load: nothing is solved at import.
"""

from __future__ import annotations

import argparse
import functools
import json
import multiprocessing as mp
import time
from pathlib import Path
from typing import Any

from pivotgym_planning.pddl_files import pddl_root, problem_files

#: env name -> pddlgym family (problem folders NAME/ for train, NAME_test/ for test)
TRAIN_FAMILIES: dict[str, str] = {
    "blocks": "blocks",
    "gripper": "gripper",
    "hanoi": "hanoi",
    "depot": "depot",
    "logistics": "manylogistics",
    "miconic": "manymiconic",
}
#: held-out families: envs of their own, and the ``ood`` split of every training env
#: (pddlgym's tireworld, hiking, rearrangement, travel, sokoban, ... do not parse with pyperplan: probabilistic
#: effects, negative preconditions, unsupported :init syntax)
OOD_FAMILIES: dict[str, str] = {
    "newspapers": "newspapers",
    "spanner": "spannerlearning",
    "rescue": "searchandrescue_level1",
    "maze": "maze",
    "ferry": "manyferry",
}
#: the optimal solve of a shipped problem fits in this many A* expansions and seconds
SOLVE_MAX_EXPANSIONS = 30_000
SOLVE_MAX_SECONDS = 5.0
#: when A* runs out of budget: the exact h* table must be built within this many seconds
TABLE_MAX_SECONDS = 20.0
#: longest optimal plan shipped (episodes get a step limit of a few times this, at most 120 steps)
MAX_PLAN_LENGTH = 48
#: at most this many problems are considered per folder (pddlgym folders are ordered by size)
MAX_PROBLEMS_PER_FOLDER = 40

MANIFEST = Path(__file__).parent / "data" / "manifest.json"


@functools.lru_cache(maxsize=1)
def manifest() -> dict[str, Any]:
    """The recorded solve results of every considered problem, keyed ``folder/stem``."""
    if not MANIFEST.exists():
        return {"criteria": {}, "problems": {}}
    return json.loads(MANIFEST.read_text())


def shipped(folder: str) -> list[tuple[str, dict[str, Any]]]:
    """(filename, manifest entry) of the problems of ``folder`` that pass the criteria, in file order."""
    entries = manifest()["problems"]
    out = []
    for path in problem_files(folder)[:MAX_PROBLEMS_PER_FOLDER]:
        entry = entries.get(f"{folder}/{path.stem}")
        if entry and entry.get("status") == "solved" and entry.get("length", 10**9) <= MAX_PLAN_LENGTH:
            out.append((path.name, entry))
    return out


def family_splits(family: str) -> dict[str, list[tuple[str, str, dict[str, Any]]]]:
    """``{"train": [...], "test": [...]}`` of ``(folder, filename, entry)`` for one family.

    ``train`` comes from ``NAME/`` and ``test`` from ``NAME_test/``. pddlgym's ``_test`` folders of depot,
    manylogistics and manymiconic hold only large problems (pyperplan alone needs 10-20 s to ground one, and
    none is solved optimally within the budget); for such a family every third shipped ``NAME/`` problem
    (and at least one) is held out of ``train`` as its test set instead, marked ``held_out`` in the task.
    """
    train = [(family, name, entry) for name, entry in shipped(family)]
    test = [(f"{family}_test", name, entry) for name, entry in shipped(f"{family}_test")]
    if not test and len(train) >= 2:
        held = set(range(2, len(train), 3)) or {len(train) - 1}
        test = [item for i, item in enumerate(train) if i in held]
        train = [item for i, item in enumerate(train) if i not in held]
    return {"train": train, "test": test}


# ---------------------------------------------------------------------------- building the manifest
def _solve_one(folder: str, filename: str) -> dict[str, Any]:
    from pivotgym_planning.model import load_problem
    from pivotgym_planning.search import astar

    start = time.monotonic()
    try:
        problem = load_problem(folder, filename)
        task = problem.search_task()
        result = astar(
            task, task.project(problem.init), max_expansions=SOLVE_MAX_EXPANSIONS, deadline=start + SOLVE_MAX_SECONDS
        )
    except Exception as exc:
        return {"status": "error", "error": f"{type(exc).__name__}: {str(exc)[:200]}"}
    entry: dict[str, Any] = {
        "status": result.status,
        "expansions": result.expansions,
        "seconds": round(time.monotonic() - start, 3),
    }
    length = len(result.plan) if result.plan is not None else None
    if result.status == "budget":
        from pivotgym_planning.statespace import ExactTable

        table = ExactTable(task, problem.init, deadline_s=TABLE_MAX_SECONDS)
        entry["table_states"] = table.stats.states
        if table.complete:
            h = table.lookup(problem.init)
            if h is not None and h != float("inf"):
                entry.update(status="solved", method="exact_table", length=int(h))
                length = int(h)
        entry["seconds"] = round(time.monotonic() - start, 3)
    if length is not None:
        entry["length"] = length
        if length > MAX_PLAN_LENGTH:
            entry["status"] = "too_long"
    return entry


def build_manifest(families: list[str], out: Path = MANIFEST) -> dict[str, Any]:
    """Solve every considered problem of ``families`` (train and test folders) in a child process each
    (a hard timeout also covers slow grounding) and write the manifest."""
    from tqdm import tqdm

    data = manifest() if out == MANIFEST else {"problems": {}}
    problems = dict(data.get("problems", {}))
    jobs = [
        (folder, p.name)
        for fam in families
        for folder in (fam, f"{fam}_test")
        for p in problem_files(folder)[:MAX_PROBLEMS_PER_FOLDER]
    ]
    ctx = mp.get_context("spawn")
    pool = ctx.Pool(1)
    try:
        for folder, filename in tqdm(jobs, desc="solving", unit="problem"):
            key = f"{folder}/{Path(filename).stem}"
            pending = pool.apply_async(_solve_one, (folder, filename))
            try:
                problems[key] = pending.get(timeout=SOLVE_MAX_SECONDS * 3 + TABLE_MAX_SECONDS + 30)
            except mp.TimeoutError:  # stuck in grounding: record it and start a fresh worker
                problems[key] = {"status": "budget", "error": "grounding or search exceeded the time limit"}
                pool.terminate()
                pool = ctx.Pool(1)
    finally:
        pool.terminate()
    data = {
        "criteria": {
            "search": "A* (goal-count heuristic), else the exact h* table",
            "max_expansions": SOLVE_MAX_EXPANSIONS,
            "max_seconds": SOLVE_MAX_SECONDS,
            "table_max_seconds": TABLE_MAX_SECONDS,
            "max_plan_length": MAX_PLAN_LENGTH,
            "max_problems_per_folder": MAX_PROBLEMS_PER_FOLDER,
            "pddl_root": "pddlgym==0.0.7",
        },
        "problems": dict(sorted(problems.items())),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1) + "\n")
    manifest.cache_clear()
    return data


def summary() -> dict[str, dict[str, int]]:
    """Per folder: how many problems have each status (``solved`` ones longer than the cap count as
    ``too_long``)."""
    out: dict[str, dict[str, int]] = {}
    for key, entry in manifest()["problems"].items():
        folder = key.split("/", 1)[0]
        counts = out.setdefault(folder, {})
        counts[entry["status"]] = counts.get(entry["status"], 0) + 1
    return out


def main(argv: list[str] | None = None, prog: str | None = None) -> None:
    """``pivotgym planning manifest`` (and ``python -m pivotgym_planning.catalog``)."""
    parser = argparse.ArgumentParser(prog=prog, description="Rebuild the planning plugin's problem manifest.")
    parser.add_argument("families", nargs="*", help="pddlgym families (default: all train and OOD families)")
    parser.add_argument("--all-parsable", action="store_true", help="try every pddlgym family")
    args = parser.parse_args(argv)
    families = args.families or [*TRAIN_FAMILIES.values(), *OOD_FAMILIES.values()]
    if args.all_parsable:
        families = sorted({p.stem for p in pddl_root().glob("*.pddl")})
    build_manifest(families)
    print(json.dumps(summary(), indent=1))


if __name__ == "__main__":
    main()
