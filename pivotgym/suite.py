"""Suites: score a model on a set of envs (in-domain and out-of-domain), and compare two such scorings.

This is how the paper's retention claim is measured: evaluate the base model and a trained one on the same
suite, then ``compare`` gives each env's change and the average in-domain and OOD change.

How a member is scored depends on the env:

* a YAML env (the shipped OOD envs all are): one greedy reply in the chat format the policy is trained with,
  parsed and judged by the env's own scorer (a multiple-choice reply names an option by letter or text; the
  options are shuffled per item with a fixed seed). The env's ``max_new_tokens`` is the generation length; a
  suite-wide ``max_new_tokens`` can only shorten it;
* a user YAML env with ``scoring: loglik`` (multiple choice): each option is scored by the summed
  log-probability of its tokens after a raw-text context, as lm-eval does (``acc`` and ``acc_norm``); no
  shipped env uses it any more, since it never exercises the chat format and barely moves at this scale;
* any other env (the multi-turn domains, e.g. ``planning/blocks-v0@test``): greedy episodes run in lockstep
  across tasks; the score is the episode's final reward (the outcome reward). Each turn generates at most the
  env's ``max_new_tokens`` (:attr:`pivotgym.env.AgentEnv.max_new_tokens`, e.g. 64 for a PDDL action); a
  suite-wide ``max_new_tokens`` can only shorten it. An env that declares none gets the suite-wide cap, else
  :data:`pivotgym.env.DEFAULT_MAX_NEW_TOKENS` (256).

Every scored item is appended to ``<out>.items.jsonl`` as it finishes; a rerun with the same model, suite and
settings skips the items already there, so an interrupted evaluation resumes where it stopped. An item is
``{"member", "task_id", "fingerprint", "metric", "reward", "max_new_tokens", ...}`` plus, for generated
members (unless ``transcripts=False``), ``"transcript": {"messages": [...], "steps": [...]}``: the episode's
chat history as the env recorded it and, per assistant turn, its ``reward``, ``terminated``, ``truncated``,
``finish_reason``, ``tokens`` and the env's ``info`` (e.g. ``error``), so a failed episode can be read back.
Readers must treat ``transcript`` (and ``max_new_tokens``) as optional: older files and loglik members have
none.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pivotgym.jsonl import JsonlAppender, iter_jsonl
from pivotgym.sampling.base import SamplingParams
from pivotgym.types import content_hash

ROLES = ("in_domain", "ood")


@dataclass(frozen=True)
class Member:
    """One suite member: ``key`` as written in the suite (``ENV_ID`` or ``ENV_ID@SPLIT``) and its role."""

    key: str
    env_id: str
    split: str | None
    role: str

    @classmethod
    def parse(cls, key: str, role: str) -> Member:
        env_id, _, split = key.partition("@")
        return cls(key, env_id, split or None, role)


def suite_members(suite: str | Mapping[str, str]) -> tuple[str, list[Member]]:
    """(name, members) of a registered suite name or an inline ``{member: role}`` mapping."""
    if isinstance(suite, str):
        from pivotgym.registry import get_registry

        spec = get_registry().suite(suite)
        return spec.name, [Member.parse(k, r) for k, r in spec.members.items()]
    return "inline", [Member.parse(k, r) for k, r in suite.items()]


# ----------------------------------------------------------------------------------------- statistics
def ci95(values: Sequence[float]) -> list[float]:
    """A 95% confidence interval for the mean: Wilson's for 0/1 outcomes (sound at small n and near 0 or 1),
    the normal approximation otherwise."""
    n = len(values)
    if n == 0:
        return [0.0, 0.0]
    mean = sum(values) / n
    if all(v in (0.0, 1.0) for v in values):
        z = 1.959963984540054
        denom = 1 + z * z / n
        centre = (mean + z * z / (2 * n)) / denom
        half = z * math.sqrt(mean * (1 - mean) / n + z * z / (4 * n * n)) / denom
        low = 0.0 if mean == 0.0 else max(0.0, centre - half)  # exact ends: no 1e-17 rounding residue
        high = 1.0 if mean == 1.0 else min(1.0, centre + half)
        return [low, high]
    sd = statistics.stdev(values) if n > 1 else 0.0
    half = 1.959963984540054 * sd / math.sqrt(n)
    if all(0.0 <= v <= 1.0 for v in values):  # a share (e.g. per-task turn accuracy) stays within [0, 1]
        return [max(0.0, mean - half), min(1.0, mean + half)]
    return [mean - half, mean + half]


def summarize(values: Sequence[float], metric: str) -> dict[str, Any]:
    """The contract's per-env score: ``{"metric", "value", "n", "ci95"}``."""
    return {"metric": metric, "value": (sum(values) / len(values)) if values else 0.0, "n": len(values),
            "ci95": ci95(values)}


def role_averages(scores: Mapping[str, Mapping[str, Any]], roles: Mapping[str, str]) -> dict[str, float | None]:
    """The unweighted mean score of the in-domain members and of the OOD members (None when a role is empty)."""
    out: dict[str, float | None] = {}
    for role in ROLES:
        vals = [s["value"] for k, s in scores.items() if roles.get(k) == role]
        out[role] = sum(vals) / len(vals) if vals else None
    return out


# ----------------------------------------------------------------------------------------- scoring
def _tasks(env: Any, member: Member, limit: int | None) -> list[Any]:
    split = member.split or ("test" if "test" in env.splits else env.splits[-1])
    tasks = list(env.tasks(split))
    return tasks[:limit] if limit else tasks


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
    for (context, continuations, gold), lls in zip(requests, totals):
        norm = [ll / max(1, len(c.encode("utf-8"))) for ll, c in zip(lls, continuations)]
        out.append({"acc": float(max(range(len(lls)), key=lls.__getitem__) == gold),
                    "acc_norm": float(max(range(len(norm)), key=norm.__getitem__) == gold)})
    return out


def _step_record(completion: Any, reward: float, terminated: bool, truncated: bool,
                 info: Mapping[str, Any]) -> dict[str, Any]:
    """One turn of a transcript: what the env said about the action, and how the generation ended."""
    return {"reward": float(reward), "terminated": bool(terminated), "truncated": bool(truncated),
            "finish_reason": getattr(completion, "finish_reason", None),
            "tokens": len(getattr(completion, "token_ids", None) or []), "info": dict(info)}


def generate_single(sampler: Any, env: Any, tasks: Sequence[Any], params: SamplingParams, *,
                    transcripts: bool = False) -> list[dict[str, Any]]:
    """One greedy reply per task of a single-turn YAML env, judged by the env's scorer (no answer: 0).

    With ``transcripts``, each result carries ``"transcript"``: the prompt and the reply as messages, and the
    one step's reward and judgement."""
    from pivotgym.env import InvalidAction

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
                                 "steps": [_step_record(comps[0], reward, True, False, details)]}
        results.append(row)
    return results


def run_episodes(sampler: Any, make_env: Callable[[], Any], tasks: Sequence[Any], params: SamplingParams,
                 batch_size: int = 8, *, transcripts: bool = False) -> list[dict[str, Any]]:
    """Greedy episodes on ``tasks``, ``batch_size`` at a time in lockstep (one sampler call per turn).

    Returns per task its final reward, the number of assistant turns and whether it terminated; with
    ``transcripts`` also ``"transcript"``: the env's chat history (``env.messages``) and one record per turn
    (reward, terminated, truncated, finish_reason, tokens, the env's info).
    """
    results: list[dict[str, Any]] = []
    for start in range(0, len(tasks), batch_size):
        group = tasks[start:start + batch_size]
        envs = [make_env() for _ in group]
        state = []
        steps: list[list[dict[str, Any]]] = [[] for _ in group]
        for env, task in zip(envs, group):
            env.reset(options={"task_id": task.id})
            state.append({"reward": 0.0, "turns": 0, "terminated": False, "done": False})
        while True:
            live = [i for i, s in enumerate(state) if not s["done"]]
            if not live:
                break
            prompts = [envs[i].prompt_messages(envs[i].messages) for i in live]
            completions = sampler.sample(prompts, n=1, params=params)
            for i, comps in zip(live, completions):
                _obs, reward, terminated, truncated, info = envs[i].step(comps[0].text)
                s = state[i]
                s["turns"] += 1
                s["reward"] = float(reward)
                s["terminated"] = bool(terminated)
                s["done"] = bool(terminated or truncated)
                if transcripts:
                    steps[i].append(_step_record(comps[0], reward, terminated, truncated, info))
        if transcripts:
            for env, s, turns in zip(envs, state, steps):
                s["transcript"] = {"messages": list(env.messages), "steps": turns}
        results.extend(state)
    return results


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


# ----------------------------------------------------------------------------------------- evaluate
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
    keep the items file small. ``name`` names an inline suite in the result.
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
            cap = (limits or {}).get(member.key, limit)
            tasks = _tasks(env, member, cap)
            declarative = isinstance(env, DeclarativeEnv)
            loglik = declarative and env.config.scoring == "loglik"
            tokens = None if loglik else generation_cap(env, max_new_tokens)
            # an item is reused only when it was generated with the same per-turn cap (an env's own limit may
            # have changed since; items written before caps were recorded are scored again, once)
            todo = [t for t in tasks if done.get((member.key, t.id), {}).get("max_new_tokens", "?") != tokens]
            metric, rows = _score_member(env, member, todo, sampler, tokens, seed, batch_size, declarative,
                                         transcripts)
            for task, row in zip(todo, rows):
                record = {"member": member.key, "task_id": task.id, "fingerprint": fingerprint, "metric": metric,
                          "max_new_tokens": tokens, **row}
                done[(member.key, task.id)] = record
                if appender:
                    appender.write(record)
            values = [float(done[(member.key, t.id)]["reward"]) for t in tasks]
            scores[member.key] = {**summarize(values, metric), "seconds": round(time.perf_counter() - started, 2)}
            extra = [done[(member.key, t.id)].get("acc_norm") for t in tasks]
            if extra and all(v is not None for v in extra):
                scores[member.key]["acc_norm"] = sum(extra) / len(extra)
            roles[member.key] = member.role
    finally:
        if appender:
            appender.close()
    result = {"suite": name, "model": model_name, "scores": scores, "role": roles,
              "averages": role_averages(scores, roles), "sampler": describe, "seed": seed, "limit": limit}
    if out:
        write_json(out, result)
    return result


def _score_member(env: Any, member: Member, tasks: Sequence[Any], sampler: Any, tokens: int | None,
                  seed: int, batch_size: int, declarative: bool,
                  transcripts: bool = False) -> tuple[str, list[dict[str, Any]]]:
    """(metric, one row per task) of one member; ``tokens`` is the per-turn cap from :func:`generation_cap`
    (the env's own length, which a suite-wide cap only shortens: a short-answer env never generates 64)."""
    if declarative:
        config = env.config
        if config.scoring == "loglik":
            if not tasks:
                return "acc", []
            rows = loglik_scores(sampler, [env.loglik_request(t) for t in tasks], batch_size=max(batch_size, 16))
            return "acc", [{"reward": r["acc"], "acc_norm": r["acc_norm"]} for r in rows]
        params = SamplingParams(temperature=0.0, max_new_tokens=tokens, seed=seed)
        rows = []
        for start in range(0, len(tasks), batch_size):
            rows += generate_single(sampler, env, tasks[start:start + batch_size], params, transcripts=transcripts)
        return config.metric, rows
    from pivotgym.registry import make

    params = SamplingParams(temperature=0.0, max_new_tokens=tokens, seed=seed)
    rows = run_episodes(sampler, lambda: make(member.env_id), tasks, params, batch_size=batch_size,
                        transcripts=transcripts)
    return "success", rows


def write_json(path: str | Path, data: Any) -> None:
    """Write JSON atomically (temp file, then rename)."""
    import json
    import os

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def load_result(path: str | Path) -> dict[str, Any]:
    """Read a suite result JSON, checking it has the contract's keys."""
    import json

    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, dict) or "scores" not in data:
        raise ValueError(f"{path} is not a suite result (no 'scores'); write one with `pivotgym eval --out`")
    data.setdefault("role", {})
    return data


# ----------------------------------------------------------------------------------------- compare
def compare(base: Mapping[str, Any], trained: Mapping[str, Any]) -> dict[str, Any]:
    """Per-env deltas (trained - base) over the envs both results scored, and the mean in-domain and OOD
    deltas (the paper's headline retention metric). Envs in only one result are listed, not averaged."""
    shared = [k for k in base["scores"] if k in trained["scores"]]
    roles = {**base.get("role", {}), **trained.get("role", {})}
    rows = []
    for key in shared:
        b, t = base["scores"][key], trained["scores"][key]
        rows.append({"env": key, "role": roles.get(key, "ood"), "metric": t.get("metric", b.get("metric")),
                     "base": b["value"], "trained": t["value"], "delta": t["value"] - b["value"],
                     "n": min(b.get("n", 0), t.get("n", 0)), "base_ci95": b.get("ci95"), "trained_ci95": t.get("ci95")})
    averages: dict[str, dict[str, float | int | None]] = {}
    for role in ROLES:
        sel = [r for r in rows if r["role"] == role]
        if sel:
            averages[role] = {"base": sum(r["base"] for r in sel) / len(sel),
                              "trained": sum(r["trained"] for r in sel) / len(sel),
                              "delta": sum(r["delta"] for r in sel) / len(sel), "n_envs": len(sel)}
        else:
            averages[role] = {"base": None, "trained": None, "delta": None, "n_envs": 0}
    return {"base_model": base.get("model"), "trained_model": trained.get("model"), "suite": trained.get("suite"),
            "rows": rows, "averages": averages,
            "only_base": sorted(set(base["scores"]) - set(shared)),
            "only_trained": sorted(set(trained["scores"]) - set(base["scores"]))}


def format_comparison(comp: Mapping[str, Any]) -> str:
    """The comparison as a plain-text table (per env, then the in-domain and OOD averages)."""
    def pct(v: float | None) -> str:
        return "-" if v is None else f"{100 * v:.1f}"

    def signed(v: float | None) -> str:
        return "-" if v is None else f"{100 * v:+.1f}"

    header = ["env", "role", "metric", "base", "trained", "delta", "n"]
    rows = [[r["env"], r["role"], r["metric"], pct(r["base"]), pct(r["trained"]), signed(r["delta"]), str(r["n"])]
            for r in comp["rows"]]
    for role in ROLES:
        a = comp["averages"][role]
        if a["n_envs"]:
            rows.append([f"average {role}", role, "", pct(a["base"]), pct(a["trained"]), signed(a["delta"]),
                         f"{a['n_envs']} envs"])
    widths = [max(len(x[i]) for x in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(header, widths)).rstrip(),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.append("(scores in %, delta = trained - base)")
    return "\n".join(lines)


__all__ = ["Member", "ci95", "compare", "evaluate_suite", "format_comparison", "generation_cap", "load_result",
           "loglik_scores", "role_averages", "run_episodes", "suite_members", "summarize"]
