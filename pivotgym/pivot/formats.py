"""Pivot sets in other formats: NeMo-Gym / Nemotron pivot rows, and HF ``datasets`` prompts for TRL.

**NeMo-Gym pivot rows** (the Nemotron agentic "pivot" datasets) hold one state per JSON line::

    {"responses_create_params": {"input": [chat messages before the turn], "tools": [Responses-API tools]},
     "expected_action": {"type": "function_call", "name": ..., "arguments": "<json>"}
                     or {"type": "function_call_batch", "calls": [function_call, ...]}   (parallel calls)
                     or {"type": "message", "role": "assistant", "content": "..."},
     "ref_message": {the expert's assistant message}, "trajectory_id": ..., "info": {"turn": t},
     "agent_ref": {"name": ...}, "metadata": {...}, "pass_rate": mean, "pass_rate_total": K,
     "pass_rate_passed": number of passing samples}

``expected_action`` follows NeMo-Gym 0.7's discriminated union (``message`` / ``function_call`` /
``function_call_batch``, the batch holding at least one call); files written before the batch type existed
held parallel calls as a bare list, which import still reads.

Import turns each row into a :class:`~pivotgym.types.Trajectory` whose last assistant message is the
expert's action (so ``trajectory.turns()[-1]`` is the state). Without ``ref_message`` the expert's message
is rebuilt from ``expected_action`` (a batch becomes one message with all its calls); an expected action
that is none of the three types is an error naming the row, never an empty message. The row's tools are
kept in ``trajectory.metadata["tools"]`` (OpenAI form) and written back on export. :func:`nemo_context` and
:func:`verify_nemo_row` judge a candidate for a row with the env's own layered verifier through the public
:meth:`VerifyContext.from_turn <pivotgym.verify.VerifyContext.from_turn>` (the row's messages, tools and
expected action; no task lookup unless the row was exported by pivotgym), so an imported row is judged
exactly like a turn of the env's own tasks. ``input`` may use chat messages or Responses
items (``function_call``, ``function_call_output``, ``message`` with content parts); ``developer`` becomes
``system``. Export writes chat messages (tool calls in OpenAI form) plus our own ids under
``metadata.pivotgym``, so export -> import -> export is the identity.

**TRL**: :func:`to_hf_dataset` builds a ``datasets.Dataset`` with a conversational ``prompt`` column (what
the policy sees, assistant turns rendered to text) for ``GRPOTrainer``; the other columns (env id, task id,
the expert ``state`` as JSON (:class:`~pivotgym.types.ExpertState`: turn, tools, key), the functions offered at
the state as ``tools_json``, the expert's text, the profile's mean/var) reach reward functions as keyword arguments
(:mod:`pivotgym.integrations.trl` is the reward function and dataset loader built on it).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

from pivotgym.states import states_of
from pivotgym.types import (
    ExpertState,
    Message,
    PivotSet,
    Trajectory,
    Turn,
    TurnProfile,
    Verdict,
    content_hash,
    tool_calls_of,
)
from pivotgym.verify import Verifier, VerifyContext

__all__ = [
    "expected_action",
    "export_nemo_rows",
    "import_nemo_rows",
    "message_from_expected_action",
    "nemo_context",
    "nemo_row",
    "state_of_row",
    "state_tools",
    "to_hf_dataset",
    "tools_from_responses",
    "tools_of_row",
    "tools_to_responses",
    "turn_from_state",
    "verify_nemo_row",
]


# ------------------------------------------------------------------------------------------------ tools
def tools_to_responses(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI chat ``tools`` (``{"type": "function", "function": {...}}``) to the flat Responses form.

    A Responses function tool must say whether it is ``strict`` (the OpenAI type NeMo-Gym validates rows
    with requires the key; the API's default is true); a tool that does not say is written as
    ``strict: false``, since a schema with optional parameters is not strict-mode compliant."""
    out = []
    for tool in tools:
        fn = tool.get("function")
        flat = {"type": "function", **dict(fn)} if isinstance(fn, Mapping) else dict(tool)
        if flat.get("type", "function") == "function":
            flat.setdefault("strict", False)
        out.append(flat)
    return out


def tools_from_responses(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The flat Responses tool form back to OpenAI chat ``tools``."""
    out = []
    for tool in tools or []:
        if "function" in tool:
            out.append(dict(tool))
            continue
        fn = {k: v for k, v in tool.items() if k != "type"}
        out.append({"type": tool.get("type", "function"), "function": fn})
    return out


# ------------------------------------------------------------------------------------------------ actions
def expected_action(expert: Mapping[str, Any]) -> dict[str, Any]:
    """The ``expected_action`` of an expert message: one ``function_call``, a ``function_call_batch`` of
    parallel calls, or a text ``message`` (NeMo-Gym 0.7's three action types)."""
    calls = tool_calls_of(expert)  # type: ignore[arg-type]
    if not calls:
        return {"type": "message", "role": "assistant", "content": expert.get("content") or ""}
    raw = expert.get("tool_calls") or []
    items = [
        {
            "type": "function_call",
            "name": c.name,
            "arguments": json.dumps(c.arguments, ensure_ascii=False),
            "call_id": r.get("id") or "",
        }
        for c, r in zip(calls, raw)
    ]
    return items[0] if len(items) == 1 else {"type": "function_call_batch", "calls": items}


def _action_items(action: Any) -> list[Mapping[str, Any]]:
    """The Responses items of an ``expected_action``: a batch's calls, a bare list's items (files written
    before the batch type existed, and a response's ``output``), or the action itself."""
    if isinstance(action, Mapping) and action.get("type") == "function_call_batch":
        calls = action.get("calls")
        if not isinstance(calls, list) or not calls:
            raise ValueError('a "function_call_batch" expected action needs a non-empty "calls" list')
        for call in calls:
            if not isinstance(call, Mapping) or call.get("type", "function_call") != "function_call":
                raise ValueError(f'each call of a "function_call_batch" must be a function_call, got {call!r:.80}')
        return list(calls)
    items = action if isinstance(action, list) else [action]
    for item in items:
        if not isinstance(item, Mapping):
            raise ValueError(f"an expected action item must be an object, got {type(item).__name__}")
    return items


def message_from_expected_action(action: Any, content: str = "") -> Message:
    """An assistant message for an ``expected_action``: a ``function_call``, a ``function_call_batch``, a
    ``message``, a list of such items, or plain text. Anything else is a ``ValueError``: an action that
    cannot be read must not become an empty expert message."""
    if isinstance(action, str):
        return {"role": "assistant", "content": action}
    calls = []
    texts = []
    for i, item in enumerate(_action_items(action)):
        kind = item.get("type", "function_call" if "name" in item else "message")
        if kind == "function_call":
            if not isinstance(item.get("name"), str) or not item["name"]:
                raise ValueError(f"a function_call expected action needs a name, got {dict(item)!r:.80}")
            args = item.get("arguments", "{}")
            calls.append(
                {
                    "id": item.get("call_id") or item.get("id") or f"call_{i}",
                    "type": "function",
                    "function": {
                        "name": item["name"],
                        "arguments": args if isinstance(args, str) else json.dumps(args),
                    },
                }
            )
        elif kind == "message":
            texts.append(_text_of(item.get("content")))
        else:
            raise ValueError(
                f"unknown expected_action type {kind!r}; NeMo-Gym's are message, function_call and function_call_batch"
            )
    msg: dict[str, Any] = {"role": "assistant", "content": content or "".join(texts)}
    if calls:
        msg["tool_calls"] = calls
    return msg  # type: ignore[return-value]


def _text_of(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # Responses content parts
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return str(content)


def _messages_from_input(items: Sequence[Mapping[str, Any]]) -> list[Message]:
    """Chat messages from a Responses ``input`` list (chat messages and/or Responses items)."""
    out: list[dict[str, Any]] = []
    previous: str | None = None
    for item in items:
        kind = item.get("type")
        if kind == "function_call":  # consecutive calls are one assistant turn (parallel calls)
            call = message_from_expected_action(item)["tool_calls"][0]
            if previous == "function_call":
                out[-1]["tool_calls"].append(call)
            else:
                out.append({"role": "assistant", "content": "", "tool_calls": [call]})
            previous = kind
            continue
        previous = kind
        if kind == "function_call_output":
            out.append(
                {"role": "tool", "content": _text_of(item.get("output")), "tool_call_id": item.get("call_id", "")}
            )
            continue
        role = item.get("role", "user")
        msg: dict[str, Any] = {
            "role": "system" if role == "developer" else role,
            "content": _text_of(item.get("content")),
        }
        for extra in ("tool_calls", "tool_call_id", "name"):
            if item.get(extra) is not None:
                msg[extra] = item[extra]
        out.append(msg)
    return out  # type: ignore[return-value]


# ------------------------------------------------------------------------------------------------ states
def _pivot_rows(
    pivot_set: PivotSet | Iterable[TurnProfile], trajectories: Iterable[Trajectory] | None
) -> list[tuple[TurnProfile, ExpertState]]:
    """Each pivot with its state: the one it carries, else rebuilt from ``trajectories`` (pivot sets written
    before rows carried their state); :func:`pivotgym.states.states_of` says which row lacks one."""
    pivots = pivot_set.pivots if isinstance(pivot_set, PivotSet) else list(pivot_set)
    return list(zip(pivots, states_of(pivots, trajectories)))


def state_tools(state: ExpertState, env: Any | None) -> list[dict[str, Any]]:
    """The functions offered at a state (OpenAI form): the state's own (rows imported from NeMo-Gym carry
    them), else the env's ``tool_schemas()`` for its task, else none."""
    if state.tools is not None:
        return state.tools
    return _task_tools(env, state.task_id) if env is not None else []


def _task_tools(env: Any, task_id: str) -> list[dict[str, Any]]:
    try:
        env.reset(options={"task_id": task_id})
        return list(env.tool_schemas() or [])
    except Exception:
        return []


def nemo_row(
    state: ExpertState, profile: TurnProfile | None = None, tools: Sequence[Mapping[str, Any]] = ()
) -> dict[str, Any]:
    """One NeMo-Gym pivot row for a state (and its profile, when there is one)."""
    turn = state.turn
    row: dict[str, Any] = {
        "trajectory_id": turn.trajectory_id,
        "info": {"turn": turn.turn},
        "responses_create_params": {"input": [dict(m) for m in turn.prefix], "tools": tools_to_responses(tools)},
        "expected_action": expected_action(turn.expert),
        "ref_message": dict(turn.expert),
        "agent_ref": {"name": turn.env_id},
        "metadata": {
            "pivotgym": {
                "env_id": turn.env_id,
                "task_id": turn.task_id,
                "trajectory_id": turn.trajectory_id,
                "turn": turn.turn,
            }
        },
    }
    if profile is not None:
        passed = sum(1 for r in profile.rewards if r >= 1.0)
        row.update(pass_rate=profile.mean, pass_rate_total=profile.k, pass_rate_passed=passed)
        row["metadata"]["pivotgym"].update(
            key=profile.key, var=profile.var, verifier=profile.verifier, reference=profile.reference
        )
    return row


def export_nemo_rows(
    pivot_set: PivotSet | Iterable[TurnProfile],
    trajectories: Iterable[Trajectory] | None = None,
    *,
    with_tools: bool = True,
) -> list[dict[str, Any]]:
    """NeMo-Gym pivot rows for every pivot (``trajectories`` only for rows that carry no state); tools come
    from the state (an imported row's own) or from each env's ``tool_schemas()`` for the task
    (:func:`state_tools`)."""
    from pivotgym.registry import get_registry

    envs: dict[str, Any] = {}
    rows = []
    for profile, state in _pivot_rows(pivot_set, trajectories):
        tools: list[dict[str, Any]] = []
        if with_tools:
            if state.env_id not in envs and state.tools is None:
                try:
                    envs[state.env_id] = get_registry().make(state.env_id)
                except Exception:
                    envs[state.env_id] = None
            tools = state_tools(state, envs.get(state.env_id))
        rows.append(nemo_row(state, profile, tools))
    return rows


def import_nemo_rows(rows: Iterable[Mapping[str, Any]], env_id: str | None = None) -> list[Trajectory]:
    """Trajectories from NeMo-Gym pivot rows; each one's last assistant turn is the row's state.

    ``env_id`` names the pivotgym env the states belong to; rows exported by pivotgym carry their own.
    """
    out = []
    for n, row in enumerate(rows):
        params = row.get("responses_create_params") or {}
        if "input" not in params or "expected_action" not in row and "ref_message" not in row:
            raise ValueError(
                f"row {n}: a NeMo-Gym pivot row needs responses_create_params.input and "
                "expected_action (or ref_message)"
            )
        ours = (row.get("metadata") or {}).get("pivotgym") or {}
        env = ours.get("env_id") or env_id
        if not env:
            raise ValueError(
                f"row {n}: which env do these states belong to? pass env_id (--env-id), "
                f"e.g. the env registered for agent {((row.get('agent_ref') or {}).get('name'))!r}"
            )
        prefix = _messages_from_input(params["input"])
        if row.get("ref_message"):
            expert = dict(row["ref_message"])
            expert.pop("reasoning_content", None)
            expert["content"] = expert.get("content") or ""
        else:
            try:
                expert = dict(message_from_expected_action(row["expected_action"]))
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                raise ValueError(f"row {n}: cannot rebuild the expert's message from expected_action: {exc}") from exc
        info = row.get("info") or {}
        meta = row.get("metadata") or {}
        task_id = (
            ours.get("task_id") or meta.get("task_id") or meta.get("instance_id") or content_hash(params["input"])[:16]
        )
        trajectory_id = (
            ours.get("trajectory_id")
            or f"nemo:{row.get('trajectory_id', n)}:{info.get('turn', '')}:{info.get('step', '')}"
        )
        metadata: dict[str, Any] = {
            "source_format": "nemo-gym",
            "nemo": {
                k: v for k, v in row.items() if k not in ("responses_create_params", "expected_action", "ref_message")
            },
        }
        if params.get("tools"):
            metadata["tools"] = tools_from_responses(params["tools"])
        out.append(
            Trajectory(
                id=trajectory_id,
                env_id=env,
                task_id=str(task_id),
                messages=[*prefix, cast(Message, expert)],
                reward=0.0,
                source="nemo-gym",
                metadata=metadata,
            )
        )
    return out


def nemo_context(row: Mapping[str, Any], env_id: str | None = None) -> VerifyContext:
    """The verification context of one NeMo-Gym pivot row, built with :meth:`VerifyContext.from_turn`:
    the messages before the turn, the row's tools and its expected action. Rows exported by pivotgym keep
    their task id (so a verifier may use what the task knows); foreign rows are judged from the expert's
    action alone."""
    [trajectory] = import_nemo_rows([row], env_id=env_id)
    turn = trajectory.turns()[-1]
    ours = (row.get("metadata") or {}).get("pivotgym") or {}
    tools = trajectory.metadata.get("tools")
    return VerifyContext.from_turn(
        trajectory.env_id, turn.prefix, turn.expert, tools=tools, task_id=ours.get("task_id")
    )


def verify_nemo_row(
    row: Mapping[str, Any], candidate: str, env_id: str | None = None, verifier: Verifier | None = None
) -> Verdict:
    """Judge ``candidate`` for a NeMo-Gym pivot row with ``verifier`` (default: the env's functional
    verifier, the same layered one used for the env's own turns). Never raises on a bad candidate."""
    from pivotgym.registry import verifier_for
    from pivotgym.verify import verify_safely

    context = nemo_context(row, env_id)
    judge = verifier if verifier is not None else verifier_for(context.env_id)
    return verify_safely(judge, context, candidate)


# ------------------------------------------------------------------------------------------------ TRL
def to_hf_dataset(pivot_set: PivotSet | Iterable[TurnProfile], trajectories: Iterable[Trajectory] | None = None) -> Any:
    """A ``datasets.Dataset`` of pivot prompts for TRL's ``GRPOTrainer`` (conversational ``prompt`` column);
    ``trajectories`` only for rows that carry no state.

    ``tools_json`` holds the functions offered at the state as a JSON string (OpenAI ``tools``; ``""`` when
    none): a string because Arrow cannot store schemas of different shapes in one column. An imported
    NeMo-Gym row's own tools are kept, so its candidates are judged against them (:func:`tools_of_row`)."""
    from datasets import Dataset

    from pivotgym.registry import get_registry

    envs: dict[str, Any] = {}
    names = ("prompt", "env_id", "task_id", "trajectory_id", "turn", "key", "expert", "state", "tools_json", "mean")
    columns: dict[str, list[Any]] = {k: [] for k in (*names, "var")}
    for profile, state in _pivot_rows(pivot_set, trajectories):
        turn = state.turn
        if turn.env_id not in envs:
            envs[turn.env_id] = get_registry().make(turn.env_id)
        env = envs[turn.env_id]
        tools = state_tools(state, env)
        columns["tools_json"].append(json.dumps(tools, ensure_ascii=False) if tools else "")
        columns["prompt"].append(
            [{"role": m["role"], "content": m.get("content") or ""} for m in env.prompt_messages(turn.prefix)]
        )
        columns["env_id"].append(turn.env_id)
        columns["task_id"].append(turn.task_id)
        columns["trajectory_id"].append(turn.trajectory_id)
        columns["turn"].append(turn.turn)
        columns["key"].append(profile.key)
        columns["expert"].append(env.render_action(turn.expert))
        columns["state"].append(json.dumps(state.to_dict(), ensure_ascii=False))
        columns["mean"].append(float(profile.mean))
        columns["var"].append(float(profile.var))
    return Dataset.from_dict(columns)


def tools_of_row(tools_json: str | None) -> list[dict[str, Any]] | None:
    """The ``tools_json`` column of a dataset row back to OpenAI ``tools`` (None when the row has none)."""
    if not tools_json:
        return None
    tools = json.loads(tools_json)
    return [dict(t) for t in tools] if isinstance(tools, list) and tools else None


def state_of_row(state: str | Mapping[str, Any], tools_json: str | None = None) -> ExpertState:
    """The :class:`~pivotgym.types.ExpertState` in a dataset's ``state`` column (for a reward function to verify
    against). A dataset written before the column held the whole state holds the bare turn there, and the
    offered functions only in ``tools_json``."""
    data = json.loads(state) if isinstance(state, str) else dict(state)
    if "turn" in data and isinstance(data["turn"], Mapping):
        return ExpertState.from_dict(data)
    return ExpertState(Turn.from_dict(data), tools_of_row(tools_json))


def turn_from_state(state: str | Mapping[str, Any]) -> Turn:
    """The :class:`Turn` of a dataset's ``state`` column (see :func:`state_of_row`)."""
    return state_of_row(state).turn
