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
from pivotgym.registry import RegistryError, get_registry, reset_registry
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
        "answer: {type: text}\n"
    )
    (folder / "colors.yml").write_text(
        "id: trivia/colors-v0\n"
        "source:\n  type: inline\n  examples:\n"
        "    - {input: 'The sky on a clear day is', choices: [green, blue, red], target: blue}\n"
        "    - {input: 'Fresh grass is', choices: [green, blue, red], target: green}\n"
        'prompt: {template: "{input}\\n{choices}"}\n'
        "answer: {type: choice}\n"
        "scoring: loglik\n"
    )
    (folder / "suite.yaml").write_text(
        "suite: trivia\nmembers: {trivia/capitals-v0@test: in_domain, trivia/colors-v0: ood}\n"
    )
    monkeypatch.setenv("PIVOTGYM_ENV_PATH", str(folder))
    reset_registry()
    yield folder
    reset_registry()


def test_shipped_envs_and_suites_are_registered():
    registry = get_registry()
    for env_id in (
        "general/navigate-v0",
        "general/logical-deduction-v0",
        "general/object-counting-v0",
        "general/arithmetic-v0",
        "code/humaneval-v0",
    ):
        assert registry.envs[env_id].plugin == "builtins"
        assert registry.envs[env_id].verifier == "declarative/answer"
    assert set(registry.suite("ood-quick").members.values()) == {"ood"}
    env = pivotgym.make("general/logical-deduction-v0")
    tasks = env.tasks("test")
    assert len(tasks) == 200 and len({t.id for t in tasks}) == 200
    context, continuations, gold = env.loglik_request(tasks[0])
    assert (
        context.endswith("Answer:") and len(continuations) == 3 and continuations[gold] == " " + tasks[0].data["target"]
    )


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


def test_a_variant_file_fixes_keyword_arguments_of_another_env(env_path: Path):
    """`base:` + `kwargs:` registers another env with its constructor's arguments set (gymnasium's registration
    kwargs as a file): same factory, verifier and splits; `make`'s own keyword arguments still win. A variant of
    an env nobody registers is unusable with a problem naming it, and the other envs still load."""
    (env_path / "short.yaml").write_text(
        "id: trivia/capitals-short-v0\nbase: trivia/capitals-v0\nkwargs: {max_new_tokens: 7, max_turns: 1}\n"
    )
    (env_path / "chain.yaml").write_text("id: trivia/capitals-chain-v0\nbase: trivia/capitals-short-v0\n")
    (env_path / "orphan.yaml").write_text("id: trivia/orphan-v0\nbase: trivia/nowhere-v0\n")
    reset_registry()
    registry = get_registry()
    spec, base = registry.envs["trivia/capitals-short-v0"], registry.envs["trivia/capitals-v0"]
    assert (spec.base, spec.factory, spec.verifier, spec.splits) == (
        "trivia/capitals-v0",
        base.factory,
        "declarative/answer",
        base.splits,
    )
    env = pivotgym.make("trivia/capitals-short-v0")
    assert (env.env_id, env.max_new_tokens, env.max_turns) == ("trivia/capitals-short-v0", 7, 1)
    assert pivotgym.make("trivia/capitals-short-v0", max_new_tokens=9).max_new_tokens == 9
    assert pivotgym.make("trivia/capitals-chain-v0").max_new_tokens == 7  # a variant of a variant
    assert registry.verifier_name_for("trivia/capitals-short-v0") == "declarative/answer"
    with pytest.raises(RegistryError, match="variant of 'trivia/nowhere-v0', which no plugin registers"):
        pivotgym.make("trivia/orphan-v0")
    assert pivotgym.make("trivia/capitals-v0").max_new_tokens != 7  # the base is untouched
    pivotgym.register("notebook/capitals-v0", None, base="trivia/capitals-v0", max_new_tokens=5)  # from code
    assert pivotgym.make("notebook/capitals-v0").max_new_tokens == 5
    with pytest.raises(RegistryError, match="no env 'trivia/nowhere-v0' is registered"):
        pivotgym.register("notebook/orphan-v0", None, base="trivia/nowhere-v0")


@pytest.mark.parametrize(
    "text,message",
    [
        ("id: a/b-v0\nbase: a/c-v0\nkwargz: {}\n", r"kwargz: unknown key"),
        ("id: a/b-v0\nbase: nope\n", r"base: must look like 'domain/name-v0'"),
        ("id: a/b-v0\nbase: a/b-v0\n", r"base: names the variant itself"),
    ],
)
def test_a_variant_file_is_checked_whole(tmp_path, text, message):
    (tmp_path / "v.yaml").write_text(text)
    with pytest.raises(ConfigError, match=message):
        discover([tmp_path])


def test_gymnasium_make_reaches_yaml_envs(env_path: Path):
    import gymnasium

    env = gymnasium.make("pivotgym:trivia/colors-v0")
    obs, _ = env.reset(seed=3)
    assert "(A) " in obs[-1]["content"] and "green" in obs[-1]["content"]  # options shuffled per item


def test_a_broken_yaml_file_is_reported_and_the_rest_still_load(env_path: Path):
    (env_path / "broken.yaml").write_text("id: not-an-id\nsource: {type: inline, examples: []}\n")
    reset_registry()
    registry = get_registry()
    assert "trivia/capitals-v0" in registry.envs
    errors = " ".join(registry.plugins.infos["builtins"].errors)
    assert "broken.yaml" in errors and "domain/name-v0" in errors


@pytest.mark.parametrize(
    "data, message",
    [
        ({"id": "a/b-v0", "source": {"type": "csv"}}, "source.type"),
        ({"id": "a/b-v0", "source": {"type": "bigbench"}}, "needs `task:`"),
        (
            {
                "id": "a/b-v0",
                "source": {"type": "inline", "examples": []},
                "answer": {"type": "text"},
                "scoring": "loglik",
            },
            "answer.type: choice",
        ),
        (
            {"id": "a/b-v0", "source": {"type": "inline", "examples": []}, "answer": {"type": "text", "pattern": "("}},
            "not a valid regex",
        ),
    ],
)
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
    assert read_choice("The correct answer is (B).", choices) == 1
    assert read_choice("Answer: C", choices) == 2 and read_choice("answer is (D)", choices) is None
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
        "navigate": {
            "examples": [
                {"input": f"Take {i} steps.", "target_scores": {"True": i % 2, "False": 1 - i % 2}} for i in range(5)
            ]
        },
        "logical_deduction/three_objects": {"examples": [{"input": "x", "target_scores": {"a": 1, "b": 0}}]},
    }
    with tarfile.open(path, "w:gz") as tar:
        for name, data in tasks.items():
            raw = json.dumps(data).encode()
            info = tarfile.TarInfo(f"bigbench-1.0.0/bigbench/benchmark_tasks/{name}/task.json")
            info.size = len(raw)
            tar.addfile(info, io.BytesIO(raw))


def test_data_pull_extracts_tasks_into_the_cache_which_takes_precedence(tmp_path, monkeypatch):
    from pivotgym.bigbench import bigbench_cache_dir
    from pivotgym.cli import main

    monkeypatch.setenv("PIVOTGYM_CACHE", str(tmp_path / "cache"))
    sdist = tmp_path / "bigbench-1.0.0.tar.gz"
    _fake_bigbench_sdist(sdist)
    assert main(["data", "pull", "bigbench", "--sdist", str(sdist), "--task", "navigate", "--limit", "3"]) == 0
    saved = json.loads((bigbench_cache_dir() / "navigate.json").read_text())
    assert len(saved["examples"]) == 3 and saved["pivotgym_source"]["license"] == "Apache-2.0"
    env = DeclarativeEnv(
        config=EnvConfig.parse(
            {"id": "general/nav-v0", "source": {"type": "bigbench", "task": "navigate"}, "answer": {"type": "choice"}}
        )
    )
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


# ---------------------------------------------------------------------------- OOD envs that can move
def _shipped_yaml_envs() -> list[str]:
    registry = get_registry()
    return sorted(
        e for e, spec in registry.envs.items() if spec.plugin == "builtins" and spec.verifier == "declarative/answer"
    )


def _choice_envs() -> list[str]:
    return [e for e in _shipped_yaml_envs() if pivotgym.make(e).config.answer["type"] == "choice"]


def test_every_shipped_env_is_generated_in_the_chat_format():
    """No shipped env is log-likelihood scored any more: the model answers, the answer is parsed."""
    envs = _shipped_yaml_envs()
    assert {"general/arithmetic-v0", "general/navigate-v0", "general/date-understanding-v0"} <= set(envs)
    for env_id in envs:
        env = pivotgym.make(env_id)
        assert env.config.scoring == "generate", env_id
        if env.config.answer["type"] == "choice":
            assert env.config.max_new_tokens <= 8, env_id  # a letter: cheap on CPU


TOLERANCE = 0.02  # balanced shuffling: at most one item per option count off the chance rate


@pytest.mark.parametrize("limit", [None, 100])
def test_constant_answers_score_at_chance_on_every_shipped_choice_env(limit):
    """Always "A", always "(A)", always the first or the last option's letter, always the first-listed
    option's text, and (for a fixed label set such as True/False) always one label: each scores the chance
    rate mean(1/k) within TOLERANCE, on the whole split and on its first 100 items (the demo's limit)."""
    envs = _choice_envs()
    assert len(envs) >= 5
    for env_id in envs:
        env = pivotgym.make(env_id)
        tasks = env.tasks("test")[:limit]
        assert len(tasks) >= (limit or 100), env_id  # n >= 100 where the data has it
        chance = sum(1 / len(t.data["choices"]) for t in tasks) / len(tasks)
        labels = {c for t in tasks for c in t.data["choices"]}
        strategies = {
            "A": lambda t: "A",
            "(A)": lambda t: "(A)",
            "last letter": lambda t: f"({chr(64 + len(t.data['choices']))})",
            "first text": lambda t: t.data["choices"][0],
            "last text": lambda t: t.data["choices"][-1],
        }
        if len(labels) <= 3:  # the same options on every item: answering one of them always
            strategies.update({f"always {label}": (lambda t, label=label: label) for label in labels})
        for name, answer in strategies.items():
            score = sum(env.judge(t, answer(t))[0] for t in tasks) / len(tasks)
            assert abs(score - chance) <= TOLERANCE, (env_id, name, score, chance)


def test_choice_order_is_shuffled_by_a_fixed_seed_and_the_gold_moves():
    from pivotgym.declarative import shuffle_choices

    env = pivotgym.make("general/date-understanding-v0")
    raw = json.loads((Path(pivotgym.__file__).parent / "data/bigbench/date_understanding.json").read_text())
    first_is_gold = sum(
        max(e["target_scores"], key=e["target_scores"].get) == next(iter(e["target_scores"]))
        for e in raw["examples"][:200]
    )
    assert first_is_gold >= 190  # the raw data lists the answer first: why always-"A" used to score 23/24
    tasks = env.tasks("test")
    again = pivotgym.make("general/date-understanding-v0").tasks("test")
    assert [t.data["choices"] for t in tasks] == [t.data["choices"] for t in again]  # fixed seed
    positions = [t.data["choices"].index(t.data["target"]) for t in tasks]
    assert len(set(positions)) == 6 and max(positions.count(p) for p in set(positions)) <= 40
    rows = [{"id": str(i), "choices": ["a", "b", "c"], "target": "a"} for i in range(9)]
    assert shuffle_choices(rows, "x/y-v0", 1) != shuffle_choices(rows, "x/y-v0", 2)
    assert sorted(r["choices"].index("a") for r in shuffle_choices(rows, "x/y-v0", 1)) == [0, 0, 0, 1, 1, 1, 2, 2, 2]


def test_balanced_labels_and_worked_examples_in_the_prompt():
    from pivotgym.declarative import balance_labels

    rows = [{"id": str(i), "target": "True" if i < 7 else "False"} for i in range(10)]
    assert [r["target"] for r in balance_labels(rows)] == ["True", "False"] * 3
    env = pivotgym.make("general/arithmetic-v0")
    task = env.tasks("test")[3]
    msgs = env.initial_messages(task)
    # worked examples live in the system prompt: as assistant messages they would be pivot turns
    assert [m["role"] for m in msgs] == ["system", "user"] and msgs[-1]["content"] == task.data["input"]
    assert "Example question: What is 12 plus 5?\nExample answer: 12 + 5 = 17" in msgs[0]["content"]
    traj = next(env.expert_trajectories("test", limit=1))
    assert len(traj.turns()) == 1
    inputs = {t.data["input"] for t in env.tasks("test")}
    assert len(inputs) == 100 and not any(q in msgs[0]["content"] for q in inputs)  # shots are not test items
    assert task.data["input"] == "What is 0 plus 3?"
    for reply, reward in [
        ("0 + 3 = 3", 1.0),
        ("3", 1.0),
        ("The answer to this question is 3", 1.0),
        ("0 + 3 = 4", 0.0),
        ("What is 0 plus 3?", 0.0),
        ("30", 0.0),
    ]:
        assert env.judge(task, reply)[0] == reward, reply


HOSTILE = [
    "(A)" * 10000,
    "[" * 100000,
    "9" * 100000,
    "\ud800 lone surrogate",
    "nul\x00byte",
    "",
    " ",
    "A" * 1_000_000,
    "(" + "A" * 5000,
    "\u202e(B)",
    "=" * 5000 + "7",
]


def test_no_yaml_env_raises_on_any_string():
    """Issue 13: every shipped YAML env answers a hostile reply with an error observation or reward 0 and a
    reason, through step() and through its verifier; never an exception, never the env's crash guard."""
    for env_id in _shipped_yaml_envs():
        env = pivotgym.make(env_id)
        task = env.tasks("test")[0]
        verifier = pivotgym.verifier_for(env_id)
        traj = next(env.expert_trajectories("test", limit=1))
        context = VerifyContext(Trajectory.from_dict(traj.to_dict()).turn(0))
        for text in HOSTILE:
            env.reset(options={"task_id": task.id})
            _obs, reward, _terminated, _truncated, info = env.step(text)
            assert 0.0 <= reward <= 1.0 and info.get("error") != "env_exception", (env_id, text[:20], info)
            verdict = verifier.verify(context, text)  # "(A)(A)..." may well be read as answer A: no crash
            assert 0.0 <= verdict.reward <= 1.0 and verdict.reason, (env_id, text[:20])
            if env.config.answer["type"] == "code":
                assert reward == 0.0 and verdict.reward == 0.0  # no hostile string passes HumanEval


@pytest.mark.parametrize(
    "reply, expected",
    [
        ("(A)(B)(C)", None),
        ("A B C D E", None),
        ("The answer is (A) or (B)", None),
        ("A, B, C, D or E", None),
        ("(A) (A)", 0),
        ("B.", 1),
        ("The correct answer is (C).", 2),
        ("A man walks. The answer is (C)", 2),
        ("Answer: D", 3),
        ("x3", 2),
    ],
)
def test_a_hedge_over_several_options_is_no_answer(reply, expected):
    """Naming several options must not be credited whenever one of them is right (a reward hack)."""
    from pivotgym.declarative import read_choice

    assert read_choice(reply, ["x1", "x2", "x3", "x4", "x5"]) == expected


@pytest.mark.parametrize(
    "text, message",
    [
        ("promt: {template: '{input}'}\n", ":3: promt: unknown key (did you mean 'prompt'?)"),
        ("prompt: {tempate: '{input}'}\n", ":3: prompt.tempate: unknown key (did you mean 'template'?)"),
        (
            "answer: {type: choise}\n",
            ":3: answer.type: must be one of choice, text, code, got 'choise' (did you mean 'choice'?)",
        ),
        ("splits: {test: {begin: 0}}\n", ":3: splits.test.begin: unknown key"),
        ("max_new_tokens: lots\n", ":3: max_new_tokens: expected an integer or null, got 'lots'"),
    ],
)
def test_a_yaml_env_file_is_checked_whole_with_file_and_line(tmp_path, text, message):
    """Every key of an env file, at any depth, is known (a typo like `promt:` used to give the raw input
    as the prompt), and every error names FILE:LINE and the dotted key."""
    from pivotgym.declarative import read_yaml

    path = tmp_path / "env.yaml"
    path.write_text("id: a/b-v0\nsource: {type: inline, examples: [{input: x, target: y}]}\n" + text)
    with pytest.raises(ConfigError) as info:
        EnvConfig.parse(*read_yaml(path)[:1], path, read_yaml(path)[1])
    assert str(info.value) == f"{path}{message}"


def test_a_suite_file_with_an_unknown_key_or_role_is_an_error(tmp_path):
    from pivotgym.declarative import parse_suite, read_yaml

    path = tmp_path / "suite.yaml"
    path.write_text("suite: s\nmembers: {a/b-v0: ood}\ndescriptoin: typo\n")
    with pytest.raises(ConfigError, match=r"suite.yaml:3: descriptoin: unknown key \(did you mean 'description'\?\)"):
        parse_suite(*read_yaml(path)[:1], path, read_yaml(path)[1])
    path.write_text("suite: s\nmembers:\n  a/b-v0: odd\n")
    with pytest.raises(
        ConfigError, match=r"suite.yaml:3: members.a/b-v0: role must be 'in_domain' or 'ood', got 'odd'"
    ):
        parse_suite(*read_yaml(path)[:1], path, read_yaml(path)[1])


def test_calibration_candidates_are_every_option_of_a_choice_task_and_none_for_free_text():
    env = pivotgym.make("general/logical-deduction-v0")
    env.reset(options={"split": "test"}, seed=0)
    options = list(env.task.data["choices"])
    found = env.calibration_candidates("(A)")
    assert found == [f"({'ABCDEFG'[i]})" for i in range(len(options))] + options
    text_env = pivotgym.make("general/arithmetic-v0")
    text_env.reset(options={"split": "test"}, seed=0)
    assert text_env.calibration_candidates("42") == []
