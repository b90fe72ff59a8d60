"""Suites: score a model on a set of envs (in-domain and out-of-domain).

This is how the paper's retention claim is measured: evaluate the base model and a trained one on the same
suite, then :func:`pivotgym.eval.compare.compare` gives each env's change and the average in-domain and OOD
change.

How a member is scored depends on the env (:mod:`pivotgym.eval.scoring`):

* a YAML env (the shipped OOD envs all are): one greedy reply in the chat format the policy is trained with,
  parsed and judged by the env's own scorer (a multiple-choice reply names an option by letter or text; the
  options are shuffled per item with a fixed seed). The env's ``max_new_tokens`` is the generation length; a
  suite-wide ``max_new_tokens`` can only shorten it;
* a user YAML env with ``scoring: loglik`` (multiple choice): each option is scored by the summed
  log-probability of its tokens after a raw-text context, as lm-eval does (``acc`` and ``acc_norm``); no
  shipped env uses it any more, since it never exercises the chat format and barely moves at this scale;
* any other env (the multi-turn domains, e.g. ``planning/blocks-v0@test``): greedy episodes run in lockstep
  across tasks (:mod:`pivotgym.rollout`); the metric is ``success``, an item's score is its episode's
  return (the sum of its step rewards) capped at 1. Each turn generates at most the env's ``max_new_tokens``
  (:attr:`pivotgym.env.AgentEnv.max_new_tokens`, e.g. 64 for a PDDL action); a suite-wide ``max_new_tokens``
  can only shorten it. An env that declares none gets the suite-wide cap, else
  :data:`pivotgym.env.DEFAULT_MAX_NEW_TOKENS` (256).

A member key may end in ``:MEASURE`` to choose the measurement instead (:data:`~pivotgym.eval.scoring.MEASURES`):

* ``ENV_ID[@SPLIT]:turns`` - **turn accuracy** (metric ``turn_accuracy``), PivotRL's own unit: each task's
  expert trajectory is replayed (:meth:`~pivotgym.env.AgentEnv.expert_trajectories`; tasks without a
  successful one are skipped and counted in the score's ``skipped``), the model answers every expert state
  once greedily, and the env's functional verifier judges the answer against the expert's action
  (:mod:`pivotgym.eval.turns`). An item's score is the share of its task's states that pass; items also carry
  ``states`` and ``failed`` (failed verifications, left out of the share), and the member's score sums them;
* ``ENV_ID[@SPLIT]:episodes`` - greedy episodes (metric ``success``) even for an env that scores otherwise;
* ``ENV_ID[@SPLIT]:pass^K`` - τ²-bench's **pass^k** (metric ``pass^K``): K episodes per task sampled at
  temperature 1 (seeded by the task id), an item 1 when all K succeed; the score also carries ``pass_hat``,
  pass^1..pass^K from the same episodes (:func:`pivotgym.eval.stats.pass_hat_k`).

So one suite can hold ``planning/blocks-v0@test: in_domain`` and ``planning/blocks-v0@test:turns: in_domain``
side by side: two members, two metrics, on the same tasks.

Every scored item is appended to ``<out>.items.jsonl`` as it finishes; a rerun with the same model, suite and
settings skips the items already there, so an interrupted evaluation resumes where it stopped. An item is
``{"member", "task_id", "fingerprint", "metric", "reward", "max_new_tokens", ...}`` (an episode also has
``return``, ``turns`` and ``terminated``) plus, for generated members (unless ``transcripts=False``),
``"transcript": {"messages": [...], "steps": [...]}``: the episode's chat history as the env recorded it and,
per assistant turn, its ``reward``, ``terminated``, ``truncated``, ``finish_reason``, ``tokens`` and the env's
``info`` (e.g. ``error``), so a failed episode can be read back. Readers must treat ``transcript`` (and
``max_new_tokens``) as optional: older files and loglik members have none.

An item the env could not score (an episode whose final ``info`` says ``undecided``: a τ² task whose reward needs
natural-language assertions judged) is kept in the items file but left out of the member's score, and counted in
the score's ``undecided``.

Each member's score in the result is ``{"metric", "value", "n", "ci95", "per_item", "parse_rate", "seconds"}``:
``per_item`` maps each task id to its score, so two results can be checked for the same items and compared
item by item (:func:`pivotgym.eval.compare.compare`). ``parse_rate`` is the share of the member's replies
from which an answer could be read at all (a generated single-turn member: the env's ``check_reply``
accepted the reply; its item has ``parsed``), printed beside accuracy so that a gain which is only a format
effect shows as one; it is None where it is not measured (log-likelihood members generate no reply; episode
and turn-accuracy members judge actions, not answers; items written before ``parsed`` was recorded).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pivotgym.errors import ConfigError
from pivotgym.eval.io import write_json
from pivotgym.eval.scoring import MEASURES, generation_cap, measure_metric, score_member
from pivotgym.eval.stats import role_averages, summarize
from pivotgym.jsonl import JsonlAppender, iter_jsonl
from pivotgym.types import content_hash


@dataclass(frozen=True)
class Member:
    """One suite member: ``key`` as written in the suite (``ENV_ID``, ``ENV_ID@SPLIT``, either with a
    ``:MEASURE`` suffix), its role, and the measure it asks for (None: the env's default scoring)."""

    key: str
    env_id: str
    split: str | None
    role: str
    measure: str | None = None

    @classmethod
    def parse(cls, key: str, role: str) -> Member:
        """The member written ``key`` with ``role``; an unknown ``:MEASURE`` suffix is a :class:`ConfigError`."""
        name, measure = key, None
        if ":" in key:
            name, _, measure = key.rpartition(":")
            if measure_metric(measure) is None:
                raise ConfigError(
                    f"suite member {key!r}: unknown measure {measure!r} after ':'; use one of "
                    f"{', '.join(':' + m for m in MEASURES)} or :pass^K (K episodes per task, e.g. :pass^4)"
                )
        env_id, _, split = name.partition("@")
        return cls(key, env_id, split or None, role, measure)


def suite_members(suite: str | Mapping[str, str]) -> tuple[str, list[Member]]:
    """(name, members) of a registered suite name or an inline ``{member: role}`` mapping."""
    if isinstance(suite, str):
        from pivotgym.registry import get_registry

        spec = get_registry().suite(suite)
        return spec.name, [Member.parse(k, r) for k, r in spec.members.items()]
    return "inline", [Member.parse(k, r) for k, r in suite.items()]


def member_tasks(env: Any, member: Member, limit: int | None) -> list[Any]:
    """The tasks a member scores: its split (default ``test`` when the env has one, else its last split), the
    first ``limit`` of them when given."""
    split = member.split or ("test" if "test" in env.splits else env.splits[-1])
    tasks = list(env.tasks(split))
    return tasks[:limit] if limit else tasks


def evaluate_suite(
    suite: str | Mapping[str, str],
    sampler: Any,
    out: str | Path | None = None,
    *,
    limit: int | None = None,
    limits: Mapping[str, int] | None = None,
    members: Sequence[str] | None = None,
    max_new_tokens: int | None = None,
    seed: int = 0,
    batch_size: int = 8,
    model: str | None = None,
    progress: bool = True,
    name: str | None = None,
    transcripts: bool = True,
) -> dict[str, Any]:
    """Evaluate ``sampler`` on every member of ``suite`` and return the contract's suite result.

    ``limit`` caps the tasks per member (``limits`` per member key overrides it); ``members`` restricts the
    evaluation to those keys. ``max_new_tokens`` is a suite-wide cap on each turn's generation: it can only
    shorten an env's own limit (:func:`generation_cap`). With ``out``, the result is written there and items
    are appended to ``<out>.items.jsonl`` as they finish (resumable); ``transcripts`` (default on) puts each
    generated episode's messages and per-turn records in its item (see the module docstring); turn it off to
    keep the items file small. ``name`` names an inline suite in the result. ``progress`` shows a bar over the
    members and one over each member's items or episodes.
    """
    from tqdm.auto import tqdm

    from pivotgym.declarative import DeclarativeEnv
    from pivotgym.registry import make

    suite_name, all_members = suite_members(suite)
    name = name or suite_name
    chosen = [m for m in all_members if members is None or m.key in members]
    if members is not None and len(chosen) != len(set(members)):
        unknown = sorted(set(members) - {m.key for m in chosen})
        raise KeyError(f"suite {name!r} has no member(s) {unknown}; it has {[m.key for m in all_members]}")
    describe = sampler.describe() if hasattr(sampler, "describe") else {"model": type(sampler).__name__}
    model_name = model or str(describe.get("model", ""))
    items_path = Path(str(out) + ".items.jsonl") if out else None
    done: dict[tuple[str, str], dict[str, Any]] = {}
    settings = {"describe": describe, "model": model_name, "max_new_tokens": max_new_tokens, "seed": seed}
    fingerprint = content_hash(settings)
    if items_path and items_path.exists():
        for row in iter_jsonl(items_path):
            if row.get("fingerprint") == fingerprint:
                done[(row["member"], row["task_id"])] = row
    appender = JsonlAppender(items_path) if items_path else None
    scores: dict[str, dict[str, Any]] = {}
    roles: dict[str, str] = {}
    try:
        bar = tqdm(chosen, desc=f"eval {name}", unit="env", disable=not progress)
        for member in bar:
            bar.set_postfix_str(member.key)
            started = time.perf_counter()
            env = make(member.env_id)
            tasks = member_tasks(env, member, (limits or {}).get(member.key, limit))
            loglik = isinstance(env, DeclarativeEnv) and env.config.scoring == "loglik"
            tokens = generation_cap(env, max_new_tokens)
            # an item is reused only when it was generated with the same per-turn cap (an env's own limit may
            # have changed since; items written before caps were recorded are scored again, once)
            recorded = None if loglik else tokens  # a loglik item generates nothing: no cap recorded
            todo = [t for t in tasks if done.get((member.key, t.id), {}).get("max_new_tokens", "?") != recorded]
            metric, rows = score_member(
                env,
                member.env_id,
                todo,
                sampler,
                tokens,
                seed=seed,
                batch_size=batch_size,
                transcripts=transcripts,
                progress=progress,
                desc=member.key,
                measure=member.measure,
            )
            for task, scored_row in zip(todo, rows):
                if scored_row is None:
                    continue  # not measurable (e.g. no expert states); tried again on a rerun
                record = {
                    "member": member.key,
                    "task_id": task.id,
                    "fingerprint": fingerprint,
                    "metric": metric,
                    "max_new_tokens": recorded,
                    **scored_row,
                }
                done[(member.key, task.id)] = record
                if appender:
                    appender.write(record)
            rows_done = [done[(member.key, t.id)] for t in tasks if (member.key, t.id) in done]
            scored = [r for r in rows_done if not r.get("undecided")]
            score = summarize([float(r["reward"]) for r in scored], metric, [r["task_id"] for r in scored])
            scores[member.key] = {**score, **_totals(scored), "seconds": round(time.perf_counter() - started, 2)}
            if len(rows_done) < len(tasks):
                scores[member.key]["skipped"] = len(tasks) - len(rows_done)
            if len(scored) < len(rows_done):  # the env could not score them (a τ² task that needs a judge)
                scores[member.key]["undecided"] = len(rows_done) - len(scored)
            roles[member.key] = member.role
    finally:
        if appender:
            appender.close()
    result = {
        "suite": name,
        "model": model_name,
        "scores": scores,
        "role": roles,
        "averages": role_averages(scores, roles),
        "sampler": describe,
        "seed": seed,
        "limit": limit,
    }
    if out:
        write_json(out, result)
    return result


def _totals(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A member score's extra fields from its items: ``parse_rate`` (the share of items whose reply gave an
    answer; None unless every item records ``parsed``), the mean ``acc_norm`` of loglik items, the summed
    ``states`` and ``failed`` of turn-accuracy items (each only when every item has it), and ``pass_hat``
    (``{"1": pass^1, ..., "K": pass^K}``) of pass^K items."""
    out: dict[str, Any] = {"parse_rate": parse_rate(rows)}
    if rows and all(r.get("acc_norm") is not None for r in rows):
        out["acc_norm"] = sum(float(r["acc_norm"]) for r in rows) / len(rows)
    for key in ("states", "failed"):
        if rows and all(r.get(key) is not None for r in rows):
            out[key] = sum(int(r[key]) for r in rows)
    if rows and all(r.get("episodes") for r in rows):  # pass^K items: pass^1..pass^K from the same episodes
        from pivotgym.eval.stats import pass_hat_k

        runs = {
            str(i): [True] * int(r["successes"]) + [False] * (int(r["episodes"]) - int(r["successes"]))
            for i, r in enumerate(rows)
        }
        out["pass_hat"] = {str(k): pass_hat_k(runs, k) for k in range(1, min(int(r["episodes"]) for r in rows) + 1)}
    return out


def parse_rate(rows: Sequence[Mapping[str, Any]]) -> float | None:
    """The share of ``rows`` (suite items) whose reply gave an answer (``parsed`` true); None when there are
    no rows or any row does not record ``parsed`` (loglik, episode and turn-accuracy items, older files)."""
    if not rows or any(not isinstance(r.get("parsed"), bool) for r in rows):
        return None
    return sum(bool(r["parsed"]) for r in rows) / len(rows)


__all__ = ["Member", "evaluate_suite", "member_tasks", "parse_rate", "suite_members"]
