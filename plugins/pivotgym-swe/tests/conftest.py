"""Fixtures of the SWE plugin tests: a tiny hand-made task set, so tests never depend on synthesis."""

from __future__ import annotations

from pathlib import Path

import pytest

from pivotgym.jsonl import write_jsonl
from pivotgym.sandbox import BwrapSandbox, DockerSandbox, Sandbox
from pivotgym.sandbox.bwrap import bwrap_available
from pivotgym.sandbox.docker import unavailable_reason
from pivotgym_swe.mutate import candidate_mutations
from pivotgym_swe.sources import humaneval_files
from pivotgym_swe.synth import fix_edit, unified_patch

requires_bwrap = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap is not installed")
#: why the docker backend cannot run here (no engine, no base image: `make docker`), or None
DOCKER_PROBLEM = unavailable_reason()


@pytest.fixture(params=["bwrap", pytest.param("docker", marks=pytest.mark.docker)])
def isolating_sandbox(request) -> Sandbox:
    """A fresh sandbox of each isolating backend the judge's guarantees must hold on, or a skip saying why that
    backend cannot run here (no bubblewrap; no Docker engine or base image: ``make docker``)."""
    if request.param == "bwrap":
        if not bwrap_available():
            pytest.skip("bubblewrap is not installed")
        return BwrapSandbox()
    if DOCKER_PROBLEM is not None:
        pytest.skip(f"docker backend: {DOCKER_PROBLEM}")
    return DockerSandbox()


def humaneval_instance(task_id: str = "HumanEval/0", operator: str = "flip_comparison") -> dict:
    clean = humaneval_files(task_id)["solution.py"]
    mutation = next(m for m in candidate_mutations("solution.py", clean) if m.operator == operator)
    return {
        "instance_id": f"fixture__{task_id.split('/')[1]}",
        "repo": task_id,
        "base_commit": None,
        "source": {"kind": "humaneval", "task_id": task_id},
        "split": "train",
        "module": "solution.py",
        "problem_statement": "has_close_elements is wrong.",
        "FAIL_TO_PASS": ["test_solution.py::test_check"],
        "PASS_TO_PASS": [],
        "test_files": ["test_solution.py"],
        "test_cmd": "python -m pytest -q -p no:cacheprovider test_solution.py",
        "deselect": [],
        "mutation": mutation.to_dict(),
        "fix": fix_edit(mutation, clean),
        "patch": unified_patch("solution.py", mutation.apply(clean), clean),
    }


@pytest.fixture(scope="session")
def tiny_tasks(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("swe-tasks") / "tiny.jsonl"
    test_row = dict(humaneval_instance("HumanEval/2", "flip_operator"), split="test", instance_id="fixture__2")
    write_jsonl(path, [humaneval_instance(), test_row])
    return path


@pytest.fixture()
def env(tiny_tasks):
    """The tiny task set's env on the default sandbox (bubblewrap; skipped where it is not installed)."""
    from pivotgym_swe.env import SWEEnv

    if not bwrap_available():
        pytest.skip("bubblewrap is not installed")

    e = SWEEnv("tiny", tasks_path=str(tiny_tasks))
    e.env_id = "swe/tiny-v0"
    yield e
    e.close()


@pytest.fixture()
def isolated_env(tiny_tasks, isolating_sandbox):
    """The tiny task set's env on each isolating backend (``isolating_sandbox``)."""
    from pivotgym_swe.env import SWEEnv

    e = SWEEnv("tiny", tasks_path=str(tiny_tasks), sandbox=isolating_sandbox)
    e.env_id = "swe/tiny-v0"
    yield e
    e.close()
