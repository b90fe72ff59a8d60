import json
import subprocess
import sys

import pytest
from core_helpers import cli_env


def _run(*args, env=None):
    return subprocess.run([sys.executable, "-m", "pivotgym.cli", *args], capture_output=True, text=True, env=env)


def test_unknown_env_prints_one_line_and_exits_nonzero():
    r = _run("check", "nope/missing-v0")
    assert r.returncode == 1
    assert r.stderr.startswith("error: unknown env 'nope/missing-v0'") and "Traceback" not in r.stderr


def test_debug_shows_the_traceback():
    r = _run("--debug", "check", "nope/missing-v0")
    assert r.returncode != 0 and "Traceback" in r.stderr


def test_usage_errors_exit_2():
    r = _run("envs", "--no-such-flag")
    assert r.returncode == 2 and "No such option" in r.stderr


def test_check_json_and_expert_on_a_third_party_env(plugin_site, tmp_path):
    env = cli_env(plugin_site, PIVOTGYM_LOAD_PLUGINS="arith")
    r = _run("check", "arith/chain-v0", "--json", env=env)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)[0]
    assert report["ok"] and {x["name"] for x in report["results"]} >= {"expert_replay", "verifier"}
    out = tmp_path / "experts.jsonl"
    r = _run("expert", "arith/chain-v0", "--split", "test", "--out", str(out), "--limit", "3", env=env)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 3 and all(row["reward"] == 1.0 and row["env_id"] == "arith/chain-v0" for row in rows)


@pytest.mark.parametrize("page,section", [("README.md", "## The command line"), ("docs/cli.md", "## Every command")])
def test_the_documented_command_blocks_list_every_command(page, section):
    """Every top-level command (``pivotgym suites`` was missing once) appears in the README's command block
    and in the full reference."""
    import re
    from pathlib import Path

    import typer.main

    from pivotgym.cli import app

    commands = set(typer.main.get_command(app).commands)
    text = (Path(__file__).resolve().parents[2] / page).read_text(encoding="utf-8")
    block = text.split(section, 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    documented = set(re.findall(r"^pivotgym (?:--\S+ )*([a-z][\w-]*)", block, flags=re.M))
    assert {"suites", "eval", "envs"} <= commands
    assert sorted(commands - documented) == []


def test_tasks_lists_task_ids_by_split(plugin_site):
    env = cli_env(plugin_site, PIVOTGYM_LOAD_PLUGINS="arith")
    r = _run("tasks", "arith/chain-v0", "--split", "test", "--limit", "2", "--json", env=env)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == [{"id": "test-100", "split": "test"}, {"id": "test-101", "split": "test"}]
    r = _run("tasks", "arith/chain-v0", env=env)
    ids = [line.split() for line in r.stdout.splitlines()[2:]]
    assert len(ids) == 30 and ids[0] == ["train-0", "train"] and ids[-1] == ["test-109", "test"]
    r = _run("tasks", "arith/chain-v0", "--split", "ood", env=env)
    assert r.returncode == 1 and "has no split(s) ['ood']; its splits are ['train', 'test']" in r.stderr
