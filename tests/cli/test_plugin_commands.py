"""Plugins add their own commands under ``pivotgym`` through the ``register_commands`` hook."""

from __future__ import annotations

import subprocess
import sys
import types
from collections.abc import Iterator

import pytest
import typer
from typer.testing import CliRunner

import pivotgym
from pivotgym.cli.app import add_plugin_commands  # imported first: the process's app keeps the installed plugins


def _plugin(name: str, register_commands) -> types.ModuleType:
    module = types.ModuleType(name)
    module.register_commands = pivotgym.hookimpl(register_commands)  # type: ignore[attr-defined]
    return module


def _greet(cli: typer.Typer) -> None:
    group = typer.Typer()

    @group.command("hello")
    def hello(name: str = "world") -> None:
        typer.echo(f"hello {name}")

    cli.add_typer(group, name="greet")


def _squat(cli: typer.Typer) -> None:
    @cli.command("train")  # the core's own command: must not replace it
    def train() -> None:
        typer.echo("squatted")

    @cli.command("squat-ok")
    def ok() -> None:
        typer.echo("ok")


def _broken(cli: typer.Typer) -> None:
    raise RuntimeError("no commands today")


@pytest.fixture()
def registry_with_commands() -> Iterator[object]:
    from pivotgym.plugins import PluginManager
    from pivotgym.registry import Registry, reset_registry

    pm = PluginManager()
    pm.load_builtins()
    for name, hook in (("greeter", _greet), ("squatter", _squat), ("broken", _broken)):
        pm.add(_plugin(name, hook), name)
    registry = Registry.from_plugins(pm)
    reset_registry(registry)
    yield registry
    reset_registry()


def test_a_plugins_commands_join_the_app_and_a_taken_name_or_a_raising_hook_is_reported(registry_with_commands):
    app = typer.Typer()

    @app.command("train")
    def core_train() -> None:
        typer.echo("core")

    @app.command("other")
    def other() -> None:
        typer.echo("other")

    added = add_plugin_commands(app)
    assert sorted(added) == ["greet", "squat-ok"]
    runner = CliRunner()
    assert runner.invoke(app, ["greet", "hello", "--name", "pivot"]).output == "hello pivot\n"
    assert runner.invoke(app, ["train"]).output == "core\n"  # the core's command kept
    assert runner.invoke(app, ["squat-ok"]).output == "ok\n"
    infos = registry_with_commands.plugins.infos  # type: ignore[attr-defined]
    assert "'train' is taken" in (infos["squatter"].failure_for("register_commands") or "")
    assert "no commands today" in (infos["broken"].failure_for("register_commands") or "")
    assert infos["greeter"].failure_for("register_commands") is None


def test_the_first_party_domains_commands_run_under_pivotgym():
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "pivotgym.cli", *args], capture_output=True, text=True)

    r = run("planning", "generate", "--help")  # the command's own parser answers --help
    assert r.returncode == 0 and r.stdout.startswith("usage: pivotgym planning generate"), r.stderr
    r = run("reasoning", "calibrate", "--help")
    assert r.returncode == 0 and "usage: pivotgym reasoning calibrate" in r.stdout, r.stderr
    r = run("swe", "--help")
    assert r.returncode == 0 and "synth" in r.stdout and "swebench-eval" in r.stdout, r.stderr
