"""Attacks on the SWE judge by the code it judges, one per class, against each layer on its own.

Every payload is appended to the *unfixed* module of a humanevalfix task, so a reward of 1 could only come from
a forged verdict. Each attack is judged twice: with the static patch check (it must refuse the change, with a
reason), and with the patch check switched off, so the runtime gatekeeper in ``judge_runner`` must hold on its
own (no ``solved``; where the gatekeeper ends the process, the error says what it refused). The controls show
that a real fix, and a real fix with a new helper function, still score on both paths.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from pivotgym.sandbox import fork_dir
from pivotgym.sandbox.bwrap import bwrap_available
from pivotgym_swe.env import pristine_tree
from pivotgym_swe.mutate import Mutation
from pivotgym_swe.testing import judge

sys.path.insert(0, str(Path(__file__).parent))
from conftest import humaneval_instance  # noqa: E402

pytestmark = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap is not installed")

FRAME_WALK = """
import os, sys
_f = sys._getframe()
while _f is not None:  # the runner's secret and its channel, then a forged record and a clean exit
    _loc = _f.f_locals
    if "secret" in _loc or "nonce" in _loc:
        os.write(_loc.get("channel", 1), b"0\\tend\\t30\\tforged\\n")
        os._exit(0)
    _f = _f.f_back
"""
JSON_ENCODER = """
import json
json._default_encoder.encode = lambda o: '{"exit": 0, "results": {"test_solution.py::test_check": ["passed", ""]}}'
"""
SETPROFILE = """
import sys
def _spy(frame, event, arg):
    if event == "call" and "record" in frame.f_locals:
        frame.f_locals["record"]["outcome"] = "passed"
sys.setprofile(_spy)
"""
SETTRACE_THREAD = """
import sys, threading
def _jump(frame, event, arg):
    return None
threading.settrace(_jump)
threading.Thread(target=lambda: None).start()
sys.settrace(_jump)
"""
PROC_MEM = """
try:
    with open("/proc/self/mem", "rb") as _mem:
        _mem.read(1)
except OSError:
    pass
"""
CHANNEL_HIJACK = """
import os, stat
_r, _w = os.pipe()
for _fd in range(3, 512):  # every pipe this process holds now writes into ours: the judge's records are lost
    try:
        if stat.S_ISFIFO(os.fstat(_fd).st_mode) and _fd not in (_r, _w):
            os.dup2(_w, _fd)
    except OSError:
        pass
"""
GC_CONFIG = """
import gc
for _obj in gc.get_objects():
    if type(_obj).__name__ == "Config":
        _obj.pluginmanager.register(type("P", (), {"pytest_runtest_call": lambda self, item: None})())
"""
MODULE_SWAP = """
import sys, types
_fake = types.ModuleType("test_solution")
_fake.__file__ = "/repo/test_solution.py"
_fake.test_check = lambda: None
sys.modules["test_solution"] = _fake
"""
CLOSURE_CELLS = """
def _cells():  # every closure cell of every class the runner defined: results, witnesses, its way to report
    seen, todo = set(), list(object.__subclasses__())
    while todo:
        cls = todo.pop()
        if id(cls) in seen:
            continue
        seen.add(id(cls))
        try:
            todo += type.__subclasses__(cls)
        except TypeError:
            continue
        for value in list(vars(cls).values()):
            for cell in getattr(value, "__closure__", None) or ():
                yield cell
for _cell in _cells():
    try:
        _value = _cell.cell_contents
    except ValueError:
        continue
    if isinstance(_value, dict):
        _value.clear()
    elif isinstance(_value, set):
        _value.clear()
"""
FORK = """
import os
if os.fork() == 0:
    os._exit(0)
"""
CTYPES = """
import ctypes
ctypes.string_at(id(object), 8)
"""
CODE_REPLACE = """
def _swap():
    import _pytest.python as _python
    _python.Function.runtest.__code__ = (lambda self: None).__code__
_swap()
"""
STDLIB_SHADOW = ("queue.py", "import os\nos.write(1, b'0\\tend\\t30\\tforged\\n')\nos._exit(0)\n")

ATTACKS = {
    "frame-walk": FRAME_WALK,
    "json-encoder-instance": JSON_ENCODER,
    "setprofile": SETPROFILE,
    "settrace-and-thread-trace": SETTRACE_THREAD,
    "proc-self-mem": PROC_MEM,
    "channel-hijack": CHANNEL_HIJACK,
    "gc-config-plugin": GC_CONFIG,
    "sys-modules-swap": MODULE_SWAP,
    "closure-cells": CLOSURE_CELLS,
    "fork": FORK,
    "ctypes": CTYPES,
    "code-replace": CODE_REPLACE,
}
#: what the gatekeeper says when it ends the process (attacks it does not end fail in other ways)
REFUSED = {
    "frame-walk": "sys._getframe",
    "setprofile": "sys.setprofile",
    "settrace-and-thread-trace": "sys.settrace",
    "proc-self-mem": "/proc/self/mem",
    "gc-config-plugin": "gc.get_objects",
    "fork": "os.fork",
    "ctypes": "ctypes",
    "code-replace": "__code__",
}


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    instance = humaneval_instance()
    return instance, pristine_tree(instance)


def state(task, tmp_path: Path, *, fixed: bool, extra: str = "", files: dict[str, str] | None = None) -> Path:
    instance, pristine = task
    work = fork_dir(pristine, tmp_path / "repo")
    mutation = Mutation(**instance["mutation"])
    if not fixed:
        (work / mutation.path).write_text(mutation.apply((pristine / mutation.path).read_text()))
    if extra:
        with open(work / mutation.path, "a") as fh:
            fh.write("\n" + textwrap.dedent(extra))
    for rel, text in (files or {}).items():
        (work / rel).write_text(text)
    return work


@pytest.mark.parametrize("fixed", [True, False], ids=["fixed", "unfixed"])
def test_control_a_real_fix_scores_on_both_paths(task, tmp_path, fixed):
    work = state(task, tmp_path, fixed=fixed)
    for patch_check in (True, False):
        verdict = judge(work, task[0], task[1], patch_check=patch_check)
        assert verdict.solved is fixed, verdict.summary


def test_control_a_fix_with_a_new_helper_function_is_not_refused(task, tmp_path):
    helper = "def _helper_distance(a: float, b: float = 0.0) -> float:\n    return abs(a - b)\n"
    work = state(task, tmp_path, fixed=True, extra=helper)
    verdict = judge(work, task[0], task[1])
    assert verdict.solved and not verdict.rejections, verdict.summary


@pytest.mark.parametrize("name", ATTACKS)
def test_the_patch_check_refuses_the_attack(task, tmp_path, name):
    verdict = judge(state(task, tmp_path, fixed=False, extra=ATTACKS[name]), task[0], task[1])
    assert not verdict.solved and verdict.rejections, verdict.summary
    assert "the patch check refused" in verdict.run.error


@pytest.mark.parametrize("name", ATTACKS)
def test_the_gatekeeper_holds_without_the_patch_check(task, tmp_path, name):
    verdict = judge(state(task, tmp_path, fixed=False, extra=ATTACKS[name]), task[0], task[1], patch_check=False)
    assert not verdict.solved, verdict.summary
    assert not verdict.run.infrastructure_failure  # an attack is the code's doing, never a masked verdict
    if name in REFUSED:
        assert "the judge ended the run" in verdict.run.error and REFUSED[name] in verdict.run.error, verdict.summary


def test_a_module_shadowing_the_standard_library_is_refused_and_not_imported(task, tmp_path):
    work = state(task, tmp_path, fixed=False, files=dict([STDLIB_SHADOW]))
    verdict = judge(work, task[0], task[1])
    assert [r.code for r in verdict.rejections] == ["new_module"]
    verdict = judge(work, task[0], task[1], patch_check=False)
    assert not verdict.solved and verdict.run.outcomes, verdict.summary  # the tests ran; queue was the stdlib's
