"""Sandbox costs, each as a ratio against a baseline measured in the same run.

1. start overhead: `true` under bwrap vs a bare subprocess (goal: <= 50 ms more), and the same start from a
   parent with a 1 GiB heap, rlimits via `prlimit` (vfork) vs the preexec_fn fallback (fork);
2. a real test run (toolz's test_itertoolz.py through the judge's pytest runner) under bwrap vs the same
   runner as a bare subprocess (goal: <= 1.3x);
3. forking a work dir (the toolz tree): plain copy vs hard links, and against the test run it precedes;
4. what the judge's isolation costs per judged submission (a real toolz task, FAIL_TO_PASS + PASS_TO_PASS):
   ``python -m pytest`` with the judge's options on a fork as a bare subprocess (the baseline), the trusted
   runner (audit-hook gatekeeper, MAC'd records) as a bare subprocess, the runner under bwrap, the static
   patch check alone, and the whole hardened ``judge()`` (fork, patch check, test restore, read-only test
   mounts, memory cgroup, disk watch, tamper checks) on the unfixed state and on the fixed one, where the
   tests pass and the host-side differential check against the reference runs too;
5. the backends side by side in the same interleaved rounds, each against no isolation (a bare subprocess for
   a command's start, the ``local`` backend for the rest): a command's start (``true``), an SWE env step (a
   ``run`` of five tests on a real toolz task) and a judged submission (``judge()`` on the unfixed state),
   under ``local``, ``bwrap`` and ``docker`` (a fresh container per command, the runtime's trees bound in), and
   docker against bwrap; a backend that cannot run here is named with the reason and left out. (``local``
   judges slower than bwrap: its test files' paths differ per fork, so the host compiles the pristine tests
   again for every judgement, about 0.4 s, where the isolating backends always see them under ``/repo``.)
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _smoke import skip, smoke

from pivotgym.sandbox import fork_dir, get_sandbox, remove_dir

KEY = "00" * 32 + "\n"  # the runner's record key (any 32 bytes, hex); the records are not read here


def rounds(n: int) -> int:
    """``n`` timed rounds; one in smoke mode."""
    return 1 if smoke() else n


def timed(fn, repeat: int) -> float:
    samples = []
    for _ in range(rounds(repeat)):
        t = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t)
    return statistics.median(samples)


def main() -> None:
    from pivotgym_swe.sources import PROJECTS, repo_tree
    from pivotgym_swe.testing import RUNNER, RUNNER_ENV, top_level_names

    if smoke() and shutil.which("bwrap") is None:
        skip("no bubblewrap (bwrap) on PATH: `make system-deps` installs it")
    box = get_sandbox("bwrap")
    tree = repo_tree(PROJECTS["toolz"])
    tmp = Path(tempfile.mkdtemp(prefix="bench-sandbox-"))
    work = fork_dir(tree, tmp / "work")

    bare_start = timed(lambda: subprocess.run(["true"], check=True), 20)
    bwrap_start = timed(lambda: box.run(["true"], work), 20)
    print(
        f"start: bare {bare_start * 1e3:.1f} ms, bwrap {bwrap_start * 1e3:.1f} ms, "
        f"overhead {(bwrap_start - bare_start) * 1e3:.1f} ms (goal <= 50 ms)"
    )

    # the same start from a parent holding a 1 GiB heap (a loaded model): rlimits through `prlimit` let
    # subprocess spawn with vfork; the preexec_fn fallback forks the whole address space
    import pivotgym.sandbox.base as base

    heap_mib = 64 if smoke() else 1024
    heap = bytearray(heap_mib << 20)
    heap[::4096] = b"x" * len(heap[::4096])
    with_prlimit = timed(lambda: box.run(["true"], work), 10)
    saved, base._PRLIMIT = base._PRLIMIT, ""
    with_preexec = timed(lambda: box.run(["true"], work), 10)
    base._PRLIMIT = saved
    del heap
    print(
        f"start with a {heap_mib} MiB parent heap: prlimit {with_prlimit * 1e3:.1f} ms, preexec_fn fallback "
        f"{with_preexec * 1e3:.1f} ms ({with_preexec / with_prlimit:.1f}x)"
    )

    target = "toolz/tests/test_itertoolz.py"
    names = ",".join(top_level_names(tree))
    env = {**os.environ, **RUNNER_ENV}

    def bare() -> None:
        subprocess.run(
            [sys.executable, "-I", "-c", RUNNER, str(work), names, target],
            input=KEY,
            capture_output=True,
            text=True,
            cwd=work,
            check=True,
            env=env,
        )

    def boxed() -> None:
        r = box.run([sys.executable, "-I", "-c", RUNNER, "/repo", names, target], work, stdin=KEY, env=RUNNER_ENV)
        assert r.returncode == 0 and r.stdout, r.output

    if not smoke():
        bare()  # warm-up
    t_bare, t_box = timed(bare, 5), timed(boxed, 5)
    print(f"test run ({target}): bare {t_bare:.3f} s, bwrap {t_box:.3f} s, ratio {t_box / t_bare:.2f}x (goal <= 1.3x)")

    counter = iter(range(10_000))
    t_fork = timed(lambda: fork_dir(work, tmp / f"f{next(counter)}", method="copy"), 20)
    t_link = timed(lambda: fork_dir(work, tmp / f"h{next(counter)}", method="hardlink"), 20)
    n_files = sum(1 for p in work.rglob("*") if p.is_file())
    print(
        f"fork ({n_files} files): copy {t_fork * 1e3:.1f} ms (the default: edits never reach the source), "
        f"hardlink {t_link * 1e3:.1f} ms ({t_fork / t_link:.1f}x faster, read-only consumers only); "
        f"vs a sandboxed test run: {t_fork / t_box * 100:.1f}% of it"
    )
    judge_costs(box, tmp)
    backend_costs(tmp)
    remove_dir(tmp)


def judge_costs(box, tmp: Path) -> None:
    """Section 4: the hardened judge against plain pytest on the same targets, one real toolz task."""
    from pivotgym_swe.confine import prelude
    from pivotgym_swe.patch_check import check_patch
    from pivotgym_swe.tasks import load_task_set, materialize, pristine_tree, task_file
    from pivotgym_swe.testing import RUNNER, RUNNER_ENV, is_test_path, judge, top_level_names

    instance = next(r for r in load_task_set(str(task_file("toolz"))) if r["split"] == "train")
    targets = sorted(set(instance["FAIL_TO_PASS"] + instance["PASS_TO_PASS"]))
    pristine = pristine_tree(instance)
    work = materialize(instance, tmp / "judge-work")
    names = ",".join(top_level_names(pristine))
    counter = iter(range(10_000))

    def plain_pytest() -> None:  # the baseline: the same pytest options, no isolation, no runner, no sandbox
        fork = fork_dir(work, tmp / f"plain{next(counter)}")
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "-p",
                "no:randomly",
                "-c",
                os.devnull,
                "--rootdir",
                str(fork),
                "-o",
                "addopts=",
                "--no-header",
                "-W",
                "ignore::DeprecationWarning",
                *targets,
            ],
            cwd=fork,
            capture_output=True,
            env={**os.environ, **RUNNER_ENV, "PYTHONDONTWRITEBYTECODE": "1"},
        )

    def runner_bare() -> None:
        fork = fork_dir(work, tmp / f"rb{next(counter)}")
        subprocess.run(
            [sys.executable, "-I", "-c", RUNNER, str(fork), names, *targets],
            input=KEY,
            capture_output=True,
            text=True,
            cwd=fork,
            env={**os.environ, **RUNNER_ENV},
        )

    def runner_bwrap() -> None:
        fork = fork_dir(work, tmp / f"rw{next(counter)}")
        box.run([sys.executable, "-I", "-c", RUNNER, "/repo", names, *targets], fork, stdin=KEY, env=RUNNER_ENV)

    unconfined = RUNNER.removeprefix(prelude())

    def runner_bwrap_unconfined() -> None:  # the same runner without the seccomp filter and Landlock ruleset
        fork = fork_dir(work, tmp / f"ru{next(counter)}")
        box.run([sys.executable, "-I", "-c", unconfined, "/repo", names, *targets], fork, stdin=KEY, env=RUNNER_ENV)

    def patch_check() -> None:
        check_patch(work, pristine, is_test_path)

    def judge_unfixed() -> None:
        verdict = judge(work, instance, pristine, sandbox=box)
        assert verdict.run.outcomes and not verdict.run.error, verdict.summary

    fixed = fork_dir(pristine, tmp / "fixed")  # the reference fix: the pristine tree

    def judge_fixed() -> None:
        verdict = judge(fixed, instance, pristine, sandbox=box)
        assert verdict.solved and verdict.differential is not None, verdict.summary

    if not smoke():  # warm-ups (a smoke run's single round judges, and checks, both states once)
        judge_unfixed()
        judge_fixed()
        plain_pytest()
    # interleaved rounds, so a change in machine load hits every variant alike
    variants = [
        ("pytest, same options, bare subprocess (baseline)", plain_pytest),
        ("trusted runner, bare subprocess", runner_bare),
        ("trusted runner under bwrap, not confined", runner_bwrap_unconfined),
        ("trusted runner under bwrap (seccomp + Landlock)", runner_bwrap),
        ("static patch check alone", patch_check),
        ("hardened judge() end to end, unfixed state", judge_unfixed),
        ("hardened judge(), fixed state (+ differential)", judge_fixed),
    ]
    samples: dict[str, list[float]] = {label: [] for label, _ in variants}
    for _ in range(rounds(7)):
        for label, fn in variants:
            samples[label].append(timed(fn, 1))
    medians = {label: statistics.median(v) for label, v in samples.items()}
    base = medians[variants[0][0]]
    print(
        f"judged submission ({instance['instance_id']}, {len(targets)} tests), "
        f"median of {rounds(7)} interleaved rounds:"
    )
    for label, wall in medians.items():
        print(f"  {label:<50} {wall:.3f} s ({wall / base:.2f}x)")
    for label, _ in variants[-2:]:
        cost = medians[label] - base
        state = label.split(", ", 1)[1]
        print(f"  cost per judged submission ({state}): {cost * 1e3:+.0f} ms ({cost / base * 100:+.1f}%)")


def backend_costs(tmp: Path) -> None:
    """Section 5: local (bare subprocess) vs bwrap vs docker, per command start, per env step, per judgement."""
    from pivotgym.parsing import render_calls
    from pivotgym.sandbox.docker import unavailable_reason
    from pivotgym.types import ToolCall
    from pivotgym_swe.env import SWEEnv
    from pivotgym_swe.tasks import load_task_set, materialize, pristine_tree, task_file
    from pivotgym_swe.testing import judge

    names = ["local", "bwrap"]
    problem = unavailable_reason()
    if problem:
        print(f"docker: not measured ({problem})")
    else:
        names.append("docker")
    boxes = {name: get_sandbox(name, warn=False) if name == "local" else get_sandbox(name) for name in names}
    instance = next(r for r in load_task_set(str(task_file("toolz"))) if r["split"] == "train")
    pristine = pristine_tree(instance)
    work = materialize(instance, tmp / "backend-work")
    empty = tmp / "empty"
    empty.mkdir()
    tests = " ".join(sorted(set(instance["FAIL_TO_PASS"] + instance["PASS_TO_PASS"]))[:5])
    action = render_calls([ToolCall("run", {"command": f"python -m pytest -q -p no:cacheprovider {tests}"})])
    envs = {name: SWEEnv("toolz", sandbox=box) for name, box in boxes.items()}
    for env in envs.values():
        env.reset(options={"task_id": instance["instance_id"]})

    def start(name: str) -> None:
        if name == "bare":  # the floor: no sandbox code at all
            subprocess.run(["true"], check=True)
            return
        result = boxes[name].run(["true"], empty)
        assert result.returncode == 0, result.output

    def step(name: str) -> None:
        obs, *_ = envs[name].step(action)
        assert "failed" in obs[0]["content"] or "passed" in obs[0]["content"], obs[0]["content"][-300:]

    def judged(name: str) -> None:
        verdict = judge(work, instance, pristine, sandbox=boxes[name])
        assert verdict.run.outcomes and not verdict.run.error, verdict.summary

    for name in names:  # warm-ups: the runtime built, the image's pages cached
        step(name)
    repeat = rounds(7)
    sections = (
        ("command start (`true`)", start, ["bare", *names]),
        ("env step (run 5 tests)", step, names),
        ("judged submission", judged, names),
    )
    print(f"per backend, median of {repeat} interleaved rounds (ratio to the first: no isolation):")
    for what, fn, variants in sections:
        samples: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(repeat):
            for name in variants:
                samples[name].append(timed(lambda name=name, fn=fn: fn(name), 1))
        medians = {name: statistics.median(v) for name, v in samples.items()}
        first = medians[variants[0]]
        line = ", ".join(f"{n} {medians[n] * 1e3:.0f} ms ({medians[n] / first:.2f}x)" for n in variants)
        if "docker" in medians:
            line += f"; docker / bwrap {medians['docker'] / medians['bwrap']:.2f}x"
        print(f"  {what}: {line}")
    for env in envs.values():
        env.close()


if __name__ == "__main__":
    main()
