"""``Sandbox.run(..., hide=...)``: host paths a command must not read, blanked where the sandbox shows them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pivotgym.sandbox import Limits, get_sandbox
from pivotgym.sandbox.bwrap import bwrap_available, visible_roots
from pivotgym.sandbox.hide import find_named, hidden_targets

requires_bwrap = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap is not installed")


@pytest.fixture()
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    (root / "pkg" / "sub").mkdir(parents=True)
    (root / "pkg" / "answer.py").write_text("ANSWER = 42\n")
    (root / "pkg" / "sub" / "more.py").write_text("MORE = 1\n")
    (root / "solutions.jsonl").write_text('{"canonical": "return 42"}\n')
    (root / "keep.txt").write_text("KEEP\n")
    (tmp_path / "link").symlink_to(root)
    for p in [tmp_path, *tmp_path.rglob("*")]:
        if not p.is_symlink():
            p.chmod(0o755 if p.is_dir() else 0o644)  # the unprivileged sandbox user must be able to read them
    return root


def test_targets_are_mapped_through_symlinks_nested_ones_dropped_missing_ones_skipped(tree):
    link = tree.parent / "link"
    targets = hidden_targets(
        [
            str(tree / "pkg" / "sub"),
            str(link / "pkg"),
            str(tree / "solutions.jsonl"),
            str(tree / "missing"),
            "/elsewhere/not/bound",
        ],
        [str(link)],
    )
    # the bound root is the symlink: the real paths are hidden at their place under it; pkg/sub is inside pkg
    assert targets == [(str(link / "pkg"), True), (str(link / "solutions.jsonl"), False)]
    assert hidden_targets([str(tree / "pkg")], ["/usr"]) == []  # not shown by the sandbox: nothing to do


def test_find_named_finds_every_copy_and_archives_but_not_inside_a_hit(tree):
    (tree / "vendor" / "pkg").mkdir(parents=True)
    (tree / "vendor" / "dist-1.0-py3-none-any.whl").write_bytes(b"PK")
    (tree / "pkg" / "__pycache__" / "pkg").mkdir(parents=True)
    found = find_named((str(tree),), frozenset({"pkg"}), (".whl",))
    assert found == (
        str(tree / "pkg"),
        str(tree / "vendor" / "dist-1.0-py3-none-any.whl"),
        str(tree / "vendor" / "pkg"),
    )


@requires_bwrap
def test_hidden_paths_are_empty_or_unreadable_and_the_rest_still_works(tree, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    work.chmod(0o755)
    box = get_sandbox("bwrap", limits=Limits(wall_seconds=30), ro_binds=[str(tree)])
    script = (
        f"ls -A {tree}/pkg; echo listed; cat {tree}/pkg/answer.py; cat {tree}/solutions.jsonl; "
        f"cat {tree}/keep.txt; touch {tree}/pkg/planted && echo PLANTED; "
        "python -I -c 'import pytest, json; print(\"imports\", pytest.__name__)'"
    )
    result = box.run(
        script,
        work,
        hide=[tree / "pkg", str(tree / "pkg" / "answer.py"), tree / "solutions.jsonl", "/nonexistent/path"],
    )
    out = result.output
    assert out.split("listed")[0].strip() == ""  # the directory is there, empty
    assert "ANSWER" not in out and "canonical" not in out and "PLANTED" not in out, out
    assert "KEEP" in out and "imports pytest" in out, out  # siblings and the interpreter's packages stay
    assert (tree / "pkg" / "answer.py").read_text() == "ANSWER = 42\n" and not (tree / "pkg" / "planted").exists()
    shown = box.run(f"cat {tree}/pkg/answer.py", work)  # without hide the same path is readable
    assert "ANSWER = 42" in shown.stdout


@requires_bwrap
def test_an_installed_package_can_be_hidden_without_breaking_python(tmp_path):
    import pluggy

    installed = str(Path(pluggy.__file__).parent)
    assert any(installed.startswith(r.rstrip("/") + "/") for r in visible_roots())
    work = tmp_path / "work"
    work.mkdir()
    work.chmod(0o755)
    box = get_sandbox("bwrap", limits=Limits(wall_seconds=30))
    # an empty directory on sys.path imports as a namespace package: one with nothing in it
    probe = (
        'python -I -c \'import pluggy; print("code", hasattr(pluggy, "HookimplMarker"))\'; '
        "python -I -c 'import json, os; print(\"stdlib\", os.sep)'"
    )
    assert box.run(probe, work).output.split() == ["code", "True", "stdlib", os.sep]
    assert box.run(probe, work, hide=[installed]).output.split() == ["code", "False", "stdlib", os.sep]
