"""Every command that reports a failure exits non-zero, through the installed ``pivotgym`` console script
(what CI runs), not only through :func:`pivotgym.cli.main`."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from core_helpers import cli_env


def _console_script() -> str:
    """The ``pivotgym`` entry point installed beside this interpreter (else the one on PATH)."""
    beside = Path(sys.executable).parent / "pivotgym"
    found = str(beside) if beside.exists() else shutil.which("pivotgym")
    assert found, "the pivotgym console script is not installed"
    return found


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([_console_script(), *args], capture_output=True, text=True, env=env, timeout=300)


def test_exit_status_of_a_returned_value():
    from pivotgym.cli.app import exit_status

    assert exit_status(None) == 0 and exit_status(0) == 0 and exit_status(3) == 3
    assert exit_status(True) == 0 and exit_status("text") == 0


def test_a_command_raising_exit_or_returning_a_code_sets_the_status(monkeypatch):
    """The fix lives in ``main``: any command's ``typer.Exit(code)`` or integer return reaches the process."""
    import importlib

    import typer

    app_module = importlib.import_module("pivotgym.cli.app")  # the module (``pivotgym.cli.app`` is also the app)

    probe = typer.Typer()

    @probe.command("exit")
    def exit_cmd(code: int) -> None:
        raise typer.Exit(code)

    @probe.command("ret")
    def ret_cmd(code: int) -> int:
        return code

    monkeypatch.setattr(app_module, "app", probe)
    assert app_module.main(["exit", "4"]) == 4
    assert app_module.main(["ret", "5"]) == 5
    assert app_module.main(["ret", "0"]) == 0


@pytest.mark.parametrize("as_json", [False, True])
def test_check_that_prints_failed_exits_1(plugin_site, as_json):
    env = cli_env(plugin_site, PIVOTGYM_LOAD_PLUGINS="arith,hijack")
    args = ["check", "arith/chain-v0", "--verifier", "hijack/credit-everything"] + (["--json"] if as_json else [])
    r = _run(*args, env=env)
    assert r.returncode == 1, (r.stdout, r.stderr)
    if as_json:
        assert json.loads(r.stdout)[0]["ok"] is False
    else:
        assert r.stdout.startswith("arith/chain-v0: FAILED")


def test_check_that_passes_exits_0(plugin_site):
    r = _run("check", "arith/chain-v0", env=cli_env(plugin_site, PIVOTGYM_LOAD_PLUGINS="arith"))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("arith/chain-v0: OK")


@pytest.mark.parametrize("as_json", [False, True])
def test_plugins_with_an_error_row_exits_1_and_still_prints_everything(plugin_site, as_json):
    r = _run("plugins", *(["--json"] if as_json else []), env=cli_env(plugin_site))
    assert r.returncode == 1, r.stderr
    if as_json:
        by_name = {p["name"]: p for p in json.loads(r.stdout)}
        assert by_name["broken-import"]["error"] and by_name["arith"]["error"] is None
    else:
        rows = {line.split()[0]: line for line in r.stdout.splitlines()[2:]}
        assert "ERROR" in rows["broken-import"] and "ok" in rows["arith"].split()
        assert "ModuleNotFoundError" in r.stderr


def test_plugins_without_errors_exits_0(plugin_site):
    r = _run("plugins", "--json", env=cli_env(plugin_site, PIVOTGYM_LOAD_PLUGINS="arith"))
    assert r.returncode == 0, r.stderr
    assert all(p["error"] is None for p in json.loads(r.stdout))


def test_verify_with_an_undecided_verdict_exits_1(plugin_site, tmp_path):
    """`hijack/credit-applicable` steps the env, which an ad-hoc turn (no task_id) does not have: the verdict is
    undecided, and the command says so in its exit status (the other verdicts of the run are still printed)."""
    turn = tmp_path / "turn.json"
    turn.write_text(json.dumps({"messages": [{"role": "user", "content": "Start with 2. Add 3."}], "expert": "5"}))
    env = cli_env(plugin_site, PIVOTGYM_LOAD_PLUGINS="arith,hijack")
    base = ["verify", "--env", "arith/chain-v0", "--turn", str(turn), "--candidate", "5", "--json"]
    r = _run(*base, "--verifier", "hijack/credit-applicable", env=env)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert json.loads(r.stdout)[0]["reward"] == 0
    r = _run(*base, "--verifier", "exact", env=env)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)[0]["reward"] == 1


def test_check_all_reports_an_env_that_cannot_be_made_and_goes_on(monkeypatch, capsys):
    """`check all` used to stop at the first env whose `make` raised (a disabled env, a broken factory):
    now that env is a FAILED report (`setup`), the next ones still run, and the exit status is 1."""
    import pivotgym.registry as registry
    from pivotgym.cli import main

    navigate = next(s for s in registry.list_envs() if s.id == "general/navigate-v0")
    picked = [_Fake("no/such-env-v0"), navigate]
    monkeypatch.setattr(registry, "list_envs", lambda: picked)
    assert main(["check", "all", "--json"]) == 1
    reports = {r["env_id"]: r for r in json.loads(capsys.readouterr().out)}
    assert reports["no/such-env-v0"]["ok"] is False
    assert reports["no/such-env-v0"]["results"][0]["name"] == "setup"
    assert "unknown env 'no/such-env-v0'" in reports["no/such-env-v0"]["results"][0]["detail"]
    assert reports["general/navigate-v0"]["ok"] is True


class _Fake:
    def __init__(self, env_id: str) -> None:
        self.id = env_id
