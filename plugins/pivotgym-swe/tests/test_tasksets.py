"""The shipped task sets: sizes, schema, split by source module, a verified instance of each project, and the
contract checks on a registered env."""

from __future__ import annotations

import pytest

from pivotgym.checker import check_env
from pivotgym.sandbox import get_sandbox
from pivotgym.sandbox.bwrap import bwrap_available
from pivotgym_swe.plugin import SETS
from pivotgym_swe.sources import PROJECTS, SourceError, cache_root, repo_tree, sdist_path
from pivotgym_swe.synth import verify_instance
from pivotgym_swe.tasks import TASK_SETS, load_task_set, pristine_tree, task_file

requires_bwrap = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap is not installed")
FIELDS = {
    "instance_id",
    "repo",
    "source",
    "split",
    "module",
    "problem_statement",
    "FAIL_TO_PASS",
    "PASS_TO_PASS",
    "test_files",
    "test_cmd",
    "mutation",
    "fix",
    "patch",
}


def rows(name: str) -> tuple[dict, ...]:
    return load_task_set(str(task_file(name)))


def test_shipped_sets_are_large_enough_and_well_formed():
    totals = {"train": 0, "test": 0}
    for name in TASK_SETS:
        data = rows(name)
        ids = [r["instance_id"] for r in data]
        assert len(ids) == len(set(ids)), name
        for r in data:
            assert FIELDS <= set(r), (name, FIELDS - set(r))
            assert r["FAIL_TO_PASS"] and set(r["FAIL_TO_PASS"]).isdisjoint(r["PASS_TO_PASS"])
            assert r["mutation"]["path"] == r["module"] == r["fix"]["path"]
            totals[r["split"]] += 1
        modules = {
            s: {r["module"] if name != "humanevalfix" else r["repo"] for r in data if r["split"] == s}
            for s in ("train", "test")
        }
        assert modules["train"].isdisjoint(modules["test"]), f"{name}: a test bug sits in code seen in training"
    assert totals["train"] >= 40 and totals["test"] >= 15, totals
    assert {env_id.split("/")[1].removesuffix("-v0") for env_id in SETS} == set(TASK_SETS)


@pytest.mark.slow  # ≥ 5 s on 2 cores (make test-fast leaves it out)
@requires_bwrap
@pytest.mark.parametrize("name", ["toolz", "more-itertools"])
def test_a_shipped_instance_verifies_against_its_pinned_project(name):
    """Fails on the buggy tree, passes with the reference fix, on the pinned toolz wheel / the cached sdist."""
    instance = next(r for r in rows(name) if r["split"] == "test")
    try:
        pristine = pristine_tree(instance)
    except SourceError as exc:  # only the sdist needs the network, once
        pytest.skip(f"cannot prepare {name}: {exc}")
    assert verify_instance(instance, pristine, get_sandbox())


def test_sdist_is_fetched_on_first_use_then_cached(tmp_path, monkeypatch):
    """The first call downloads the sdist with pip (into the user's cache); a cache holding it is reused as is."""
    import shutil

    project = PROJECTS["more-itertools"]
    try:
        cached = sdist_path(project)  # downloads on a fresh machine (PyPI), else finds the cached file
    except SourceError as exc:
        pytest.skip(f"PyPI is not reachable here: {exc}")
    monkeypatch.setenv("PIVOTGYM_CACHE", str(tmp_path))
    (cache_root() / "sdists").mkdir(parents=True)
    copy = cache_root() / "sdists" / cached.name
    shutil.copy2(cached, copy)
    stamp = copy.stat().st_mtime_ns
    assert sdist_path(project) == copy and copy.stat().st_mtime_ns == stamp  # no second download
    tree = repo_tree(project)
    assert (tree / "more_itertools" / "more.py").is_file() and (tree / "tests" / "test_more.py").is_file()
    assert not (tree / "docs").exists()  # only the package and its tests are extracted


@pytest.mark.slow  # ≥ 5 s on 2 cores (make test-fast leaves it out)
@requires_bwrap
def test_check_env_passes_on_a_registered_swe_env():
    report = check_env("swe/humanevalfix-v0")
    assert report.ok, report.to_dict()
    assert {r.name for r in report.results if r.status == "pass"} >= {"tasks", "expert_replay", "verifier"}
