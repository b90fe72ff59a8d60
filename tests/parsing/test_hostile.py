"""No parser can hold the host (issue 22): short hostile replies that made a parser hold the GIL past the step
deadline, fed to ``step()`` and to ``verify()`` of the envs that read them.

A regex that backtracks (or ``compile()`` on a huge literal) holds the GIL, so the step's deadline thread
cannot even return an error: before the fix, ``"A" + "  A" * 15 + "!"`` took 28 s on a multiple-choice env
with a 2 s deadline, ``"answer"`` + 14 KB of spaces 10 s, a fenced ``<tool_call>`` with 30,000 spaces 15-18 s,
a 6 MB list literal 16.7 s in ``compile()``, and a megabyte of CRLF more than 900 s on ``code/humaneval-v0``.
Each must now come back well inside a 2 s deadline with an error observation (or the env's own judgement of
an answer: reward 0 on a task whose gold option is not A), and each verifier must return a verdict with
reward 0 and a reason, not raise. Strings over an env's action cap are refused before parsing
(``action_too_long``); the ``*_under_cap`` variants check that parsing itself is linear.
"""

from __future__ import annotations

import time

import pytest

import pivotgym
from pivotgym import VerifyContext
from pivotgym.parsing.answers import MAX_CODE_CHARS

DEADLINE = 2.0
#: what a step or a verdict may take beyond the deadline (thread hand-off, a loaded CI machine)
MARGIN = 0.5

HOSTILE: dict[str, str] = {
    "spaced_letters_47": "A" + "  A" * 15 + "!",
    "spaced_letters_56": "A" + "  A" * 18 + "!",
    "answer_then_14k_spaces": "answer" + " " * 14_000,
    "tool_call_30k_spaces": "<tool_call>x" + " " * 30_000 + "y",
    "fenced_tool_call_30k_spaces": "<tool_call>```" + " " * 30_000 + "y</tool_call>",
    "fenced_reply_30k_spaces": "```" + " " * 30_000 + "y",
    "list_literal_6mb": "```python\nx = [" + "1, " * 2_000_000 + "]\n```",
    "crlf_1mb": "\r\n" * 500_000,
    "tool_call_1mb_spaces": "<tool_call>" + " " * 1_000_000,
    "crlf_under_cap": "\r\n" * 45_000,
    "unclosed_fences_under_cap": "```[" * 24_000,
    "spaced_letters_under_cap": "A" + "  A" * 30_000 + "!",
    "list_literal_under_cap": "```python\nx = [" + "1, " * 30_000 + "]\n```",
    "nested_lambdas_under_cap": "```python\ndef f():\n    return " + "lambda: " * 2_000 + "1\n```",
}

ENVS = ["general/logical-deduction-v0", "general/arithmetic-v0", "code/humaneval-v0", "swe/humanevalfix-v0"]
FATAL = {"step_timeout", "env_exception"}


def _task_not_gold_a(env):
    """A task whose gold option is not the first (the spaced-letter strings name option A)."""
    for split in env.splits:
        for task in env.tasks(split):
            choices, target = list(task.data.get("choices") or []), task.data.get("target")
            if target not in choices or choices.index(target) != 0:
                return task
    pytest.fail(f"{env.env_id}: no task")


@pytest.fixture(scope="module", params=ENVS)
def env(request):
    env = pivotgym.make(request.param)
    env.step_timeout = DEADLINE
    yield env
    env.close()


def test_each_hostile_reply_steps_within_the_deadline(env):
    task = _task_not_gold_a(env)
    failures = []
    for label, text in HOSTILE.items():
        env.reset(options={"task_id": task.id})
        start = time.monotonic()
        try:
            obs, reward, _terminated, _truncated, info = env.step(text)
        except Exception as exc:
            failures.append(f"{label}: step raised {exc!r}"[:300])
            continue
        took = time.monotonic() - start
        if took > DEADLINE + MARGIN or info.get("error") in FATAL:
            failures.append(f"{label}: {took:.2f}s, error {info.get('error')}")
        elif reward != 0.0:
            failures.append(f"{label}: reward {reward}")
        elif not obs or not isinstance(obs[0].get("content"), str):
            failures.append(f"{label}: no observation")
        if len(text) > env.max_action_chars and info.get("error") != "action_too_long":
            failures.append(f"{label}: over the cap but error {info.get('error')!r}")
    assert not failures, f"{env.env_id}:\n  " + "\n  ".join(failures)


def test_each_hostile_candidate_gets_a_verdict_within_the_deadline(env):
    task = _task_not_gold_a(env)
    expert = env.expert_actions(task)[0]
    context = VerifyContext.from_turn(env.env_id, env.initial_messages(task), expert, task_id=task.id)
    failures = []
    for kind in ("functional", "exact"):
        verifier = pivotgym.verifier_for(env.env_id, kind=kind)
        for label, text in HOSTILE.items():
            start = time.monotonic()
            try:
                verdict = verifier.verify(context, text)
            except Exception as exc:
                failures.append(f"{verifier.name} / {label}: raised {exc!r}"[:300])
                continue
            took = time.monotonic() - start
            if took > DEADLINE + MARGIN:
                failures.append(f"{verifier.name} / {label}: {took:.2f}s")
            if verdict.reward != 0.0 or not verdict.reason:
                failures.append(f"{verifier.name} / {label}: verdict {verdict.reward} {verdict.reason[:80]!r}")
    assert not failures, f"{env.env_id}:\n  " + "\n  ".join(failures)


def test_the_action_cap_is_an_error_observation_and_a_verdict_reason():
    env = pivotgym.make("general/navigate-v0", max_action_chars=50)
    assert env.action_space.max_length == 50
    env.reset(options={"task_id": "00000"})
    obs, reward, terminated, truncated, info = env.step("(A)" + " " * 60)
    assert (reward, terminated, truncated, info["error"]) == (0.0, False, False, "action_too_long")
    assert "at most 50" in obs[0]["content"]
    obs, reward, terminated, _truncated, info = env.step("(A)")  # the episode goes on
    assert terminated and "error" not in info
    task = env.get_task("00000")
    context = VerifyContext.from_turn(env.env_id, env.initial_messages(task), "(A)", task_id=task.id)
    context.env_kwargs["max_action_chars"] = 50
    verdict = pivotgym.verifier_for(env.env_id).verify(context, "(A)" + " " * 60)
    assert verdict.reward == 0.0 and verdict.reason.startswith("action_too_long")


def test_the_cap_is_a_class_attribute_and_a_bad_value_is_an_error():
    from pivotgym.declarative import DeclarativeEnv

    assert DeclarativeEnv.max_action_chars == pivotgym.env.DEFAULT_MAX_ACTION_CHARS
    with pytest.raises(ValueError, match="max_action_chars"):
        pivotgym.make("general/navigate-v0", max_action_chars=0)


def test_code_over_the_code_cap_is_refused_before_compile():
    env = pivotgym.make("code/humaneval-v0")
    env.reset(options={"task_id": "HumanEval-0"})
    code = "```python\nx = [" + "1, " * (MAX_CODE_CHARS // 3 + 10) + "]\n```"
    _obs, reward, _terminated, _truncated, info = env.step(code)
    assert (reward, info["error"]) == (0.0, "too_long")
