"""YAML envs: discovery (package data and $PIVOTGYM_ENV_PATH), scoring, verifier, contract checks, data pull."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

import pivotgym
from pivotgym.checker import check_env
from pivotgym.declarative import (
    ConfigError,
    DeclarativeEnv,
    EnvConfig,
    discover,
    normalize_answer,
    read_choice,
)
from pivotgym.registry import get_registry, reset_registry
from pivotgym.types import Trajectory
from pivotgym.verify import VerifyContext

CAPITALS = [
    {"question": "France", "answer": "Paris"},
    {"question": "Japan", "answer": "Tokyo"},
    {"question": "Kenya", "answer": "Nairobi"},
    {"question": "Peru", "answer": "Lima"},
]


@pytest.fixture()
def env_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A user folder on $PIVOTGYM_ENV_PATH with a jsonl env, an inline multiple-choice env and a suite."""
    folder = tmp_path / "my-envs"
    folder.mkdir()
    (folder / "capitals.jsonl").write_text("".join(json.dumps(r) + "\n" for r in CAPITALS))
    (folder / "capitals.yaml").write_text(
        "id: trivia/capitals-v0\n"
        "description: capital cities\n"
        "source: {type: jsonl, path: capitals.jsonl, fields: {input: question, target: answer}}\n"
        "splits: {train: {stop: 2}, test: {start: 2}}\n"
        "prompt: {system: Answer with the city only., template: 'What is the capital of {input}?'}\n"
        "answer: {type: text}\n")
    (folder / "colors.yml").write_text(
        "id: trivia/colors-v0\n"
        "source:\n  type: inline\n  examples:\n"
        "    - {input: 'The sky on a clear day is', choices: [green, blue, red], target: blue}\n"
        "    - {input: 'Fresh grass is', choices: [green, blue, red], target: green}\n"
        "prompt: {template: \"{input}\\n{choices}\"}\n"
        "answer: {type: choice}\n"
        "scoring: loglik\n")
    (folder / "suite.yaml").write_text(
        "suite: trivia\nmembers: {trivia/capitals-v0@test: in_domain, trivia/colors-v0: ood}\n")
    monkeypatch.setenv("PIVOTGYM_ENV_PATH", str(folder))
    reset_registry()
    yield folder
    reset_registry()


def test_shipped_envs_and_suites_are_registered():
    registry = get_registry()
    for env_id in ("general/navigate-v0", "general/logical-deduction-v0", "general/object-counting-v0",
                   "code/humaneval-v0"):
        assert registry.envs[env_id].plugin == "builtins"
        assert registry.envs[env_id].verifier == "declarative/answer"
    assert set(registry.suite("ood-quick").members.values()) == {"ood"}
    env = pivotgym.make("general/logical-deduction-v0")
    tasks = env.tasks("test")
    assert len(tasks) == 200 and len({t.id for t in tasks}) == 200
    context, continuations, gold = env.loglik_request(tasks[0])
    assert context.endswith("Answer:") and len(continuations) == 3 and continuations[gold] == " " + tasks[0].data["target"]


def test_user_envs_from_env_path(env_path: Path):
    env = pivotgym.make("trivia/capitals-v0")
    assert [t.data["input"] for t in env.tasks("train")] == ["France", "Japan"]
    assert [t.id for t in env.tasks("test")] == ["00002", "00003"]
    obs, _ = env.reset(options={"task_id": "00002"})
    assert obs[0]["content"] == "Answer with the city only." and obs[1]["content"] == "What is the capital of Kenya?"
    _, reward, terminated, _, info = env.step("nairobi.")
    assert (reward, terminated, info["correct"]) == (1.0, True, True)
    env.reset(options={"task_id": "00002"})
    _, reward, terminated, _, _ = env.step("Lima")
    assert (reward, terminated) == (0.0, True)
    assert get_registry().suite("trivia").members == {"trivia/capitals-v0@test": "in_domain", "trivia/colors-v0": "ood"}
    check_env("trivia/capitals-v0").raise_for_failures()
    check_env("trivia/colors-v0").raise_for_failures()


def test_gymnasium_make_reaches_yaml_envs(env_path: Path):
    import gymnasium

    env = gymnasium.make("pivotgym:trivia/colors-v0")
    obs, _ = env.reset(seed=3)
    assert "(A) green" in obs[-1]["content"]


def test_a_broken_yaml_file_is_reported_and_the_rest_still_load(env_path: Path):
    (env_path / "broken.yaml").write_text("id: not-an-id\nsource: {type: inline, examples: []}\n")
    reset_registry()
    registry = get_registry()
    assert "trivia/capitals-v0" in registry.envs
    errors = " ".join(registry.plugins.infos["builtins"].errors)
    assert "broken.yaml" in errors and "domain/name-v0" in errors


@pytest.mark.parametrize("data, message", [
    ({"id": "a/b-v0", "source": {"type": "csv"}}, "source.type"),
    ({"id": "a/b-v0", "source": {"type": "bigbench"}}, "needs `task:`"),
    ({"id": "a/b-v0", "source": {"type": "inline", "examples": []}, "answer": {"type": "text"},
      "scoring": "loglik"}, "answer.type: choice"),
    ({"id": "a/b-v0", "source": {"type": "inline", "examples": []}, "answer": {"type": "text", "pattern": "("}},
     "not a valid regex"),
])
def test_config_errors_name_the_field(data, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        EnvConfig.parse(data)


def test_read_choice_accepts_letters_and_option_text():
    choices = ["orange ball.", "white ball.", "blue ball."]
    assert read_choice("B", choices) == 1
    assert read_choice("(C) blue ball.", choices) == 2
    assert read_choice("white ball", choices) == 1
    assert read_choice("The answer is: orange ball.", choices) == 0
    assert read_choice("I am not sure", choices) is None
    assert normalize_answer("  Gelatine   Stick. ") == "gelatine stick"


def test_answer_verifier_is_functional_and_exact_is_not():
    env = pivotgym.make("general/object-counting-v0")
    traj = next(env.expert_trajectories("test", limit=1))
    turn = Trajectory.from_dict(traj.to_dict()).turn(0)
    assert turn.expert["content"] == "three"
    context = VerifyContext(turn)
    functional = pivotgym.verifier_for("general/object-counting-v0")
    exact = pivotgym.verifier_for("general/object-counting-v0", kind="exact")
    assert functional.verify(context, "3").equivalent
    assert functional.verify(context, "There are three instruments.").equivalent
    assert not functional.verify(context, "4").equivalent
    assert not exact.verify(context, "3").equivalent


def test_no_answer_is_an_error_observation_with_one_retry():
    env = pivotgym.make("general/navigate-v0")
    env.reset(options={"task_id": "00000"})
    obs, reward, terminated, truncated, info = env.step("hmm")
    assert (reward, terminated, truncated) == (0.0, False, False) and info["error"] == "no_answer"
    _, reward, terminated, _, _ = env.step("True")
    assert (reward, terminated) == (1.0, True)


def test_humaneval_runs_replies_in_the_sandbox():
    env = pivotgym.make("code/humaneval-v0")
    task = env.get_task("HumanEval-0")
    assert env.judge(task, env.render_action(env.expert_actions(task)[0]))[0] == 1.0
    body = "```python\ndef has_close_elements(numbers, threshold):\n    return False\n```"
    reward, details = env.judge(task, body)
    assert reward == 0.0 and "AssertionError" in details["detail"]
    env.reset(options={"task_id": "HumanEval-0"})
    _, _, _, _, info = env.step("```python\ndef oops(:\n```")
    assert info["error"] == "malformed"


def _fake_bigbench_sdist(path: Path) -> None:
    """A tarball laid out like bigbench-1.0.0.tar.gz, with two tiny tasks."""
    tasks = {
        "navigate": {"examples": [{"input": f"Take {i} steps.", "target_scores": {"True": i % 2, "False": 1 - i % 2}}
                                  for i in range(5)]},
        "logical_deduction/three_objects": {"examples": [{"input": "x", "target_scores": {"a": 1, "b": 0}}]},
    }
    with tarfile.open(path, "w:gz") as tar:
        for name, data in tasks.items():
            raw = json.dumps(data).encode()
            info = tarfile.TarInfo(f"bigbench-1.0.0/bigbench/benchmark_tasks/{name}/task.json")
            info.size = len(raw)
            tar.addfile(info, io.BytesIO(raw))


def test_data_pull_extracts_tasks_into_the_cache_which_takes_precedence(tmp_path, monkeypatch):
    from pivotgym.cli import main
    from pivotgym.data_commands import bigbench_cache_dir

    monkeypatch.setenv("PIVOTGYM_CACHE", str(tmp_path / "cache"))
    sdist = tmp_path / "bigbench-1.0.0.tar.gz"
    _fake_bigbench_sdist(sdist)
    assert main(["data", "pull", "bigbench", "--sdist", str(sdist), "--task", "navigate", "--limit", "3"]) == 0
    saved = json.loads((bigbench_cache_dir() / "navigate.json").read_text())
    assert len(saved["examples"]) == 3 and saved["pivotgym_source"]["license"] == "Apache-2.0"
    env = DeclarativeEnv(config=EnvConfig.parse({"id": "general/nav-v0", "source": {"type": "bigbench", "task": "navigate"},
                                                 "answer": {"type": "choice"}}))
    assert [t.data["input"] for t in env.tasks("test")] == ["Take 0 steps.", "Take 1 steps.", "Take 2 steps."]
    assert main(["data", "pull", "bigbench", "--sdist", str(sdist), "--task", "no_such_task"]) == 1


def test_discover_reads_only_yaml(tmp_path):
    (tmp_path / "notes.txt").write_text("not yaml")
    (tmp_path / "s.yaml").write_text("suite: s\nmembers: {a/b-v0: ood}\n")
    envs, suites = discover([tmp_path])
    assert envs == [] and [s.name for s in suites] == ["s"]


def test_example_yaml_env_passes_the_contract_checks(monkeypatch):
    folder = Path(__file__).resolve().parents[1] / "examples" / "yaml_env"
    monkeypatch.setenv("PIVOTGYM_ENV_PATH", str(folder))
    reset_registry()
    try:
        check_env("trivia/capitals-v0").raise_for_failures()
        assert get_registry().suite("capitals-demo").members["trivia/capitals-v0@test"] == "in_domain"
    finally:
        monkeypatch.delenv("PIVOTGYM_ENV_PATH")
        reset_registry()
