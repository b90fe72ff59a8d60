"""Scoring the tasks of one suite member: greedy replies judged by a YAML env's scorer, log-likelihood of
multiple-choice options, or greedy episodes (:mod:`pivotgym.eval.rollout`) for any other env; and the
per-turn generation cap every one of them uses (:func:`generation_cap`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pivotgym.eval.rollout import greedy_episodes, step_record
from pivotgym.sampling.base import SamplingParams


def generation_cap(env: Any, suite_cap: int | None = None) -> int:
    """New tokens per turn for ``env`` in a suite: the env's own limit (a YAML env's ``max_new_tokens``, an
    :class:`~pivotgym.env.AgentEnv`'s ``max_new_tokens`` attribute), which ``suite_cap`` can only shorten; an
    env without one gets ``suite_cap``, else :data:`~pivotgym.env.DEFAULT_MAX_NEW_TOKENS`."""
    from pivotgym.declarative import DeclarativeEnv
    from pivotgym.env import DEFAULT_MAX_NEW_TOKENS, check_max_new_tokens

    own = check_max_new_tokens(getattr(env, "max_new_tokens", None), getattr(env, "env_id", type(env).__name__))
    if own is None and isinstance(env, DeclarativeEnv):
        own = int(env.config.max_new_tokens)  # the answer format's length (4 tokens for a letter)
    if own is None:
        return int(suite_cap) if suite_cap else DEFAULT_MAX_NEW_TOKENS
    return min(int(suite_cap), own) if suite_cap else own


def loglik_scores(sampler: Any, requests: Sequence[tuple[str, list[str], int]],
                  batch_size: int = 16) -> list[dict[str, float]]:
    """Score multiple-choice requests ``(context, continuations, gold)`` by log-likelihood.

    Each continuation is tokenised together with its context and split at the context's length (so a merge
    across the boundary is charged to the continuation, as lm-eval does). Needs a sampler with ``encode`` and
    ``score_batch`` (the hf backend).
    """
    if not hasattr(sampler, "score_batch"):
        raise TypeError(f"{type(sampler).__name__} cannot score log-likelihoods (no score_batch); use the hf "
                        "backend, or evaluate multiple-choice envs with scoring: generate")
    prompts: list[list[int]] = []
    conts: list[list[int]] = []
    owners: list[int] = []
    for i, (context, continuations, _gold) in enumerate(requests):
        ctx = sampler.encode(context)
        for cont in continuations:
            whole = sampler.encode(context + cont)
            ids = whole[len(ctx):] if whole[:len(ctx)] == ctx else sampler.encode(cont)
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
        out.append({"acc": float(max(range(len(lls)), key=lls.__getitem__) == gold),
                    "acc_norm": float(max(range(len(norm)), key=norm.__getitem__) == gold)})
    return out


def generate_single(sampler: Any, env: Any, tasks: Sequence[Any], params: SamplingParams, *,
                    transcripts: bool = False) -> list[dict[str, Any]]:
    """One greedy reply per task of a single-turn YAML env, judged by the env's scorer (no answer: 0).

    With ``transcripts``, each result carries ``"transcript"``: the prompt and the reply as messages, and the
    one step's reward and judgement."""
    from pivotgym.errors import InvalidAction

    prompts = [env.initial_messages(t) for t in tasks]
    completions = sampler.sample(prompts, n=1, params=params)
    results = []
    for task, prompt, comps in zip(tasks, prompts, completions):
        text = comps[0].text
        try:
            env.check_reply(task, text)
            reward, details = env.judge(task, text)
        except InvalidAction as exc:
            reward, details = 0.0, {"error": str(exc)}
        row = {"reward": reward, "reply": text[:500], "details": details}
        if transcripts:
            row["transcript"] = {"messages": [*prompt, {"role": "assistant", "content": text}],
                                 "steps": [step_record(comps[0], reward, True, False, details)]}
        results.append(row)
    return results


def score_member(env: Any, env_id: str, tasks: Sequence[Any], sampler: Any, tokens: int, *, seed: int = 0,
                 batch_size: int = 8, transcripts: bool = False, progress: bool = False,
                 desc: str = "") -> tuple[str, list[dict[str, Any]]]:
    """(metric, one row per task) of one member's ``tasks`` on ``env`` (an instance of ``env_id``).

    ``tokens`` is the per-turn cap from :func:`generation_cap` (unused by log-likelihood scoring). Each row has
    ``reward`` (the task's score) and the scorer's own fields; ``progress`` shows a tqdm bar over the tasks."""
    from tqdm.auto import tqdm

    from pivotgym.declarative import DeclarativeEnv
    from pivotgym.registry import make

    if isinstance(env, DeclarativeEnv):
        if env.config.scoring == "loglik":
            if not tasks:
                return "acc", []
            rows = loglik_scores(sampler, [env.loglik_request(t) for t in tasks], batch_size=max(batch_size, 16))
            return "acc", [{"reward": r["acc"], "acc_norm": r["acc_norm"]} for r in rows]
        params = SamplingParams(temperature=0.0, max_new_tokens=tokens, seed=seed)
        out: list[dict[str, Any]] = []
        with tqdm(total=len(tasks), desc=desc, unit="item", disable=not progress or not tasks, leave=False,
                  dynamic_ncols=True) as bar:
            for start in range(0, len(tasks), batch_size):
                batch = tasks[start:start + batch_size]
                out += generate_single(sampler, env, batch, params, transcripts=transcripts)
                bar.update(len(batch))
        return env.config.metric, out
    params = SamplingParams(temperature=0.0, max_new_tokens=tokens, seed=seed)
    rows = greedy_episodes(sampler, lambda: make(env_id), tasks, params, batch_size=batch_size,
                           transcripts=transcripts, progress=progress and bool(tasks), desc=desc)
    return "success", rows


__all__ = ["generate_single", "generation_cap", "loglik_scores", "score_member"]
