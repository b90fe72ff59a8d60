"""The SWE env: tools, rewards judged by our own test run, expert trajectories, and reward-hacking attempts."""

from __future__ import annotations

import json

from pivotgym.sandbox import Sandbox, SandboxError

# tests on ``env`` run on the default backend (bwrap; the fixture skips without it); those on ``isolated_env`` on
# each isolating backend, bwrap and docker


def call(name: str, **arguments) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def test_view_search_edit_and_errors(env):
    env.reset(options={"task_id": "fixture__0"})
    obs, r, term, trunc, info = env.step(call("search", pattern=r"def has_close_elements\("))
    assert "solution.py:" in obs[0]["content"] and r == 0 and not term
    obs, *_ = env.step(call("view", path="solution.py", start=1, end=5))
    assert obs[0]["content"].startswith("solution.py (lines 1-5")
    _, r, _, _, info = env.step(call("edit", path="solution.py", old="NOT THERE", new="x"))
    assert info["error"] == "edit_not_found" and r == 0
    _, _, _, _, info = env.step(call("edit", path="solution.py", old="    ", new="x"))
    assert info["error"] == "edit_ambiguous"
    _, _, _, _, info = env.step(call("view", path="../../etc/passwd"))
    assert info["error"] == "bad_path"
    _, _, _, _, info = env.step("not a tool call")
    assert info["error"] == "parse_error"
    _, _, _, _, info = env.step(call("delete", path="x"))
    assert info["error"] == "unknown_tool"


def test_expert_trajectory_solves(isolated_env):
    env = isolated_env
    traj = next(env.expert_trajectories("train"))
    assert traj.reward == 1.0
    tools_used = [m["tool_calls"][0]["function"]["name"] for m in traj.messages if m["role"] == "assistant"]
    assert tools_used == ["search", "view", "edit", "run", "submit"]
    run_output = [m for m in traj.messages if m.get("name") == "run"][0]["content"]
    assert "1 passed" in run_output and "<t>s" in run_output  # real output, durations masked
    # (check_env itself runs on a registered env in test_tasksets.py)


def test_submitting_the_buggy_state_gets_no_reward(isolated_env):
    env = isolated_env
    env.reset(options={"task_id": "fixture__0"})
    obs, reward, terminated, _, info = env.step(call("submit"))
    assert terminated and reward == 0.0 and info["solved"] is False


def test_fake_passed_output_and_test_edits_gain_nothing(isolated_env):
    env = isolated_env
    env.reset(options={"task_id": "fixture__0"})
    # print a fake PASSED report from the tests themselves, and make the check trivially pass
    env.step(
        call(
            "edit",
            path="test_solution.py",
            old="def test_check():\n    check(has_close_elements)",
            new="def test_check():\n    print('1 passed PASSED')\n    assert True",
        )
    )
    env.step(call("run", command="echo '===== 1 passed in 0.01s =====' > conftest.py; printf 'PASSED\\n'"))
    env.step(call("run", command="printf 'import pytest\\n' > pytest.py"))
    obs, reward, terminated, _, info = env.step(call("submit"))
    assert terminated and reward == 0.0, obs


def test_abuse_through_run_is_contained(isolated_env, tmp_path):
    env = isolated_env
    secret = tmp_path / "host-secret.txt"
    secret.write_text("HOST")
    env.reset(options={"task_id": "fixture__0"})
    obs, *_ = env.step(call("run", command=f"cat {secret}; ln -s {secret} leak"))
    assert "HOST" not in obs[0]["content"]
    _, _, _, _, info = env.step(call("view", path="leak"))
    assert info["error"] == "bad_path"  # the symlink leads outside the repository
    obs, *_ = env.step(call("run", command="yes | head -c 10000000"))
    assert len(obs[0]["content"]) < 10_000


def test_snapshot_restore_forks_the_working_copy(env):
    env.reset(options={"task_id": "fixture__0"})
    snap = env.snapshot()
    env.step(call("run", command="echo changed > solution.py"))
    assert (env.workdir / "solution.py").read_text() == "changed\n"
    env.restore(snap)
    assert "def has_close_elements" in (env.workdir / "solution.py").read_text()


def test_wrong_action_and_calibration_candidates_follow_the_expert_turn(env):
    """At the edit turn the wrong action leaves the bug and the candidate keeps the fix (both apply); at other
    turns there is no wrong action and the candidates read or run something else."""
    from pivotgym.types import tool_calls_of

    traj = next(env.expert_trajectories("train"))
    experts = [m for m in traj.messages if m["role"] == "assistant"]
    texts = [env.render_action(m) for m in experts]
    names = [tool_calls_of(m)[0].name for m in experts]
    env.reset(options={"task_id": traj.task_id})
    for name, text in zip(names, texts):
        wrong, others = env.wrong_action(text), env.calibration_candidates(text)
        if name == "edit":
            fix, kept = json.loads(others[0][11:-12])["arguments"], json.loads(wrong[11:-12])["arguments"]
            expert_args = tool_calls_of(experts[names.index("edit")])[0].arguments
            assert fix["new"].replace("  # fixed", "") == expert_args["new"] != fix["new"]
            assert kept["new"].replace("  # left as it was", "") == kept["old"] == expert_args["old"]
        else:
            assert wrong is None
        assert all(c != text for c in others) and (others or name == "submit")
        if name == "submit":
            break
        env.step(text)


def test_the_wrong_edit_applies_and_does_not_solve(env):
    traj = next(env.expert_trajectories("train"))
    experts = [env.render_action(m) for m in traj.messages if m["role"] == "assistant"]
    env.reset(options={"task_id": traj.task_id})
    env.step(experts[0])
    env.step(experts[1])
    wrong = env.wrong_action(experts[2])
    *_, info = env.step(wrong)
    assert "error" not in info
    _obs, reward, terminated, _truncated, _info = env.step(call("submit"))
    assert terminated and reward == 0.0


# ------------------------------------------------------------------------------------------ runtime, episodes
def test_run_uses_the_sources_runtime_not_the_training_venv(isolated_env):
    env = isolated_env
    import sys

    env.reset(options={"task_id": "fixture__0"})
    obs, *_ = env.step(call("run", command="python -c 'import sys; print(sys.prefix)'; python -c 'import toolz'"))
    text = obs[0]["content"]
    assert "/swe-runtimes/humaneval-" in text and sys.prefix not in text, text
    assert "No module named 'toolz'" in text
    obs, *_ = env.step(call("run", command="python -m pytest -q -p no:cacheprovider test_solution.py"))
    assert "1 failed" in obs[0]["content"]  # the tests run on the runtime's pytest


def test_a_late_judgement_of_an_abandoned_episode_is_dropped(tiny_tasks):
    """A judge abandoned at the step deadline finishes during the next episode: its verdict is not kept."""
    import threading

    from pivotgym_swe.env import SWEEnv

    env = SWEEnv("tiny", tasks_path=str(tiny_tasks), step_timeout=1.0)
    env.env_id = "swe/tiny-late-v0"
    try:
        env.reset(options={"task_id": "fixture__0"})
        slow = "    import time\n\n    time.sleep(2)\n    for idx, elem"  # per call: the judge outlives the step
        env.step(call("edit", path="solution.py", old="    for idx, elem", new=slow))
        *_, truncated, info = env.step(call("submit"))
        assert truncated and info["error"] == "step_timeout"
        env.reset(options={"task_id": "fixture__0"})  # the next episode, while the old judge still runs
        for thread in [t for t in threading.enumerate() if t.name == "swe/tiny-late-v0-step"]:
            thread.join(timeout=60)
        assert env.last_judgement is None
        env.judge()  # a judgement of the current episode is kept
        assert env.last_judgement is not None and not env.last_judgement.solved
    finally:
        env.close()


class UnstartableSandbox(Sandbox):
    """A backend that cannot start a process here (as bwrap without user namespaces, or a missing binary)."""

    name = "unstartable"

    def _run(self, cmd, workdir, limits, env, stdin, mounts=(), hide=()):
        raise SandboxError("could not start 'bwrap': [Errno 2] No such file or directory")


def test_a_judge_that_cannot_run_is_verification_failed_not_a_zero(tiny_tasks):
    from pivotgym_swe.env import SWEEnv

    env = SWEEnv("tiny", tasks_path=str(tiny_tasks), sandbox=UnstartableSandbox())
    try:
        env.reset(options={"task_id": "fixture__0"})
        obs, reward, terminated, _, info = env.step(call("submit"))
        assert (
            terminated and info["error"] == "verification_failed" and "could not start" in info["verification_failed"]
        )
        assert info["solved"] is False and "not judged" in obs[0]["content"]
    finally:
        env.close()


def test_reset_and_close_survive_a_deep_work_dir(env):
    import os

    env.reset(options={"task_id": "fixture__0"})
    old = env.workdir
    fd = os.open(old, os.O_RDONLY)
    for _ in range(2500):  # deeper than any recursive walk can go
        os.mkdir("d", dir_fd=fd)
        fd, previous = os.open("d", os.O_RDONLY, dir_fd=fd), fd
        os.close(previous)
    os.close(fd)
    env.reset(options={"task_id": "fixture__0"})
    assert not old.exists() and env.workdir.exists()
    root = env.root
    env.close()
    assert not root.exists()
