"""``pivotgym verify``: any turn from a JSON file, judged by an env's verifier through the public API."""

import json
import subprocess
import sys

import pytest
from core_helpers import cli_env

from pivotgym.cli.verify import load_turn


def _run(*args, env=None):
    return subprocess.run([sys.executable, "-m", "pivotgym.cli", *args], capture_output=True, text=True, env=env)


def test_verify_a_turn_with_exact_and_functional_verifiers(plugin_site, tmp_path, arith_registry):
    env = arith_registry.make("arith/chain-v0")
    traj = next(env.expert_trajectories("train", limit=1))
    turn = traj.turn(1)
    value = int(turn.expert["content"])
    path = tmp_path / "turn.json"
    path.write_text(
        json.dumps(
            {
                "env_id": "arith/chain-v0",
                "task_id": turn.task_id,
                "messages": turn.prefix,
                "expert": turn.expert["content"],
            }
        )
    )
    run_env = cli_env(plugin_site, PIVOTGYM_LOAD_PLUGINS="arith")
    r = _run(
        "verify",
        "--turn",
        str(path),
        "--candidate",
        f"({value} - 1) + 1",
        "--candidate",
        str(value + 1),
        "--json",
        env=run_env,
    )
    assert r.returncode == 0, r.stderr
    results = json.loads(r.stdout)
    assert [x["reward"] for x in results] == [1.0, 0.0]
    assert results[0]["verifier"]["name"] == "arith/value"
    r = _run(
        "verify",
        "--turn",
        str(path),
        "--env",
        "arith/chain-v0",
        "--verifier",
        "exact",
        "--candidate",
        f"({value} - 1) + 1",
        "--candidate",
        f" {value} ",
        env=run_env,
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split()[:2] == ["reward", "code"] and lines[2].startswith("0") and lines[3].startswith("1")


@pytest.mark.parametrize(
    "content,message",
    [
        ("not json", "not valid JSON"),
        ("[]", "a JSON object"),
        ('{"messages": 3, "expert": "x"}', '"messages"'),
        ('{"messages": []}', '"expert"'),
        ('{"messages": [], "expert": "x", "tools": {}}', '"tools"'),
    ],
)
def test_bad_turn_files_say_what_to_fix(tmp_path, content, message):
    path = tmp_path / "turn.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        load_turn(path)
    r = _run("verify", "--turn", str(path), "--env", "x/y-v0", "--candidate", "a")
    assert r.returncode == 1 and message in r.stderr and "hint:" in r.stderr and "Traceback" not in r.stderr


def test_missing_env_or_candidate_is_a_clear_error(tmp_path):
    path = tmp_path / "turn.json"
    path.write_text('\ufeff{"messages": [], "expert": "x"}')  # a BOM is fine
    r = _run("verify", "--turn", str(path), "--candidate", "a")
    assert r.returncode == 1 and "--env" in r.stderr
    r = _run("verify", "--turn", str(path), "--env", "x/y-v0")
    assert r.returncode == 1 and "no candidate" in r.stderr


def _turn_file(tmp_path, arith_registry, **extra):
    env = arith_registry.make("arith/chain-v0")
    turn = next(env.expert_trajectories("train", limit=1)).turn(1)
    path = tmp_path / "turn.json"
    path.write_text(
        json.dumps({"env_id": "arith/chain-v0", "messages": turn.prefix, "expert": turn.expert["content"], **extra})
    )
    return path, int(turn.expert["content"])


def test_an_adhoc_turn_is_judged_by_a_verifier_that_checks_known_task(plugin_site, tmp_path, arith_registry):
    """No task_id: the arith verifier sees ``context.known_task() is None`` and judges by value alone."""
    path, value = _turn_file(tmp_path, arith_registry)
    run_env = cli_env(plugin_site, PIVOTGYM_LOAD_PLUGINS="arith")
    r = _run(
        "verify",
        "--turn",
        str(path),
        "--candidate",
        f"({value} - 1) + 1",
        "--candidate",
        str(value + 1),
        "--json",
        env=run_env,
    )
    assert r.returncode == 0, r.stderr
    results = json.loads(r.stdout)
    assert [(x["reward"], x["reason"], x["undecided"]) for x in results] == [
        (1.0, "same_value", None),
        (0.0, "different_value", None),
    ]


def test_verify_exits_non_zero_when_a_verdict_is_undecided(plugin_site, tmp_path, arith_registry):
    """An expert action the verifier cannot read makes it raise: every verdict is printed, the error line says
    how many were not judged and why, and the exit status is 1 (with and without --json)."""
    path, value = _turn_file(tmp_path, arith_registry)
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "expert": "the answer"}))
    run_env = cli_env(plugin_site, PIVOTGYM_LOAD_PLUGINS="arith")
    for json_flag in ((), ("--json",)):
        r = _run("verify", "--turn", str(path), "--candidate", str(value), "--candidate", "x", *json_flag, env=run_env)
        assert r.returncode == 1, (r.stdout, r.stderr)
        assert "error: 2 of 2 verdict(s) undecided" in r.stderr and "verifier 'arith/value'" in r.stderr
        assert "ValueError" in r.stderr and "Traceback" not in r.stderr
        if not json_flag:  # both verdicts printed
            assert [line.split()[:2] for line in r.stdout.splitlines()[2:]] == [["0", "verifier_error"]] * 2
    results = json.loads(r.stdout)
    assert [(x["reward"], x["undecided"][:15]) for x in results] == [(0.0, "verifier_error:")] * 2


def test_a_task_id_the_env_does_not_have_is_an_error_not_an_adhoc_turn(plugin_site, tmp_path, arith_registry):
    path, value = _turn_file(tmp_path, arith_registry, task_id="no-such-task")
    r = _run(
        "verify",
        "--turn",
        str(path),
        "--candidate",
        str(value),
        env=cli_env(plugin_site, PIVOTGYM_LOAD_PLUGINS="arith"),
    )
    assert r.returncode == 1 and "no-such-task" in r.stderr and "hint:" in r.stderr and "Traceback" not in r.stderr


def test_a_verifier_that_needs_the_env_state_tells_its_author_how_to_judge_an_adhoc_turn(plugin_site, tmp_path):
    """The planning verifier steps the env, which an ad-hoc turn does not have: the error line carries the
    whole message, hint included (not the 300-character reason a profile row stores)."""
    path = tmp_path / "turn.json"
    path.write_text(json.dumps({"messages": [{"role": "user", "content": "Put a on b."}], "expert": "(pick-up a)"}))
    r = _run(
        "verify",
        "--env",
        "planning/blocks-v0",
        "--turn",
        str(path),
        "--candidate",
        "(pick-up a)",
        env=cli_env(plugin_site, PIVOTGYM_LOAD_PLUGINS="planning"),
    )
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "AdhocTurn" in r.stderr and "check context.known_task()" in r.stderr
    assert "pass the turn's task_id" in r.stderr


@pytest.mark.slow
def test_the_model_judge_and_a_composition_judge_a_turn_file(tmp_path):
    """`--verifier judge` (the bundled model) and `message:judge|functional` on an ad-hoc BFCL turn file: one
    batch of verdicts with their cost, and the composition names the part that gave each."""
    path = tmp_path / "turn.json"
    call = {"name": "math.factorial", "arguments": {"number": 5}}
    path.write_text(
        json.dumps(
            {"env_id": "tooluse/bfcl-simple-v0", "messages": [{"role": "user", "content": "5!?"}], "expert": [call]}
        )
    )
    right = '<tool_call>{"name": "math.factorial", "arguments": {"number": 5}}</tool_call>'
    wrong = '<tool_call>{"name": "math.factorial", "arguments": {"number": 6}}</tool_call>'
    r = _run("verify", "--turn", str(path), "--verifier", "judge", "--candidate", right, "--candidate", wrong, "--json")
    assert r.returncode == 0, r.stderr
    judged = json.loads(r.stdout)
    assert [x["verifier"]["name"] for x in judged] == ["judge", "judge"]
    assert all(x["undecided"] is None and x["components"]["cost"]["judge_calls"] == 1 for x in judged)
    r = _run("verify", "--turn", str(path), "--verifier", "message:judge|functional", "--candidate", right, "--json")
    [verdict] = json.loads(r.stdout)
    assert verdict["reward"] == 1.0 and verdict["components"]["verifier"] == "tooluse/functional"  # a call turn
