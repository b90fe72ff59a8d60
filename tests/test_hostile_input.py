"""Hostile strings against every registered env and its verifier (issue 13: no env and no verifier raises on
any string).

For every env id in the registry: reset a task, step with each hostile string and require a normal step
result (no exception, no ``env_exception`` or ``step_timeout`` ending the episode, reward 0, an error
observation or the env's own judgement of a final answer), then run the env's registered verifier on a
real expert turn with the same strings and require a verdict of reward 0 with a reason, never an
exception. Where reward 1 is the correct judgement of a hostile string (``LEGITIMATE_ANSWERS``) it is
allowed, case by case.
"""

from __future__ import annotations

import json
import time

import pytest

import pivotgym
from pivotgym import VerifyContext

#: what a policy (or an attacker) may send; each once per env and once per verifier
HOSTILE: dict[str, str] = {
    "deep_brackets": "[" * 50_000,
    "deep_braces": "{" * 50_000,
    "paren_pairs": "(A)" * 10_000,
    "deep_parens": "(" * 50_000,
    "deep_json_tool_call": '<tool_call>{"name": "f", "arguments": ' + "[" * 50_000 + "</tool_call>",
    "lone_surrogate": "answer \ud800 (\udfff)",
    "nul_bytes": "\x00" * 8 + '(a\x00b)\x00{"name": "\x00"}',
    "one_megabyte": "word " * 200_000,
}
#: steps that end an episode because the env failed, not because the action was wrong
FATAL = {"env_exception", "step_timeout"}
#: (env id pattern, input) where reward 1 is the right verdict, not a hole: reviewed one by one
LEGITIMATE_ANSWERS = {
    ("general/*", "paren_pairs"): "'(A)(A)...' names option (A) of a multiple-choice task",
    ("tooluse/bfcl-irrelevance-v0", "nul_bytes"): "any reply without a function call is the correct answer",
}


def _legitimate(env_id: str, label: str) -> bool:
    from fnmatch import fnmatch

    return any(fnmatch(env_id, pattern) and label == name for pattern, name in LEGITIMATE_ANSWERS)


STEP_TIMEOUT_S = 10.0


def _env_ids() -> list[str]:
    return [spec.id for spec in pivotgym.list_envs()]


def _huge_int_call(env) -> str:
    """A call of the env's first tool (any name when it has none) with a 400-digit integer argument,
    rendered the way the env renders expert tool calls."""
    name, param = "f", "x"
    for schema in env.tool_schemas() or []:
        fn = schema.get("function", schema)
        name = fn.get("name", name)
        param = next(iter((fn.get("parameters") or {}).get("properties") or {}), param)
        break
    arguments = json.dumps({param: 10**400 + 7})
    msg = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "call_0", "type": "function", "function": {"name": name, "arguments": arguments}}],
    }
    rendered = env.render_action(msg)
    return rendered or f'<tool_call>{{"name": "{name}", "arguments": {arguments}}}</tool_call>'


def _inputs(env) -> dict[str, str]:
    return {**HOSTILE, "huge_int_tool_call": _huge_int_call(env)}


def _first_task(env):
    for split in env.splits:
        tasks = env.tasks(split)
        if tasks:
            return split, tasks[0]
    pytest.fail(f"{env.env_id}: no split has tasks")


@pytest.mark.parametrize("env_id", _env_ids())
def test_hostile_strings_give_an_error_observation_and_the_episode_goes_on(env_id):
    env = pivotgym.make(env_id)
    env.step_timeout = STEP_TIMEOUT_S
    _split, task = _first_task(env)
    env.reset(options={"task_id": task.id})
    failures = []
    for label, text in _inputs(env).items():
        start = time.monotonic()
        try:
            obs, reward, terminated, truncated, info = env.step(text)
        except Exception as exc:
            failures.append(f"{label}: step raised {exc!r}"[:400])
            env.reset(options={"task_id": task.id})
            continue
        took = time.monotonic() - start
        if info.get("error") in FATAL:
            failures.append(
                f"{label}: {info['error']} after {took:.1f}s "
                f"({(info.get('traceback') or '').strip().splitlines()[-1:]})"
            )
        elif reward != 0.0 and not _legitimate(env_id, label):
            failures.append(f"{label}: reward {reward}")
        elif not isinstance(obs, list) or not all(
            isinstance(m, dict) and isinstance(m.get("content") or "", str) for m in obs
        ):
            failures.append(f"{label}: observation is not a list of chat messages")
        if env.done:
            env.reset(options={"task_id": task.id})
    assert not failures, f"{env_id}:\n  " + "\n  ".join(failures)


@pytest.mark.parametrize(
    "env_id",
    # the SWE envs run tests for each candidate: 4-14 s each on 2 cores (make test-fast leaves them out)
    [pytest.param(e, marks=pytest.mark.slow) if e.startswith("swe/") else e for e in _env_ids()],
)
def test_the_envs_verifiers_never_raise_on_hostile_candidates(env_id):
    env = pivotgym.make(env_id)
    split, task = _first_task(env)
    try:
        traj = next(iter(env.expert_trajectories(split, limit=1)))
    except (NotImplementedError, StopIteration):
        pytest.skip(f"{env_id} has no expert trajectory to build a real turn from")
    ctx = VerifyContext(traj.turn(0))
    failures = []
    for kind in ("functional", "exact"):  # the env's verifier and its exact-match ablation
        verifier = pivotgym.verifier_for(env_id, kind=kind)
        for label, text in _inputs(env).items():
            try:
                verdict = verifier.verify(ctx, text)
            except Exception as exc:
                failures.append(f"{verifier.name} / {label}: raised {exc!r}"[:400])
                continue
            if (verdict.reward != 0.0 and not _legitimate(env_id, label)) or not verdict.reason:
                failures.append(f"{verifier.name} / {label}: verdict {verdict.reward} {verdict.reason!r}")
    assert not failures, f"{env_id}:\n  " + "\n  ".join(failures)
