"""Profiling a deep SWE state: one snapshot of the turn-t state against replaying the prefix for every sample.

The profiler judges K samples at each expert turn. For the first sample, :class:`~pivotgym.verify.VerifyContext`
replays the expert's prefix through the env and takes a snapshot; every later sample restores that snapshot
(the SWE env's snapshot is a copy of its work dir, which both the bubblewrap and the docker backend bind into
their runs: the state never lives inside a container). The alternative, a fresh context per sample, replays
the whole prefix K times. This benchmark builds a 20-turn trajectory on a real toolz task (the expert's
search and view, then an agent's exploration: test runs and views, each run sandboxed), and judges K candidate
edits at its last turn with ``swe/functional`` both ways, per isolating backend, checking the rewards equal.

    python benchmarks/profile_snapshot.py [--turns 20] [--k 8] [--backends bwrap,docker]
"""

from __future__ import annotations

import argparse
import time

from _smoke import parse_args, skip, smoke

from pivotgym.parsing import render_calls
from pivotgym.types import ToolCall
from pivotgym.verify import VerifyContext


def call(name: str, **arguments) -> str:
    """An action as a policy writes it (the core's ``<tool_call>`` codec)."""
    return render_calls([ToolCall(name, arguments)])


def exploration(expert: list[dict], turns: int) -> list[str]:
    """``turns - 1`` actions before the edit: the expert's search and view, then test runs of the failing
    tests and views of the module, alternating (what an agent does before it edits)."""
    from pivotgym.types import tool_calls_of

    calls = [tool_calls_of(m)[0] for m in expert]
    search, view, edit, run = calls[:4]
    actions = [call(search.name, **search.arguments), call(view.name, **view.arguments)]
    start = int(view.arguments.get("start", 1))
    i = 0
    while len(actions) < turns - 1:
        if i % 2 == 0:
            actions.append(call("run", **run.arguments))
        else:
            actions.append(call("view", path=edit.arguments["path"], start=max(1, start - 5 * i), end=start + 5 * i))
        i += 1
    return actions


def candidates(edit, k: int) -> list[str]:
    """K distinct edits: the expert's, equivalent ones (a comment appended), and wrong ones (the bug kept)."""
    path, old, new = edit.arguments["path"], edit.arguments["old"], edit.arguments["new"]
    out = []
    for i in range(k):
        if i % 2 == 0:
            out.append(call("edit", path=path, old=old, new=new.rstrip("\n") + (f"  # fix {i}\n" if i else "\n")))
        else:
            out.append(call("edit", path=path, old=old, new=old.rstrip("\n") + f"  # note {i}\n"))
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=20, help="turns in the trajectory; samples judge the last")
    parser.add_argument("--k", type=int, default=8, help="samples judged at that turn")
    parser.add_argument("--backends", default="bwrap,docker")
    args = parse_args(parser, argv, turns=4, k=2)

    from pivotgym.sandbox import get_sandbox
    from pivotgym.sandbox.bwrap import bwrap_available
    from pivotgym.sandbox.docker import unavailable_reason
    from pivotgym_swe.env import SWEEnv
    from pivotgym_swe.verifier import FunctionalVerifier

    backends = []
    for name in args.backends.split(","):
        problem = (None if bwrap_available() else "bubblewrap is not installed") if name == "bwrap" else None
        problem = unavailable_reason() if name == "docker" else problem
        if problem:
            print(f"{name}: not measured ({problem})")
        else:
            backends.append(name)
    if not backends:
        skip("no isolating sandbox backend runs here")
    if smoke():
        backends = backends[:1]

    probe = SWEEnv("toolz")
    trajectory = next(probe.expert_trajectories("train"))
    expert = [m for m in trajectory.messages if m["role"] == "assistant"]
    from pivotgym.types import tool_calls_of

    edit = tool_calls_of(expert[2])[0]
    prefix_actions = exploration(expert, args.turns)
    samples = candidates(edit, args.k)
    verifier = FunctionalVerifier()
    runs = sum('"name": "run"' in a for a in prefix_actions)
    print(
        f"task {trajectory.task_id}: {len(prefix_actions)} actions before the judged turn "
        f"({runs} sandboxed test runs), K = {len(samples)} candidate edits"
    )
    for backend in backends:
        sandbox = get_sandbox(backend)

        def factory(sandbox=sandbox) -> SWEEnv:
            return SWEEnv("toolz", sandbox=sandbox)

        env = factory()
        history = env.goto(trajectory.task_id, prefix_actions)
        env.close()
        turn = VerifyContext.from_turn(
            "swe/toolz-v0", history, expert[2], task_id=trajectory.task_id, env_factory=factory
        ).turn

        start = time.perf_counter()
        shared = VerifyContext(turn, env_factory=factory)
        snapshot_rewards = [verifier.verify(shared, c).reward for c in samples]
        t_snapshot = time.perf_counter() - start

        start = time.perf_counter()
        replay_rewards = [verifier.verify(VerifyContext(turn, env_factory=factory), c).reward for c in samples]
        t_replay = time.perf_counter() - start

        assert snapshot_rewards == replay_rewards, (backend, snapshot_rewards, replay_rewards)
        print(
            f"{backend}: snapshot {t_snapshot:.2f} s, replay per sample {t_replay:.2f} s, "
            f"replay/snapshot {t_replay / t_snapshot:.2f}x; rewards equal {snapshot_rewards}"
        )


if __name__ == "__main__":
    main()
