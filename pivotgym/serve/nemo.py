"""NeMo-Gym's resources-server API (0.7), beside ``/verify`` (:func:`pivotgym.serve.verify.nemo_verify`).

A NeMo-Gym agent or environment server talks to a resources server through five routes; ``pivotgym serve``
answers all of them so it can stand in for one:

* ``POST /seed_session``: an environment server's typed body (``resources_session_id``, ``episode_id``,
  ``task_id``, ``task_data``) is confirmed with its ``resources_session_id``; an agent's legacy body (anything
  else) gets ``{}``. Judging a row keeps no state here, so there is nothing to create.
* ``POST /close_session``: ``{"resources_session_id", "episode_id"}`` is confirmed with the same id, for a
  session seeded, closed before or never seeded alike (nothing to release).
* ``POST /aggregate_metrics``: ``{"verify_responses": [...]}`` (``/verify`` answers, each with ``reward``,
  ``mask_sample`` and NeMo-Gym's ``_ng_task_index``/``_ng_rollout_index``) becomes NeMo-Gym's
  ``AggregateMetrics`` shape: reward statistics per task and over every measured rollout, with masked rollouts
  (undecided verdicts) left out of the statistics and counted as coverage, as NeMo-Gym does.
* ``GET /reverify_mode``: ``"stateless"``: a row is judged from itself, so it can be judged again.

``tests/serve/test_nemo_resources.py`` checks every answer with NeMo-Gym's own models and session contract, in
its own interpreter, through NeMo-Gym's ``ServerClient``.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from pivotgym.serve.sessions import ServeError

#: NeMo-Gym's keys of a rollout's task and repeat in a verify response
TASK_INDEX_KEY = "_ng_task_index"
ROLLOUT_INDEX_KEY = "_ng_rollout_index"
#: the reverification mode this server declares: a row is judged from itself
REVERIFY_MODE = "stateless"


def _text_field(body: Mapping[str, Any], key: str, route: str) -> str:
    value = body.get(key)
    if not isinstance(value, str) or not value:
        raise ServeError(422, "bad_request", f"{route}: {key!r} must be a non-empty string", hint=None)
    return value


def seed_session(body: Any) -> dict[str, Any]:
    """``/seed_session``: the typed body's id back, or ``{}`` for an agent's legacy body."""
    if isinstance(body, Mapping) and "resources_session_id" in body:
        return {"resources_session_id": _text_field(body, "resources_session_id", "/seed_session")}
    return {}


def close_session(body: Any) -> dict[str, Any]:
    """``/close_session``: the closed session's id (nothing is kept, so closing never fails)."""
    if not isinstance(body, Mapping):
        raise ServeError(422, "bad_request", "/close_session: the body must be a JSON object", hint=None)
    return {"resources_session_id": _text_field(body, "resources_session_id", "/close_session")}


def _stats(rewards: Sequence[float]) -> dict[str, float]:
    return {
        "mean/reward": statistics.fmean(rewards),
        "max/reward": max(rewards),
        "min/reward": min(rewards),
        "median/reward": statistics.median(rewards),
        "std/reward": statistics.stdev(rewards) if len(rewards) > 1 else 0.0,
    }


def aggregate_metrics(body: Any) -> dict[str, Any]:
    """``/aggregate_metrics``: reward statistics per task (``group_level_metrics``) and over every measured
    rollout (``agent_metrics``; ``key_metrics`` holds the mean and the coverage), masked rollouts counted but
    not averaged. An empty list gives empty metrics."""
    responses = body.get("verify_responses") if isinstance(body, Mapping) else None
    if not isinstance(responses, list) or not all(isinstance(r, Mapping) for r in responses):
        raise ServeError(
            422,
            "bad_request",
            '/aggregate_metrics: the body must be {"verify_responses": [<verify answers>, ...]}',
            hint=None,
        )
    if not responses:
        return {"group_level_metrics": [], "agent_metrics": {}, "key_metrics": {}, "repeat_level_metrics": []}
    tasks: dict[int, list[float]] = {}
    masked_tasks: dict[int, int] = {}
    for i, response in enumerate(responses):
        reward = response.get("reward")
        if not isinstance(reward, (int, float)) or isinstance(reward, bool):
            raise ServeError(422, "bad_request", f"/aggregate_metrics: verify_responses[{i}] has no numeric reward")
        task = int(response.get(TASK_INDEX_KEY, 0))
        if response.get("mask_sample"):
            masked_tasks[task] = masked_tasks.get(task, 0) + 1
            tasks.setdefault(task, [])
        else:
            tasks.setdefault(task, []).append(float(reward))
    measured = [r for rewards in tasks.values() for r in rewards]
    coverage = {
        "coverage/measured_rollouts": len(measured),
        "coverage/masked_rollouts": sum(masked_tasks.values()),
        "coverage/measured_tasks": sum(1 for rewards in tasks.values() if rewards),
        "coverage/fully_masked_tasks": sum(1 for rewards in tasks.values() if not rewards),
    }
    groups = [
        {TASK_INDEX_KEY: task, "sample_count": len(rewards), **(_stats(rewards) if rewards else {})}
        for task, rewards in sorted(tasks.items())
    ]
    agent = {**(_stats(measured) if measured else {}), **coverage}
    key = {k: agent[k] for k in ("mean/reward", *coverage) if k in agent}
    return {"group_level_metrics": groups, "agent_metrics": agent, "key_metrics": key, "repeat_level_metrics": []}


__all__ = ["REVERIFY_MODE", "aggregate_metrics", "close_session", "seed_session"]
