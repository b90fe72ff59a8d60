"""Attacks on the SWE judge by the code it judges, one per class, against each layer on its own.

Every payload is appended to the *unfixed* module of a humanevalfix task, so a reward of 1 could only come
from a forged verdict. The frame-walk, json-encoder, setprofile, gc-config, module-swap, closure-cells and
forked-child payloads are written against the previous judge (result file on /judge, nonce and outcomes in
the runner's locals): against it, each of them scored ``solved``. Each attack is judged twice: with the
static patch check (it must refuse the change, with a reason), and with the patch check switched off, so the
runtime gatekeeper in ``judge_runner`` must hold on its own (no ``solved``; where the gatekeeper ends the
process, the error says what it refused). The controls show that a real fix, and a real fix with a new
helper function, still score on both paths.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from pivotgym.sandbox import fork_dir
from pivotgym_swe.env import pristine_tree
from pivotgym_swe.mutate import Mutation
from pivotgym_swe.testing import judge

sys.path.insert(0, str(Path(__file__).parent))
from conftest import humaneval_instance

# every test that judges runs on each isolating backend (the ``isolating_sandbox`` fixture: bwrap, docker)

FRAME_WALK = """
import sys, os, json
_f = sys._getframe()
while _f is not None:
    _l = _f.f_locals
    if "nonce" in _l and "out" in _l and isinstance(_l["out"], int):
        rec = {"nonce": _l["nonce"], "exit": 0, "tampered": [],
               "results": {"test_solution.py::test_check": ["passed", ""]}}
        os.write(_l["out"], json.dumps(rec).encode()); os._exit(0)
    _f = _f.f_back
"""
JSON_ENCODER = """
import json
_enc = json._default_encoder
_orig = type(_enc).encode
def _forge(o):
    if isinstance(o, dict) and "nonce" in o:
        forged = {k: ["passed", ""] for k in o["results"]} or {"test_solution.py::test_check": ["passed", ""]}
        o = dict(o, exit=0, results=forged, tampered=[])
    return _orig(_enc, o)
_enc.encode = _forge
"""
SETPROFILE = """
import sys
def _spy(frame, event, arg):
    if event == "call" and frame.f_code.co_name == "dumps":
        obj = frame.f_locals.get("obj")
        if isinstance(obj, dict) and "nonce" in obj:
            obj["exit"] = 0; obj["tampered"] = []
            obj["results"] = {"test_solution.py::test_check": ["passed", ""]}
    return None
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
class _Noop:
    def pytest_runtest_call(self, item):
        item.runtest = lambda: None
    pytest_runtest_call.tryfirst = True
def _install():
    for o in gc.get_objects():
        if type(o).__name__ == "Config" and hasattr(o, "pluginmanager"):
            import pytest
            class _P:
                @pytest.hookimpl(tryfirst=True)
                def pytest_runtest_setup(self, item):
                    object.__setattr__(item, "runtest", lambda: None)
            o.pluginmanager.register(_P())
            return
_install()
"""
MODULE_SWAP = """
import sys, types
_fake = types.ModuleType("test_solution")
_fake.__file__ = "/repo/test_solution.py"
def test_check():
    pass
_fake.test_check = test_check
sys.modules["test_solution"] = _fake
"""
CLOSURE_CELLS = """
import threading, time
def _targets():
    out = []
    for cls in object.__subclasses__():
        if cls.__name__ == "Collect":
            for v in vars(cls).values():
                for cell in (getattr(v, "__closure__", None) or ()):
                    try: out.append(cell.cell_contents)
                    except ValueError: pass
    return out
def _loop():
    while True:
        for t in _targets():
            if isinstance(t, dict):
                for k in list(t): t[k] = ("passed", "")
            elif isinstance(t, set): t.clear()
        time.sleep(0.001)
threading.Thread(target=_loop, daemon=True).start()
"""
FORK = """
import os, json, time
if os.fork() == 0:
    for _ in range(4000):
        try:
            with open("/judge/result.json") as fh:
                rec = json.load(fh)
            rec.update(exit=0, tampered=[], results={k: ["passed", ""] for k in rec["results"]})
            with open("/judge/result.json", "w") as fh:
                json.dump(rec, fh)
            break
        except Exception:
            time.sleep(0.001)
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

# a signal handler receives the interrupted frame with no audited call; f_back and f_locals are not audited
# either, so it walks to the runner's frame and writes records with the runner's own writer
SIGNAL_FRAME = """
import signal as _sig, os as _os
def _forge(_signum, _frame):
    _f = _frame
    while _f is not None:
        _l = _f.f_locals
        if "emit" in _l and "sequence" in _l:
            _l["emit"]("test", "test_solution.py::test_check", "call", "passed", "")
            _l["emit"]("end", "0")
            _os._exit(0)
        _f = _f.f_back
_sig.signal(_sig.SIGALRM, _forge)
_sig.raise_signal(_sig.SIGALRM)
"""

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
    "forked-child": FORK,
    "ctypes": CTYPES,
    "code-replace": CODE_REPLACE,
    "signal-handler-frame": SIGNAL_FRAME,
}
#: what the gatekeeper says when it ends the process (attacks it does not end fail in other ways)
REFUSED = {
    "frame-walk": "sys._getframe",
    "setprofile": "sys.setprofile",
    "settrace-and-thread-trace": "sys.settrace",
    "proc-self-mem": "/proc/self/mem",
    "gc-config-plugin": "gc.get_objects",
    "forked-child": "os.fork",
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
def test_control_a_real_fix_scores_on_both_paths(task, tmp_path, fixed, isolating_sandbox):
    work = state(task, tmp_path, fixed=fixed)
    for patch_check in (True, False):
        verdict = judge(work, task[0], task[1], patch_check=patch_check, sandbox=isolating_sandbox)
        assert verdict.solved is fixed, verdict.summary


def test_control_a_fix_with_a_new_helper_function_is_not_refused(task, tmp_path, isolating_sandbox):
    helper = "def _helper_distance(a: float, b: float = 0.0) -> float:\n    return abs(a - b)\n"
    work = state(task, tmp_path, fixed=True, extra=helper)
    verdict = judge(work, task[0], task[1], sandbox=isolating_sandbox)
    assert verdict.solved and not verdict.rejections, verdict.summary


@pytest.mark.parametrize("name", ATTACKS)
def test_the_patch_check_refuses_the_attack(task, tmp_path, name, isolating_sandbox):
    verdict = judge(
        state(task, tmp_path, fixed=False, extra=ATTACKS[name]), task[0], task[1], sandbox=isolating_sandbox
    )
    assert not verdict.solved and verdict.rejections, verdict.summary
    assert "the patch check refused" in verdict.run.error


@pytest.mark.parametrize("name", ATTACKS)
def test_the_gatekeeper_holds_without_the_patch_check(task, tmp_path, name, isolating_sandbox):
    verdict = judge(
        state(task, tmp_path, fixed=False, extra=ATTACKS[name]),
        task[0],
        task[1],
        patch_check=False,
        sandbox=isolating_sandbox,
    )
    assert not verdict.solved, verdict.summary
    assert not verdict.run.infrastructure_failure  # an attack is the code's doing, never a masked verdict
    if name in REFUSED:
        assert "the judge ended the run" in verdict.run.error and REFUSED[name] in verdict.run.error, verdict.summary


def test_a_module_shadowing_the_standard_library_is_refused_and_not_imported(task, tmp_path, isolating_sandbox):
    work = state(task, tmp_path, fixed=False, files=dict([STDLIB_SHADOW]))
    verdict = judge(work, task[0], task[1], sandbox=isolating_sandbox)
    assert [r.code for r in verdict.rejections] == ["new_module"]
    verdict = judge(work, task[0], task[1], patch_check=False, sandbox=isolating_sandbox)
    assert not verdict.solved and verdict.run.outcomes, verdict.summary  # the tests ran; queue was the stdlib's


def test_a_signal_handler_cannot_reach_the_runner(task, tmp_path, isolating_sandbox):
    """Judged by the test layer alone (no patch check, no differential check): the handler's frame forged a
    passing record with the runner's own writer before the kernel refused installing signal handlers."""
    work = state(task, tmp_path, fixed=False, extra=SIGNAL_FRAME)
    verdict = judge(work, task[0], task[1], patch_check=False, differential=False, sandbox=isolating_sandbox)
    assert not verdict.solved and not verdict.run.outcomes.get("test_solution.py::test_check") == "passed"
    assert not verdict.run.infrastructure_failure, verdict.summary


# Other routes to a frame of the runner, tried against the kernel-confined judge (the signal route is closed):
# each would hand the payload the runner's record writer; each is refused by the gatekeeper, by name.
FORGE_FROM_LOCALS = """
def _forge_from(_l):
    if "emit" in _l and "sequence" in _l:
        _l["emit"]("test", "test_solution.py::test_check", "call", "passed", "")
        _l["emit"]("end", "0")
        __import__("os")._exit(0)
"""
FRAME_ROUTES = {
    "traceback-walk-stack": (
        "import traceback as _tb\nfor _f, _n in _tb.walk_stack(None):\n    _forge_from(_f.f_locals)\n",
        "sys._getframe",
    ),
    "logging-currentframe": (
        "import logging as _lg\n_f = _lg.currentframe()\nwhile _f is not None:\n"
        "    _forge_from(_f.f_locals)\n    _f = _f.f_back\n",
        "sys._getframe",
    ),
    "own-exception-traceback": (
        "try:\n    raise ValueError()\nexcept ValueError as _e:\n    _f = _e.__traceback__.tb_frame\n"
        "    while _f is not None:\n        _forge_from(_f.f_locals)\n        _f = _f.f_back\n",
        ".tb_frame",
    ),
    "thread-excepthook-traceback": (
        "import threading as _th\n_got = []\n_th.excepthook = lambda a: _got.append(a.exc_traceback)\n"
        "_t = _th.Thread(target=lambda: 1 / 0)\n_t.start()\n_t.join()\n_f = _got[0].tb_frame\n"
        "while _f is not None:\n    _forge_from(_f.f_locals)\n    _f = _f.f_back\n",
        ".tb_frame",
    ),
    "generator-frame": (
        "def _g():\n    yield 1\n_f = _g().gi_frame\nwhile _f is not None:\n"
        "    _forge_from(_f.f_locals)\n    _f = _f.f_back\n",
        ".gi_frame",
    ),
    "coroutine-frame": (
        "async def _c():\n    pass\n_co = _c()\n_f = _co.cr_frame\nwhile _f is not None:\n"
        "    _forge_from(_f.f_locals)\n    _f = _f.f_back\n",
        ".cr_frame",
    ),
}


@pytest.mark.parametrize("route", FRAME_ROUTES)
def test_other_routes_to_the_runners_frame_are_refused(task, tmp_path, route, isolating_sandbox):
    payload, evidence = FRAME_ROUTES[route]
    work = state(task, tmp_path, fixed=False, extra=FORGE_FROM_LOCALS + payload)
    verdict = judge(work, task[0], task[1], patch_check=False, differential=False, sandbox=isolating_sandbox)
    assert not verdict.solved, verdict.summary
    assert "the judge ended the run" in verdict.run.error and evidence in verdict.run.error, verdict.run.error


def test_a_faked_infrastructure_failure_is_judged_not_excused(task, tmp_path, isolating_sandbox):
    """Code that writes what a sandbox that could not fork writes, and exits before any record, would turn its
    0 into an undecided turn if the host believed it: pytest's fd capture keeps it from the host's stderr."""
    payload = 'import os as _o\n_o.write(2, b"Cannot fork\\nResource temporarily unavailable\\n")\n_o._exit(1)\n'
    work = state(task, tmp_path, fixed=False, extra=payload)
    verdict = judge(work, task[0], task[1], patch_check=False, sandbox=isolating_sandbox)
    assert not verdict.solved and not verdict.run.infrastructure_failure, verdict.run.error


# ------------------------------------------------------------------------------------------ code the check never saw
def utf7_state(task, tmp_path: Path) -> Path:
    """The unfixed module declared UTF-7, with a statement in a comment that UTF-7 decodes onto a line of its own
    (``+AAo-`` is a newline): a UTF-8 reader sees a comment, Python runs ``_ran = True`` at import."""
    instance, pristine = task
    work = state(task, tmp_path, fixed=False)
    module = work / Mutation(**instance["mutation"]).path
    text = module.read_text()
    assert "+" not in text
    module.write_text("# coding: utf-7\n" + text + "# note +AAo-_ran = True\n")
    return work


def test_the_patch_check_reads_the_source_as_python_decodes_it(task, tmp_path, isolating_sandbox):
    verdict = judge(utf7_state(task, tmp_path), task[0], task[1], sandbox=isolating_sandbox)
    assert [r.code for r in verdict.rejections] == ["encoding"], verdict.summary


def test_a_return_annotation_that_calls_code_is_refused(task, tmp_path, isolating_sandbox):
    """A helper called from the return annotation of an existing ``def`` runs when the module is imported."""
    instance, _ = task
    work = state(task, tmp_path, fixed=False)
    module = work / Mutation(**instance["mutation"]).path
    text = module.read_text().replace(") -> bool:", ") -> _at_import():", 1)
    assert "_at_import" in text
    module.write_text(text + "\n\ndef _at_import():\n    return bool\n")
    verdict = judge(work, task[0], task[1], sandbox=isolating_sandbox)
    assert [r.code for r in verdict.rejections] == ["module_level_code"], verdict.summary
    assert "has_close_elements" in verdict.rejections[0].message


# ------------------------------------------------------------------------------------------ the channel
def _records(key: bytes, *records: tuple[str, ...]) -> list[str]:
    """Lines as the runner writes them (sequence, kind, hex fields, keyed MAC)."""
    import hashlib

    lines = []
    for seq, (kind, *fields) in enumerate(records):
        body = "\t".join([str(seq), kind, *(f.encode().hex() for f in fields)])
        lines.append(body + "\t" + hashlib.blake2b(body.encode(), key=key, digest_size=16).hexdigest())
    return lines


def test_the_channel_takes_authentic_records_in_sequence():
    from pivotgym_swe.testing import read_channel

    key = b"k" * 32
    lines = _records(key, ("test", "t::a", "call", "passed", ""), ("end", "0"))
    channel = read_channel("\n".join(lines), key)
    assert channel.outcomes == {"t::a": "passed"} and channel.end == 0 and not channel.tampered


@pytest.mark.parametrize("how", ["wrong-key", "replayed", "reordered", "after-end", "plain-text"])
def test_the_channel_rejects_what_the_runner_did_not_write(how):
    from pivotgym_swe.testing import read_channel

    key = b"k" * 32
    failed, passed, end = _records(
        key, ("test", "t::a", "call", "failed", "boom"), ("test", "t::a", "call", "passed", ""), ("end", "0")
    )
    forged = {
        "wrong-key": [_records(b"x" * 32, ("test", "t::a", "call", "passed", ""), ("end", "0"))[0], failed, end],
        "replayed": [failed, failed, end],
        "reordered": [passed, failed, end],
        "after-end": [failed, end, _records(key, *[("x",)] * 3, ("test", "t::a", "call", "passed", ""))[3]],
        "plain-text": ["0\ttest\tt::a\tcall\tpassed", failed, end],
    }[how]
    channel = read_channel("\n".join(forged), key)
    assert channel.tampered, channel
    assert channel.outcomes.get("t::a") != "passed"


# a finder and loader planted at import time serve every later test module from edited source (assertions
# made vacuous); pytest's own rewriting never sees them. Against the previous judge this scored solved on
# a toolz task; the runner now compares every test function with its own compilation of the pristine file.
PLANTED_LOADER = """
import sys as _sys
from importlib.machinery import PathFinder as _PF, SourceFileLoader as _SFL
class _Loader(_SFL):
    def get_data(self, path):
        data = _SFL.get_data(self, path)
        return data.replace(b"assert ", b"assert True or ") if "test_" in path else data
class _Finder:
    def find_spec(self, name, path=None, target=None):
        if "test_" not in name:
            return None
        spec = _PF.find_spec(name, path)
        if spec is not None and str(spec.origin).endswith(".py"):
            spec.loader = _Loader(name, spec.origin)
        return spec
_sys.meta_path.insert(0, _Finder())
"""


# pytest's configuration is reachable from a module global (``_pytest.assertion.util._config``) once tests
# run: a plugin registered through it answers ``pytest_pyfunc_call`` for every later test without running it.
# This scored solved on a toolz task against the runner before hook implementations were checked.
PLUGIN_THROUGH_CONFIG = """
def _skip_all_tests():
    import threading as _t, time as _time
    import _pytest.assertion.util as _u
    class _Skip:
        def pytest_pyfunc_call(self, pyfuncitem):
            return True
    def _wait():
        for _ in range(20000):
            if getattr(_u, "_config", None) is not None:
                _u._config.pluginmanager.register(_Skip(), "skip-all")
                return
            _time.sleep(0.0005)
    _t.Thread(target=_wait, daemon=True).start()
_skip_all_tests()
"""


def toolz_state(tmp_path: Path, payload: str) -> tuple[Path, dict, Path]:
    """An unfixed toolz test-split task with ``payload`` appended to ``toolz/__init__.py``."""
    from pivotgym.jsonl import read_jsonl
    from pivotgym_swe.tasks import task_file

    instance = next(r for r in read_jsonl(task_file("toolz")) if r["split"] == "test")
    pristine = pristine_tree(instance)
    work = fork_dir(pristine, tmp_path / "repo")
    mutation = Mutation(**instance["mutation"])
    (work / mutation.path).write_text(mutation.apply((pristine / mutation.path).read_text()))
    init = work / "toolz" / "__init__.py"
    init.write_text(init.read_text() + payload)
    return work, instance, pristine


@pytest.mark.parametrize(
    ("payload", "evidence"),
    [(PLANTED_LOADER, "not the pristine test code"), (PLUGIN_THROUGH_CONFIG, "a hook implementation of")],
    ids=["planted-loader", "plugin-through-config"],
)
def test_attacks_on_later_test_modules_are_caught(tmp_path, payload, evidence, isolating_sandbox):
    work, instance, pristine = toolz_state(tmp_path, payload)
    assert judge(work, instance, pristine, sandbox=isolating_sandbox).rejections
    verdict = judge(work, instance, pristine, patch_check=False, sandbox=isolating_sandbox)
    assert not verdict.solved and any(evidence in t for t in verdict.run.tampered), verdict.summary


# ------------------------------------------------------------------------------------------ other episodes
def test_a_fix_scores_while_another_episode_holds_its_process_limit(task, tmp_path, isolating_sandbox):
    """Process limits are per run (a pids cgroup, a uid per run): one episode's fork-happy code cannot make a
    correct fix in another score 0, as it did when every sandbox shared one uid's RLIMIT_NPROC. On both isolating
    backends: bwrap (a pids cgroup and a uid per run) and docker (a container's pids limit and a uid per run)."""
    import threading
    import time

    from pivotgym.sandbox import Limits

    hog_dir = tmp_path / "hog"
    hog_dir.mkdir()
    limits = Limits(wall_seconds=20, max_processes=128)
    hog = threading.Thread(
        target=isolating_sandbox.run,
        args=("for i in $(seq 126); do sleep 8 & done; wait", hog_dir),
        kwargs={"limits": limits},
        daemon=True,
    )
    hog.start()
    time.sleep(1.5)  # the hog holds its processes now
    verdict = judge(state(task, tmp_path, fixed=True), task[0], task[1], sandbox=isolating_sandbox)
    assert verdict.solved, verdict.summary
    hog.join(30)


# ------------------------------------------------------------------------------------------ weak tests
ALWAYS_EQUAL = """
def has_close_elements(numbers: List[float], threshold: float) -> bool:
    class _Equal:
        def __eq__(self, other):
            return True

        def __bool__(self):
            return True

    return _Equal()
"""


def test_an_always_equal_result_passes_no_layer(task, tmp_path, isolating_sandbox):
    """A redefinition returning an object equal to everything is plain code (the patch check lets it through)
    and fooled ``==`` checks (30/30 humanevalfix tasks); the generated checks now compare result types, and
    the differential check compares exact types with the reference's on the host."""
    work = state(task, tmp_path, fixed=False, extra=ALWAYS_EQUAL)
    verdict = judge(work, task[0], task[1], sandbox=isolating_sandbox)
    assert not verdict.rejections and not verdict.solved, verdict.summary
    verdict = judge(work, task[0], task[1], differential=False, sandbox=isolating_sandbox)
    assert not verdict.solved, verdict.summary  # the tests alone catch it too


# The fifth class: the differential harness runs no gatekeeper, so code in the judged process can take
# it over. This payload finds the harness's frame at import, writes every original docstring example's expected
# output as read from its own docstrings, and leaves only the literal-changed copies for the harness to run
# honestly (the best a forger can do for outputs it cannot read).
HARNESS_FORGERY = """

def _forge_the_harness():
    import ast, doctest, sys
    frame = sys._getframe(0)
    while frame is not None and not ("payload" in frame.f_locals and "emit" in frame.f_locals):
        frame = frame.f_back
    if frame is None:
        return
    payload, emit = frame.f_locals["payload"], frame.f_locals["emit"]
    with open(__file__, encoding="utf-8") as fh:
        tree = ast.parse(fh.read())
    written = {}
    for node in ast.walk(tree):
        documented = isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef))
        doc = ast.get_docstring(node, clean=False) if documented else None
        if doc and ">>>" in doc:
            for example in doctest.DocTestParser().get_examples(doc):
                written.setdefault(example.source, (example.want, example.exc_msg))
    for group in payload["examples"]:
        for example in group["examples"]:
            if "~" not in example["id"]:
                want, exc = written.get(example["source"], ("", None))
                emit({"k": "doc", "id": example["id"], "got": want, "exc": exc, "ms": 0})
    payload["examples"] = [g for g in payload["examples"] if "~" in g["name"]]


_forge_the_harness()
"""


def test_the_harness_cannot_be_credited_with_outputs_read_off_the_repository(tmp_path, isolating_sandbox):
    """Layer 3 alone, on a task whose target is a method (no generated calls: the docstring examples are the
    differential oracle). Judged by the docstrings' own expected outputs, as doctest would, the forgery passes
    every original example (the control: it did pass the previous check); against the reference's outcomes,
    with copies whose literals the host changed from a secret, it is not credited."""
    from pivotgym_swe.differential import (
        candidate_payload,
        check_differential,
        example_passes,
        extract_examples,
        reference_for,
        run_harness,
        setup,
    )
    from pivotgym_swe.tasks import load_task_set, task_file

    instance = next(t for t in load_task_set(str(task_file("toolz"))) if "____init__-flip" in t["instance_id"])
    pristine = pristine_tree(instance)
    mutation = Mutation(**instance["mutation"])
    work = fork_dir(pristine, tmp_path / "repo")
    unfixed = mutation.apply((pristine / mutation.path).read_text())
    (work / mutation.path).write_text(unfixed + HARNESS_FORGERY)

    result = check_differential(work, instance, sandbox=isolating_sandbox)
    assert not result.ok and result.counts["example_failures"] > 0, result
    assert result.counts["inputs"] == 0 and result.counts["examples"] > 0  # the examples were the whole oracle
    assert any(d["kind"] == "example" for d in result.details)

    # the control: what the forgery wrote for the original examples passes doctest's own check of them
    ref = reference_for(instance, sandbox=isolating_sandbox)
    originals = [g for g in ref.examples if "~" not in g["name"]]
    _, written = extract_examples((pristine / mutation.path).read_text())
    payload = {**candidate_payload(ref, instance), "examples": originals}
    box, python, hide = setup(instance, isolating_sandbox, None)
    run = run_harness(work, payload, sandbox=box, hide=hide, python=python)
    ids = [ex["id"] for g in originals for ex in g["examples"]]
    assert ids and run.ended
    for ident in ids:
        (record,) = run.docs[ident]
        assert example_passes(written[ident], record["got"], record.get("exc")), (ident, record)
