"""Sandbox costs, each as a ratio against a baseline measured in the same run.

1. start overhead: `true` under bwrap vs a bare subprocess (goal: <= 50 ms more), and the same start from a
   parent with a 1 GiB heap, rlimits via `prlimit` (vfork) vs the preexec_fn fallback (fork);
2. a real test run (toolz's test_itertoolz.py through the judge's pytest runner) under bwrap vs the same
   runner as a bare subprocess (goal: <= 1.3x);
3. forking a work dir (the toolz tree): plain copy vs hard links, and against the test run it precedes.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pivotgym.sandbox import fork_dir, get_sandbox, remove_dir


def timed(fn, repeat: int) -> float:  # noqa: ANN001
    samples = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t)
    return statistics.median(samples)


def main() -> None:
    from pivotgym_swe.sources import PROJECTS, repo_tree
    from pivotgym_swe.testing import RUNNER

    box = get_sandbox("bwrap")
    tree = repo_tree(PROJECTS["toolz"])
    tmp = Path(tempfile.mkdtemp(prefix="bench-sandbox-"))
    work = fork_dir(tree, tmp / "work")

    bare_start = timed(lambda: subprocess.run(["true"], check=True), 20)
    bwrap_start = timed(lambda: box.run(["true"], work), 20)
    print(f"start: bare {bare_start * 1e3:.1f} ms, bwrap {bwrap_start * 1e3:.1f} ms, "
          f"overhead {(bwrap_start - bare_start) * 1e3:.1f} ms (goal <= 50 ms)")

    # the same start from a parent holding a 1 GiB heap (a loaded model): rlimits through `prlimit` let
    # subprocess spawn with vfork; the preexec_fn fallback forks the whole address space
    import pivotgym.sandbox.base as base

    heap = bytearray(1 << 30)
    heap[::4096] = b"x" * len(heap[::4096])
    with_prlimit = timed(lambda: box.run(["true"], work), 10)
    saved, base._PRLIMIT = base._PRLIMIT, ""
    with_preexec = timed(lambda: box.run(["true"], work), 10)
    base._PRLIMIT = saved
    del heap
    print(f"start with a 1 GiB parent heap: prlimit {with_prlimit * 1e3:.1f} ms, preexec_fn fallback "
          f"{with_preexec * 1e3:.1f} ms ({with_preexec / with_prlimit:.1f}x)")

    target = "toolz/tests/test_itertoolz.py"
    bare = lambda: subprocess.run([sys.executable, "-I", "-c", RUNNER, str(work), target], input="n\n",  # noqa: E731
                                  capture_output=True, text=True, cwd=work, check=True)
    boxed = lambda: box.run([sys.executable, "-I", "-c", RUNNER, "/repo", target], work, stdin="n\n")  # noqa: E731
    bare()
    t_bare, t_box = timed(bare, 5), timed(boxed, 5)
    print(f"test run ({target}): bare {t_bare:.3f} s, bwrap {t_box:.3f} s, ratio {t_box / t_bare:.2f}x (goal <= 1.3x)")

    counter = iter(range(10_000))
    t_fork = timed(lambda: fork_dir(work, tmp / f"f{next(counter)}", method="copy"), 20)
    t_link = timed(lambda: fork_dir(work, tmp / f"h{next(counter)}", method="hardlink"), 20)
    n_files = sum(1 for p in work.rglob("*") if p.is_file())
    print(f"fork ({n_files} files): copy {t_fork * 1e3:.1f} ms (the default: edits never reach the source), "
          f"hardlink {t_link * 1e3:.1f} ms ({t_fork / t_link:.1f}x faster, read-only consumers only); "
          f"vs a sandboxed test run: {t_fork / t_box * 100:.1f}% of it")
    remove_dir(tmp)


if __name__ == "__main__":
    main()
