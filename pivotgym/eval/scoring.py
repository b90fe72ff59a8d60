"""Scoring the tasks of one suite member: greedy replies judged by a YAML env's scorer, log-likelihood of
multiple-choice options, greedy episodes (:mod:`pivotgym.rollout`), turn accuracy on the tasks' expert states
(:mod:`pivotgym.eval.turns`), or pass^k over k sampled episodes per task. Every one of them caps each turn by
:func:`pivotgym.env.generation_cap` (re-exported here)."""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence
from typing import Any

from pivotgym.env import generation_cap  # the one rule: the env's own limit, which a cap only shortens
from pivotgym.rollout import greedy_episodes, step_record
from pivotgym.sampling.base import SamplingParams

#: what a suite member may ask to be measured by (``ENV_ID[@SPLIT]:MEASURE``) and the metric each reports
MEASURES = {"episodes": "success", "turns": "turn_accuracy"}
#: ``pass^K`` (K >= 1), the measure that takes a number: K episodes per task sampled at temperature 1, each
#: task's item 1 when all K succeed (τ²-bench's pass^k with n = k), with pass^1..pass^K from the same episodes
PASS_HAT = re.compile(r"pass\^([1-9][0-9]*)")
#: the sampling temperature of pass^k's episodes: with a greedy policy and a deterministic user (the scripted one)
#: the k episodes of a task would be one episode k times, so pass^k would equal pass^1 by construction
PASS_HAT_TEMPERATURE = 1.0


def measure_metric(measure: str) -> str | None:
    """The metric a member's ``:MEASURE`` reports, or None when it is not a measure (:data:`MEASURES`,
    ``pass^K``)."""
    if measure in MEASURES:
        return MEASURES[measure]
    return measure if PASS_HAT.fullmatch(measure) else None


def pass_hat_rows(
    env_id: str,
    tasks: Sequence[Any],
    sampler: Any,
    k: int,
    tokens: int,
    *,
    seed: int = 0,
    batch_size: int = 8,
    progress: bool = False,
    desc: str = "",
) -> list[dict[str, Any] | None]:
    """One row per task from ``k`` episodes sampled at :data:`PASS_HAT_TEMPERATURE`: ``reward`` 1 when all
    ``k`` succeeded, ``successes`` and ``episodes``; ``undecided`` when the env could not score one of them.
    Each task's episodes are seeded from ``seed`` and the task id, so a task draws the same episodes whatever
    else is evaluated beside it (and on a resumed run)."""
    from pivotgym.registry import make
    from pivotgym.rollout import run_episodes

    ids = [str(getattr(t, "id", t)) for t in tasks]
    if not ids:
        return []
    params = SamplingParams(temperature=PASS_HAT_TEMPERATURE, max_new_tokens=tokens)
    groups = run_episodes(
        sampler,
        lambda: make(env_id),
        ids,
        params,
        n=k,
        seeds=lambda task, turn, slot: zlib.crc32(f"{seed}/{ids[task]}/{turn}/{slot}".encode()),
        batch_size=batch_size,
        progress=progress,
        desc=desc,
    )
    rows: list[dict[str, Any] | None] = []
    for episodes in groups:
        undecided = next((e.undecided for e in episodes if e.undecided), None)
        successes = sum(e.score >= 1.0 for e in episodes)
        row: dict[str, Any] = {"reward": float(successes == k), "successes": successes, "episodes": k}
        if undecided:
            row["undecided"] = undecided
        rows.append(row)
    return rows


def loglik_scores(
    sampler: Any, requests: Sequence[tuple[str, list[str], int]], batch_size: int = 16
) -> list[dict[str, float]]:
    """Score multiple-choice requests ``(context, continuations, gold)`` by log-likelihood.

    Each continuation is tokenised together with its context and split at the context's length (so a merge
    across the boundary is charged to the continuation, as lm-eval does). Needs a sampler with ``encode`` and
    ``score_batch`` (the hf backend).
    """
    if not hasattr(sampler, "score_batch"):
        raise TypeError(
            f"{type(sampler).__name__} cannot score log-likelihoods (no score_batch); use the hf "
            "backend, or evaluate multiple-choice envs with scoring: generate"
        )
    prompts: list[list[int]] = []
    conts: list[list[int]] = []
    owners: list[int] = []
    for i, (context, continuations, _gold) in enumerate(requests):
        ctx = sampler.encode(context)
        for cont in continuations:
            whole = sampler.encode(context + cont)
            ids = whole[len(ctx) :] if whole[: len(ctx)] == ctx else sampler.encode(cont)
            prompts.append(ctx)
            conts.append(ids or sampler.encode(cont))
            owners.append(i)
    values = sampler.score_batch(prompts, conts, batch_size=batch_size)
    totals: list[list[float]] = [[] for _ in requests]
    for i, v in zip(owners, values):
        totals[i].append(float(sum(v)))
    out = []
    for (_context, continuations, gold), lls in zip(requests, totals):
        norm = [ll / max(1, len(c.encode("utf-8"))) for ll, c in zip(lls, continuations)]
        out.append(
            {
                "acc": float(max(range(len(lls)), key=lls.__getitem__) == gold),
                "acc_norm": float(max(range(len(norm)), key=norm.__getitem__) == gold),
            }
        )
    return out


def generate_single(
    sampler: Any, env: Any, tasks: Sequence[Any], params: SamplingParams, *, transcripts: bool = False
) -> list[dict[str, Any]]:
    """One greedy reply per task of a single-turn YAML env, judged by the env's scorer (no answer: 0).

    Each result has ``parsed``: whether an answer could be read out of the reply at all (the env's
    ``check_reply`` accepted it), so a member's parse rate can be told apart from its accuracy - a gain that
    is all parse rate is a format effect. With ``transcripts``, each result carries ``"transcript"``: the
    prompt and the reply as messages, and the one step's reward and judgement."""
    from pivotgym.errors import InvalidAction

    prompts = [env.initial_messages(t) for t in tasks]
    completions = sampler.sample(prompts, n=1, params=params)
    results = []
    for task, prompt, comps in zip(tasks, prompts, completions):
        text = comps[0].text
        parsed = True
        try:
            env.check_reply(task, text)
        except InvalidAction as exc:
            parsed, reward, details = False, 0.0, {"error": str(exc)}
        if parsed:
            try:
                reward, details = env.judge(task, text)
            except InvalidAction as exc:  # read as an answer, refused by the scorer: a parsed wrong answer
                reward, details = 0.0, {"error": str(exc)}
        row = {"reward": reward, "parsed": parsed, "reply": text[:500], "details": details}
        if transcripts:
            row["transcript"] = {
                "messages": [*prompt, {"role": "assistant", "content": text}],
                "steps": [step_record(comps[0], reward, True, False, details)],
            }
        results.append(row)
    return results


def score_member(
    env: Any,
    env_id: str,
    tasks: Sequence[Any],
    sampler: Any,
    tokens: int,
    *,
    seed: int = 0,
    batch_size: int = 8,
    transcripts: bool = False,
    progress: bool = False,
    desc: str = "",
    measure: str | None = None,
) -> tuple[str, list[dict[str, Any] | None]]:
    """(metric, one row per task) of one member's ``tasks`` on ``env`` (an instance of ``env_id``).

    ``measure`` is the member's choice (:data:`MEASURES`): ``"episodes"`` (greedy episodes, metric
    ``success``), ``"turns"`` (:func:`turn_accuracy_rows`, metric ``turn_accuracy``), ``"pass^K"``
    (:func:`pass_hat_rows`, metric ``pass^K``), or None for the env's
    default (a YAML env's own scorer, else episodes). ``tokens`` is the per-turn cap from
    :func:`generation_cap` (unused by log-likelihood scoring). Each row has ``reward`` (the task's score) and
    the scorer's own fields; a row is None for a task that cannot be measured (turn accuracy of a task without
    a successful expert trajectory). ``progress`` shows a tqdm bar over the tasks (or their states)."""
    from tqdm.auto import tqdm

    from pivotgym.declarative import DeclarativeEnv
    from pivotgym.registry import make

    params = SamplingParams(temperature=0.0, max_new_tokens=tokens, seed=seed)
    pass_hat = PASS_HAT.fullmatch(measure or "")
    if pass_hat:
        k = int(pass_hat.group(1))
        return str(measure), pass_hat_rows(
            env_id, tasks, sampler, k, tokens, seed=seed, batch_size=batch_size, progress=progress, desc=desc
        )
    if measure == "turns":
        return MEASURES["turns"], turn_accuracy_rows(
            env, tasks, sampler, params, chunk=max(16, batch_size), progress=progress
        )
    if isinstance(env, DeclarativeEnv) and measure is None:
        if env.config.scoring == "loglik":
            if not tasks:
                return "acc", []
            rows = loglik_scores(sampler, [env.loglik_request(t) for t in tasks], batch_size=max(batch_size, 16))
            return "acc", [{"reward": r["acc"], "acc_norm": r["acc_norm"]} for r in rows]
        out: list[dict[str, Any] | None] = []
        with tqdm(
            total=len(tasks), desc=desc, unit="item", disable=not progress or not tasks, leave=False, dynamic_ncols=True
        ) as bar:
            for start in range(0, len(tasks), batch_size):
                batch = tasks[start : start + batch_size]
                out += generate_single(sampler, env, batch, params, transcripts=transcripts)
                bar.update(len(batch))
        return env.config.metric, out
    episodes: list[dict[str, Any] | None] = [
        *greedy_episodes(
            sampler,
            lambda: make(env_id),
            tasks,
            params,
            batch_size=batch_size,
            transcripts=transcripts,
            progress=progress and bool(tasks),
            desc=desc,
        )
    ]
    return MEASURES["episodes"], episodes


def turn_accuracy_rows(
    env: Any, tasks: Sequence[Any], sampler: Any, params: SamplingParams, *, chunk: int = 16, progress: bool = False
) -> list[dict[str, Any] | None]:
    """Per task, its turn accuracy (:func:`pivotgym.eval.turns.turn_accuracy`): one greedy action from each
    state of the task's expert trajectory, judged by the env's functional verifier. A row is ``{"reward":
    share of passing states, "states", "failed"}`` (failed verifications are left out of the share), or None
    when the task has no successful expert trajectory (no states to measure)."""
    from pivotgym.eval.turns import turn_accuracy

    if not tasks:
        return []
    wanted = {t.id for t in tasks}
    split = tasks[0].split
    trajectories = [t for t in env.expert_trajectories(split, limit=len(tasks)) if t.task_id in wanted and t.reward > 0]
    if not trajectories:
        return [None] * len(tasks)
    result = turn_accuracy(sampler, trajectories, params, chunk=chunk, progress=progress)
    states: dict[str, int] = {}
    for trajectory in trajectories:
        states[trajectory.task_id] = states.get(trajectory.task_id, 0) + len(trajectory.turns())
    scores = dict(zip(result.task_ids, result.per_task))
    return [
        {"reward": scores[t.id], "states": states[t.id], "failed": result.failed_by_task.get(t.id, 0)}
        if t.id in scores
        else None
        for t in tasks
    ]


__all__ = [
    "MEASURES",
    "PASS_HAT",
    "generate_single",
    "generation_cap",
    "loglik_scores",
    "measure_metric",
    "pass_hat_rows",
    "score_member",
    "turn_accuracy_rows",
]
