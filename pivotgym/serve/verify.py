"""Verification over HTTP: a turn and candidates (``POST /verify/turn``), and NeMo-Gym's ``POST /verify``.

**A turn** is what ``pivotgym verify --turn`` reads: ``{"messages": [chat messages before the turn],
"expert": message | text | [{"name", "arguments"}], "tools": [...] (optional), "task_id": (optional),
"env_id": (optional)}`` (``prefix`` may stand for ``messages``). It is judged through the public
:meth:`VerifyContext.from_turn <pivotgym.verify.VerifyContext.from_turn>` with the env's functional (or a
named) verifier, each candidate through :func:`~pivotgym.verify.verify_safely`, so a broken verifier gives an
undecided verdict rather than an error.

**NeMo-Gym**: a resources server's ``/verify`` receives the row the agent ran
(``responses_create_params`` with the chat ``input`` and ``tools``, plus the row's own fields such as
``expected_action``/``ref_message`` and ``metadata``) and the model's ``response`` (a Responses API object
whose ``output`` holds ``message`` and ``function_call`` items), and answers with the request body plus a
``reward``. The row is read by :func:`pivotgym.pivot.formats.nemo_context` (the reader ``pivotgym pivots
import`` uses); the response's output becomes an assistant message, rendered to the action text the env's
policy would emit (:meth:`AgentEnv.render_action <pivotgym.env.AgentEnv.render_action>`), and judged. An
undecided verdict sets NeMo-Gym's ``mask_sample`` (the reward is not a measurement of the model) with
``failure_kind`` ``pivotgym:undecided`` and the reason in ``failure_reason``.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

from pivotgym.errors import RegistryError, TaskNotFound
from pivotgym.serve.sessions import ServeError, jsonable
from pivotgym.verify import VerifyContext, verify_safely

TURN_FORMAT = (
    '{"messages": [...], "expert": message | text | [{"name", "arguments"}], "tools": [...] (optional), '
    '"task_id": (optional)}'
)


def check_turn(turn: Any) -> dict[str, Any]:
    """The fields of a turn, checked like a ``pivotgym verify --turn`` file; 422 says what is wrong."""

    def bad(message: str) -> ServeError:
        return ServeError(422, "bad_turn", message, hint=f"a turn is {TURN_FORMAT}")

    if not isinstance(turn, Mapping):
        raise bad('"turn" must be a JSON object')
    messages = turn.get("messages", turn.get("prefix"))
    if not isinstance(messages, list) or not all(isinstance(m, Mapping) for m in messages):
        raise bad('"turn.messages" must be a list of chat messages')
    if "expert" not in turn:
        raise bad('the turn has no "expert" action')
    tools = turn.get("tools")
    if tools is not None and not (isinstance(tools, list) and all(isinstance(t, Mapping) for t in tools)):
        raise bad('"turn.tools" must be a list of functions (OpenAI tools or BFCL docs)')
    task_id = turn.get("task_id")
    return {
        "messages": messages,
        "expert": turn["expert"],
        "tools": tools,
        "env_id": turn.get("env_id"),
        "task_id": None if task_id is None else str(task_id),
    }


def _verifier(env_id: str, kind: str) -> Any:
    from pivotgym.registry import get_registry

    registry = get_registry()
    try:
        registry.env_spec(env_id)
    except RegistryError as exc:
        raise ServeError(404, "unknown_env", str(exc), hint="GET /envs lists the env ids") from None
    try:
        return registry.make_verifier(registry.verifier_name_for(env_id, kind))
    except RegistryError as exc:
        raise ServeError(
            404, "unknown_verifier", str(exc), hint='use "functional", "exact" or a verifier name'
        ) from None


def verdict_dict(verdict: Any, judge: Any, candidate: str) -> dict[str, Any]:
    """One verdict as the routes return it (the fields ``pivotgym verify --json`` prints)."""
    return {
        "candidate": candidate,
        "reward": jsonable(verdict.reward),
        "equivalent": verdict.equivalent,
        "reason": verdict.reason,
        "code": verdict.components.get("code", verdict.reason.split(": ")[0]),
        "undecided": verdict.undecided,
        "verifier": {"name": getattr(judge, "name", None), "version": getattr(judge, "version", None)},
        "components": jsonable({k: v for k, v in verdict.components.items() if k != "traceback"}),
    }


def judge_turn(
    env_id: str | None, turn: Any, candidates: Sequence[str], verifier: str = "functional"
) -> list[dict[str, Any]]:
    """Verdicts of ``candidates`` for one turn with ``env_id``'s verifier (``turn.env_id`` when not given)."""
    data = check_turn(turn)
    env_id = env_id or data["env_id"]
    if not env_id:
        raise ServeError(422, "no_env", "which env's verifier should judge? give env_id", hint="GET /envs")
    judge = _verifier(env_id, verifier)
    if data["task_id"] is not None:  # a typo must not turn into an ad-hoc turn judged without its task
        from pivotgym.registry import get_registry

        try:
            get_registry().make(env_id).get_task(data["task_id"])
        except TaskNotFound as exc:
            raise ServeError(
                404, "unknown_task", str(exc), hint='drop "task_id" to judge the turn from its messages alone'
            ) from None
    try:
        context = VerifyContext.from_turn(
            env_id, data["messages"], data["expert"], tools=data["tools"], task_id=data["task_id"]
        )
    except (TypeError, ValueError, KeyError) as exc:
        raise ServeError(422, "bad_turn", f"the turn cannot be read: {exc}", hint=f"a turn is {TURN_FORMAT}") from None
    return [verdict_dict(verify_safely(judge, context, text), judge, text) for text in candidates]


# ------------------------------------------------------------------------------------------------ NeMo-Gym
_renderers: dict[str, tuple[threading.Lock, Any]] = {}
_renderers_lock = threading.Lock()


def _render(env_id: str, message: Mapping[str, Any]) -> str:
    """The action text ``env_id``'s policy would emit for an assistant ``message`` (one env per id, locked)."""
    from pivotgym.registry import get_registry

    with _renderers_lock:
        entry = _renderers.get(env_id)
        if entry is None:
            entry = _renderers[env_id] = (threading.Lock(), get_registry().make(env_id))
    lock, env = entry
    with lock:
        return str(env.render_action(dict(message)))


def response_message(response: Any) -> dict[str, Any]:
    """The assistant message in a Responses API ``response``: its ``message`` items' text and its
    ``function_call`` items as tool calls (``reasoning`` and other items are not part of the action)."""
    from pivotgym.pivot.formats import message_from_expected_action

    if not isinstance(response, Mapping) or not isinstance(response.get("output"), list):
        raise ServeError(
            422,
            "bad_response",
            '"response" must be a Responses API object with an "output" list',
            hint='e.g. {"output": [{"type": "function_call", "name": ..., "arguments": "<json>", "call_id": ...}]}',
        )
    items = []
    for item in response["output"]:
        if not isinstance(item, Mapping):
            raise ServeError(422, "bad_response", "each response.output item must be an object", hint=None)
        kind = item.get("type")
        if kind == "function_call":
            if not isinstance(item.get("name"), str):
                raise ServeError(422, "bad_response", "a function_call output item needs a name", hint=None)
            items.append(item)
        elif kind == "message" and item.get("role", "assistant") == "assistant":
            items.append(item)
    return dict(message_from_expected_action(items))


def nemo_verify(body: Any, default_env: str | None = None) -> dict[str, Any]:
    """NeMo-Gym's ``/verify``: the request body with ``reward`` (and ``mask_sample``, ``failure_kind``,
    ``failure_reason``, and our verdict under ``pivotgym``) added."""
    from pivotgym.pivot.formats import nemo_context
    from pivotgym.registry import get_registry

    if not isinstance(body, Mapping):
        raise ServeError(422, "bad_request", "the body must be a JSON object", hint=None)
    params = body.get("responses_create_params")
    if not isinstance(params, Mapping) or not isinstance(params.get("input"), list):
        raise ServeError(
            422,
            "bad_request",
            '"responses_create_params.input" must be the list of messages the model saw',
            hint='post the row the agent ran, with the model\'s response under "response"',
        )
    message = response_message(body.get("response"))
    row_env = (
        ((body.get("metadata") or {}).get("pivotgym") or {}).get("env_id")
        if isinstance(body.get("metadata"), Mapping)
        else None
    )
    env_id = row_env or body.get("env_id") or default_env
    if not env_id:
        raise ServeError(
            422,
            "no_env",
            "which env's verifier should judge this row? it names none",
            hint='add "env_id" to the row, or start the server with --nemo-env ENV_ID',
        )
    try:
        get_registry().env_spec(str(env_id))
    except RegistryError as exc:
        raise ServeError(404, "unknown_env", str(exc), hint="GET /envs lists the env ids") from None
    try:
        context = nemo_context(body, str(env_id))
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise ServeError(
            422,
            "bad_row",
            f"the row cannot be read as a NeMo-Gym pivot row: {exc}",
            hint="a row needs responses_create_params.input and expected_action (or ref_message)",
        ) from None
    judge = _verifier(context.env_id, "functional")
    candidate = _render(context.env_id, message)
    verdict = verify_safely(judge, context, candidate)
    result = verdict_dict(verdict, judge, candidate)
    undecided = result["undecided"]
    return {
        **body,
        "reward": float(verdict.reward),
        "mask_sample": undecided is not None,
        "failure_kind": "pivotgym:undecided" if undecided else None,
        "failure_reason": undecided,
        "pivotgym": {"env_id": context.env_id, **{k: v for k, v in result.items() if k != "components"}},
    }


__all__ = ["TURN_FORMAT", "check_turn", "judge_turn", "nemo_verify", "response_message", "verdict_dict"]
