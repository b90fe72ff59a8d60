"""The tool-use envs: registration, contract checks, single-turn judging and multi-turn mechanics."""

from __future__ import annotations

import pytest
from tooluse_helpers import expert, multi_env, single_env

import pivotgym
from pivotgym.checker import check_env
from pivotgym_tooluse.plugin import SINGLE_TURN

ALL_IDS = [*SINGLE_TURN, "tooluse/bfcl-multi-turn-v0"]


@pytest.mark.parametrize("env_id", ALL_IDS)
def test_check_passes_on_every_tooluse_env(env_id):
    report = check_env(env_id, n_experts=2)
    report.raise_for_failures()
    assert report.env_id == env_id
    probe = next(r for r in report.results if r.name == "verifier_wrong_action")
    assert probe.status == "pass", probe.detail  # the env names legal but wrong actions; the verifier rejects them


def test_wrong_action_is_legal_and_not_equivalent():
    from tooluse_helpers import context

    from pivotgym_tooluse.verifier import ToolCallVerifier

    env = single_env()
    env.reset(options={"task_id": "simple_python_0"})
    expert_text = env.render_action(env.expert_actions(env.get_task("simple_python_0"))[0])
    wrong = env.wrong_action(expert_text)
    assert wrong and wrong != expert_text
    ctx = context(single_env, expert(single_env(), "simple_python_0").turn(0))
    assert ToolCallVerifier().verify(ctx, wrong).reward == 0.0
    _, reward, _, _, info = env.step(wrong)
    assert reward == 0.0 and "error" not in info


def test_registered_through_entry_points_and_gymnasium():
    import gymnasium

    specs = {s.id: s for s in pivotgym.list_envs()}
    assert set(ALL_IDS) <= set(specs)
    assert specs["tooluse/bfcl-simple-v0"].plugin == "tooluse"
    env = gymnasium.make("pivotgym:tooluse/bfcl-multiple-v0").unwrapped
    assert "live" in env.splits and env.tasks("live")


def test_splits_are_deterministic_and_disjoint():
    a, b = single_env(), single_env()
    train, test = {t.id for t in a.tasks("train")}, {t.id for t in a.tasks("test")}
    assert train.isdisjoint(test) and len(train) + len(test) == 400
    assert train == {t.id for t in b.tasks("train")}
    assert all(t.data["language"] == "java" for t in a.tasks("java"))


def test_prompt_shows_tools_and_a_worked_example():
    env = single_env()
    obs, _ = env.reset(options={"task_id": "simple_python_1"})
    system = obs[0]["content"]
    assert obs[0]["role"] == "system" and "- math.factorial(number: integer)" in system
    assert "<tool_call>" in system and "Example" in system
    assert obs[-1]["role"] == "user" and "factorial" in obs[-1]["content"]
    assert env.tool_schemas()[0]["function"]["parameters"]["properties"]["number"]["type"] == "integer"


def test_single_turn_rewards():
    env = single_env()
    env.reset(options={"task_id": "simple_python_1"})
    _, reward, terminated, _, info = env.step("math.factorial(number=5.0)")
    assert reward == 1.0 and terminated
    env.reset(options={"task_id": "simple_python_1"})
    _, reward, _, _, info = env.step('<tool_call>{"name": "math.factorial", "arguments": {"number": 6}}</tool_call>')
    assert reward == 0.0 and info["judgement"] == "argument_value"
    env.reset(options={"task_id": "simple_python_1"})
    _, reward, _, _, info = env.step("The factorial of 5 is 120.")
    assert reward == 0.0 and info["judgement"] == "decision_mismatch"


def test_irrelevance_rewards_abstaining():
    env = single_env("tooluse/bfcl-irrelevance-v0")
    task = env.tasks("train")[0]
    env.reset(options={"task_id": task.id})
    assert env.step("None of these tools can do that.")[1] == 1.0
    env.reset(options={"task_id": task.id})
    name = task.data["functions"][0]["name"]
    assert env.step(f'<tool_call>{{"name": "{name}", "arguments": {{}}}}</tool_call>')[1] == 0.0


def test_multi_turn_executes_real_tools_and_scripts_user_turns():
    env = multi_env()
    obs, _ = env.reset(options={"task_id": "multi_turn_base_0"})
    assert "- mkdir(" in obs[0]["content"] and "cp(" not in obs[0]["content"]  # cp is excluded for this task
    obs, reward, terminated, _, info = env.step("cd(folder='document')")
    assert obs[0]["role"] == "tool" and obs[0]["content"] == '{"current_working_directory": "document"}'
    assert not terminated and reward == 0.0
    obs, *_ = env.step('<tool_call>{"name": "ls", "arguments": {}}</tool_call>')
    assert "final_report.pdf" in obs[0]["content"]
    obs, *_ = env.step('<tool_call>{"name": "cp", "arguments": {"source": "a", "destination": "b"}}</tool_call>')
    assert "not available" in obs[0]["content"]
    obs, reward, terminated, _, info = env.step("I looked around.")
    assert info["turn_ok"] is False and "GorillaFileSystem.root" in info["state_diff"]
    assert obs[0]["role"] == "user" and "grep" in obs[0]["content"]


def test_multi_turn_expert_succeeds_and_replays_identically():
    env = multi_env()
    traj = expert(env, "multi_turn_base_0")
    assert traj.reward == 1.0
    tool_msgs = [m for m in traj.messages if m["role"] == "tool"]
    assert any("budget analysis" in m["content"] for m in tool_msgs)  # real grep output in the history
    per_call = multi_env(expert_steps="call")
    assert expert(per_call, "multi_turn_base_0").reward == 1.0
    assert len(expert(per_call, "multi_turn_base_0").assistant_turns()) > len(traj.assistant_turns())


def test_miss_func_announces_tools_when_they_arrive():
    env = multi_env()
    task = next(t for t in env.tasks("miss_func") if t.id == "multi_turn_miss_func_0")
    env.reset(options={"task_id": task.id})
    assert "sort" not in env.available
    traj = expert(env, task.id)
    assert traj.reward == 1.0
    notes = [
        m["content"] for m in traj.messages if m["role"] == "user" and "More tools are now available" in m["content"]
    ]
    assert len(notes) == 1 and "- sort(" in notes[0]


def test_snapshot_restore_is_exact():
    env = multi_env()
    env.reset(options={"task_id": "multi_turn_base_0"})
    env.step("cd(folder='document')")
    snap = env.snapshot()
    env.step("mkdir(dir_name='x')")
    after_first = env.backend.state()
    env.restore(snap)
    assert env.backend.state() != after_first
    env.step("mkdir(dir_name='x')")
    assert env.backend.state() == after_first


def test_calibration_candidates_vary_one_argument_at_a_time_and_are_played_out_by_calibrate():
    import json

    from pivotgym.calibration import calibrate
    from pivotgym.registry import verifier_for
    from pivotgym_tooluse.env import MAX_CALIBRATION_CANDIDATES

    env = single_env()
    env.reset(options={"task_id": "simple_python_0"})
    expert_text = env.render_action(env.expert_actions(env.get_task("simple_python_0"))[0])
    found = env.calibration_candidates(expert_text)
    assert expert_text not in found and 0 < len(found) <= MAX_CALIBRATION_CANDIDATES
    expert_args = json.loads(expert_text[len("<tool_call>") : -len("</tool_call>")])["arguments"]
    for text in found:  # each differs from the expert's call in one argument (changed or left out)
        args = json.loads(text[len("<tool_call>") : -len("</tool_call>")])["arguments"]
        differing = {k for k in expert_args | args if json.dumps(args.get(k, "-")) != json.dumps(expert_args.get(k))}
        assert len(differing) == 1, text
    assert env.calibration_candidates("not a call at all") == []
    trajectories = list(multi_env().expert_trajectories("test", limit=1))
    result = calibrate(
        "tooluse/bfcl-multi-turn-v0",
        trajectories,
        {"functional": verifier_for("tooluse/bfcl-multi-turn-v0")},
        env_factory=multi_env,
    )
    matrix = result.confusion("functional")
    assert "env" in result.sources and matrix.tp > 0 and matrix.tn > 0
    assert matrix.fp == 0  # no variant the verifier credits breaks the episode
