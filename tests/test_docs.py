"""Every documented Python snippet runs: the ```python blocks of README.md and of every page under docs/.

The blocks of one page run in order in one fresh interpreter (a page may define a name in one block and use
it in a later one), in a temporary folder, so a snippet cannot lean on files of this checkout. Each block is
compiled under the page's path with its own line numbers, so a failure's traceback names the page and line.

An illustrative fragment can be skipped, for example a block that needs a running server, an optional trainer
package or the files a run writes. To skip it, put this line directly above its fence:

    <!-- docs-test: skip (what it needs) -->

A skipped block is still compiled, so its syntax is checked. README.md blocks may not be skipped, and the
README's snippets load the bundled model, so that test is marked slow. The docs/ pages' blocks are cheap.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOC_PAGES = sorted((ROOT / "docs").rglob("*.md"))

#: the line that marks the next ```python block as a fragment the tests do not run
SKIP_MARKER = re.compile(r"^<!-- docs-test: skip \(.+\) -->$")
FENCE = re.compile(r"^```python[ \t]*$")

#: runs the blocks (a JSON list of [path, first line, source] on stdin) in order in one namespace
RUNNER = """
import json, sys
namespace = {"__name__": "__main__"}
for path, first_line, source in json.load(sys.stdin):
    exec(compile("\\n" * (first_line - 1) + source, path, "exec"), namespace)
"""


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # the block's first line of code in the page (1-based)
    source: str
    skipped: bool

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def python_blocks(page: Path) -> list[Block]:
    """The ```python blocks of ``page`` in order, each marked skipped when the skip marker is directly above it."""
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        if not FENCE.match(lines[i]):
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), None)
        assert end is not None, f"{page.relative_to(ROOT)}:{i + 1}: a ```python block is never closed"
        skipped = i > 0 and bool(SKIP_MARKER.match(lines[i - 1].strip()))
        blocks.append(Block(page, i + 2, "\n".join(lines[i + 1 : end]) + "\n", skipped))
        i = end + 1
    return blocks


def run_blocks(blocks: list[Block], cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    payload = json.dumps([[str(b.page.relative_to(ROOT)), b.line, b.source] for b in blocks])
    return subprocess.run(
        [sys.executable, "-c", RUNNER],
        input=payload,
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
    )


def _report(result: subprocess.CompletedProcess[str]) -> str:
    return f"exit {result.returncode}\n--- stdout\n{result.stdout[-3000:]}\n--- stderr\n{result.stderr[-6000:]}"


def _pages_with_runnable_blocks() -> list[Path]:
    return [page for page in DOC_PAGES if any(not b.skipped for b in python_blocks(page))]


def test_readme_has_python_blocks_and_skips_none() -> None:
    blocks = python_blocks(README)
    assert blocks, "README.md has no ```python block: the library example is gone"
    assert not [b.name for b in blocks if b.skipped], "README.md's Python blocks must all run"


def test_every_python_block_compiles() -> None:
    """Fragments included: every block is valid Python (a syntax error fails here, cheaply, before any run)."""
    for block in [b for page in [README, *DOC_PAGES] for b in python_blocks(page)]:
        try:
            compile("\n" * (block.line - 1) + block.source, str(block.page), "exec")
        except SyntaxError as exc:
            pytest.fail(f"{block.name}: {exc}")


@pytest.mark.parametrize("page", _pages_with_runnable_blocks(), ids=lambda p: str(p.relative_to(ROOT)))
def test_docs_python_blocks_run(page: Path, tmp_path: Path) -> None:
    runnable = [b for b in python_blocks(page) if not b.skipped]
    result = run_blocks(runnable, tmp_path, timeout=120)
    assert result.returncode == 0, _report(result)


@pytest.mark.slow
def test_readme_python_blocks_run(tmp_path: Path) -> None:
    """The README's library example, as written: env, expert turn, verifier, and a profile with the bundled model."""
    result = run_blocks(python_blocks(README), tmp_path, timeout=600)
    assert result.returncode == 0, _report(result)
