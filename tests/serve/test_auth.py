"""``pivotgym serve --token``: every request but ``/health`` carries the token; a server bound off loopback
refuses to start without one. A real server in a thread of the test process, and the real clients."""

from __future__ import annotations

import json

import httpx
import pytest

from pivotgym.cli import main
from pivotgym.cli.serve import is_loopback
from pivotgym.remote import TOKEN_ENV, RemoteEnv, RemoteError, verify

TOKEN = "s3cret-token"  # the `guarded` server's (conftest.py)


@pytest.mark.parametrize("header", [None, "Bearer wrong", f"Basic {TOKEN}", "Bearer"])
def test_a_request_without_the_token_is_refused_with_how_to_send_it(guarded, header):
    headers = {"Authorization": header} if header else {}
    for method, path in (
        ("GET", "/envs"),
        ("POST", "/sessions"),
        ("POST", "/verify"),
        ("GET", "/openenv/a/b-v0/schema"),
    ):
        answer = httpx.request(method, f"{guarded}{path}", headers=headers, json={})
        assert answer.status_code == 401, (path, answer.text)
        assert answer.json()["error"] == "unauthorized" and "Bearer" in answer.json()["hint"]
    assert httpx.get(f"{guarded}/health").status_code == 200  # liveness stays open


def test_the_clients_send_the_token_given_or_from_the_environment(guarded, monkeypatch):
    with pytest.raises(RemoteError) as info:
        RemoteEnv(guarded, "planning/blocks-v0")
    assert info.value.status == 401
    with RemoteEnv(guarded, "planning/blocks-v0", token=TOKEN) as env:
        obs, _ = env.reset(seed=0)
        assert obs
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    with RemoteEnv(guarded, "planning/blocks-v0") as env:
        env.reset(seed=1)
    turn = {"messages": [{"role": "user", "content": "2+2?"}], "expert": "4"}
    [verdict] = verify(guarded, "general/arithmetic-v0", turn, ["4"])  # through: a verdict, not a 401
    assert verdict["candidate"] == "4" and "reward" in verdict


def test_a_websocket_needs_the_token_too(guarded):
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    base = guarded.replace("http://", "ws://") + "/openenv/general/arithmetic-v0/ws"
    with pytest.raises(InvalidStatus) as info:  # the handshake itself is refused
        connect(base, open_timeout=10)
    assert info.value.response.status_code == 403
    with pytest.raises(InvalidStatus):
        connect(f"{base}?token=wrong", open_timeout=10)
    with connect(f"{base}?token={TOKEN}") as ws:  # OpenEnv's client sets no headers: the query carries it
        ws.send(json.dumps({"type": "reset", "data": {}}))
        assert json.loads(ws.recv(timeout=30))["type"] == "observation"
    with connect(base, additional_headers={"Authorization": f"Bearer {TOKEN}"}) as ws:
        ws.send(json.dumps({"type": "state"}))
        assert json.loads(ws.recv(timeout=30))["type"] == "state"


def test_binding_off_loopback_without_a_token_refuses_to_start(capsys, monkeypatch):
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    assert main(["serve", "--host", "0.0.0.0", "--port", "8100"]) == 1  # refused before anything binds
    err = capsys.readouterr().err
    assert "without authentication" in err and "--token" in err
    assert [is_loopback(h) for h in ("127.0.0.1", "localhost", "::1", "127.1.2.3", "0.0.0.0", "10.0.0.5")] == [
        True,
        True,
        True,
        True,
        False,
        False,
    ]
