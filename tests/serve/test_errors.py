"""Bad input gets a JSON error with a stable code, a message and a hint, never a traceback; the client raises
it as :class:`RemoteError` (or ``ResetNeeded``, as a local env does). Run on the ``lab`` server (64 KiB body
limit); the same app serves ``pivotgym serve``."""

from __future__ import annotations

import gymnasium as gym
import httpx
import pytest

from pivotgym.remote import RemoteEnv, RemoteError

BLOCKS = "planning/blocks-v0"


def refused(response: httpx.Response, status: int, code: str) -> dict:
    """Assert ``response`` is the JSON error ``code`` with ``status``, a message and a hint; its body."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error", "message", "hint"}
    assert body["error"] == code and body["message"] and body["hint"]
    assert "Traceback" not in response.text and 'File "' not in response.text
    return body


@pytest.fixture()
def session(lab):
    """A blocks session on the lab server, not reset; closed afterwards."""
    sid = httpx.post(f"{lab}/sessions", json={"env_id": BLOCKS}).json()["session_id"]
    yield sid
    httpx.delete(f"{lab}/sessions/{sid}")


def test_unknown_env(lab):
    body = refused(httpx.post(f"{lab}/sessions", json={"env_id": "planning/blocks-v9"}), 404, "unknown_env")
    assert "planning/blocks-v9" in body["message"]
    with pytest.raises(RemoteError) as exc:
        RemoteEnv(lab, "planning/blocks-v9")
    assert exc.value.status == 404 and exc.value.code == "unknown_env" and exc.value.hint
    refused(httpx.get(f"{lab}/envs/nope/x-v0/tasks"), 404, "unknown_env")


def test_unknown_session(lab):
    for method, path, body in [
        ("POST", "/sessions/0123abc/step", {"action": "x"}),
        ("POST", "/sessions/0123abc/reset", {}),
        ("GET", "/sessions/0123abc", None),
        ("DELETE", "/sessions/0123abc", None),
    ]:
        refused(httpx.request(method, f"{lab}{path}", json=body), 404, "unknown_session")


def test_a_closed_session_says_it_was_closed(lab):
    with RemoteEnv(lab, BLOCKS) as env:
        sid = env.session_id
    body = refused(httpx.post(f"{lab}/sessions/{sid}/reset", json={}), 404, "unknown_session")
    assert "was closed" in body["message"]
    with pytest.raises(RemoteError, match="closed"):
        env.reset()


def test_step_before_reset(lab, session):
    refused(httpx.post(f"{lab}/sessions/{session}/step", json={"action": "(pick-up a)"}), 409, "reset_needed")
    with RemoteEnv(lab, BLOCKS) as env, pytest.raises(gym.error.ResetNeeded):
        env.step("(pick-up a)")  # as a local AgentEnv raises


@pytest.mark.parametrize("action", [3, 1.5, None, True, ["(pick-up a)"], {"text": "(pick-up a)"}])
def test_non_text_action(lab, session, action):
    httpx.post(f"{lab}/sessions/{session}/reset", json={"seed": 0})
    body = refused(httpx.post(f"{lab}/sessions/{session}/step", json={"action": action}), 422, "not_text")
    assert "text" in body["message"]


def test_the_client_raises_on_a_non_text_action(lab):
    with RemoteEnv(lab, BLOCKS) as env:
        env.reset(seed=0)
        with pytest.raises(RemoteError) as exc:
            env.step(3)  # type: ignore[arg-type]
        assert exc.value.code == "not_text" and exc.value.status == 422


def test_an_oversized_body_is_refused_with_413_by_length_and_when_streamed(lab, session):
    big = {"action": "x" * (70 * 1024)}
    refused(httpx.post(f"{lab}/sessions/{session}/step", json=big), 413, "body_too_large")

    def chunks():  # no Content-Length: the server counts while reading
        for _ in range(70):
            yield b"x" * 1024

    refused(httpx.post(f"{lab}/sessions/{session}/step", content=chunks()), 413, "body_too_large")
    assert httpx.get(f"{lab}/health").status_code == 200


def test_an_action_over_the_envs_length_limit(lab):
    with RemoteEnv(lab, BLOCKS, max_action_chars=20) as env:
        assert env.action_space.max_length == 20
        env.reset(seed=0)
        with pytest.raises(RemoteError) as exc:
            env.step("(pick-up " + "a" * 40 + ")")
        assert exc.value.code == "action_too_long" and exc.value.status == 422


@pytest.mark.parametrize(
    ("path", "payload", "fragment"),
    [
        ("/sessions/{sid}/step", b"{not json", "not valid JSON"),
        ("/sessions/{sid}/step", b'{"act": "x"}', "action"),
        ("/sessions/{sid}/step", b'{"action": "x", "extra": 1}', "extra"),
        ("/sessions/{sid}/reset", b'{"seed": "3"}', "seed"),
        ("/sessions/{sid}/reset", b'{"options": [1]}', "options"),
        ("/sessions", b'{"env_id": 5}', "env_id"),
        ("/sessions", b'{"env_id": "planning/blocks-v0", "kwargs": []}', "kwargs"),
        ("/verify/turn", b'{"env_id": "planning/blocks-v0", "turn": {}, "candidates": []}', "candidates"),
    ],
)
def test_malformed_bodies_get_422(lab, session, path, payload, fragment):
    response = httpx.post(
        f"{lab}{path.format(sid=session)}", content=payload, headers={"content-type": "application/json"}
    )
    body = refused(response, 422, "bad_request")
    assert fragment in body["message"]


def test_bad_env_kwargs_and_reset_options(lab, session):
    body = refused(
        httpx.post(f"{lab}/sessions", json={"env_id": BLOCKS, "kwargs": {"colour": "red"}}), 400, "bad_env_kwargs"
    )
    assert "colour" in body["message"]
    refused(httpx.post(f"{lab}/sessions/{session}/reset", json={"options": {"task_id": "nope"}}), 404, "unknown_task")
    refused(httpx.post(f"{lab}/sessions/{session}/reset", json={"options": {"split": "nope"}}), 400, "bad_options")
    refused(httpx.get(f"{lab}/envs/{BLOCKS}/tasks", params={"split": "nope"}), 404, "unknown_split")


def test_unknown_routes_and_methods(lab):
    refused(httpx.get(f"{lab}/no/such/route"), 404, "not_found")
    refused(httpx.put(f"{lab}/sessions"), 405, "method_not_allowed")


def test_an_env_that_crashes_gets_500_without_a_traceback_and_the_server_goes_on(lab):
    with RemoteEnv(lab, "test/sleep-v0") as env:
        response = httpx.post(f"{lab}/sessions/{env.session_id}/reset", json={"options": {"split": "broken"}})
        body = refused(response, 500, "internal_error")
        assert "the env crashed while opening the task" in body["message"]
        env.reset(options={"split": "train"})  # the same session is still usable
        assert env.step("0")[1] == 1.0


def test_an_unreachable_server_is_a_remote_error():
    with pytest.raises(RemoteError) as exc:
        RemoteEnv("http://127.0.0.1:9", BLOCKS, timeout=2)
    assert exc.value.code == "unreachable" and "pivotgym serve" in (exc.value.hint or "")


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--max-sessions", "0"], "max_sessions must be at least 1"),
        (["--idle-timeout", "0"], "idle_timeout must be a positive"),
        (["--port", "70000"], "--port must be between 1 and 65535"),
        (["--nemo-env", "tooluse/nope-v0"], "tooluse/nope-v0"),
    ],
)
def test_the_command_refuses_bad_limits_before_serving(args, fragment, capsys):
    from pivotgym.cli.app import main

    assert main(["serve", *args]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and fragment in err and "Traceback" not in err
