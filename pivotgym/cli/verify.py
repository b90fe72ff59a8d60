"""``pivotgym verify``: judge candidate actions for any turn, from the command line.

A turn file is JSON: ``{"messages": [chat messages before the turn], "expert": <the expert's action>,
"tools": [offered functions, optional], "env_id": optional, "task_id": optional}``. ``expert`` is an
assistant message, its text, or a list of ``{"name", "arguments"}`` calls. A :class:`~pivotgym.types.Turn`
record (``prefix`` instead of ``messages``) is read too. The turn is judged through
:meth:`pivotgym.verify.VerifyContext.from_turn`, the same public API a program uses; without ``task_id``
the turn is *ad-hoc*: the verifier judges from the messages and the expert's action alone (a verifier that
needs the env state says so, see :meth:`pivotgym.verify.VerifyContext.env`).

Every verdict is printed; the command then exits 1 when any verdict is undecided (the verifier raised,
returned no ``Verdict``, or could not judge; :attr:`pivotgym.types.Verdict.undecided`), so a script can tell
"judged wrong" (reward 0, exit 0) from "not judged".
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import typer

from pivotgym.cli.output import CLIError, emit_json, table
from pivotgym.errors import TaskNotFound
from pivotgym.verify import VerifyContext, verify_batch_safely

TURN_HELP = (
    'JSON file: {"messages": [...], "expert": message | text | [{"name", "arguments"}], '
    '"tools": [...] (optional), "task_id": (optional)}'
)


def load_turn(path: Path) -> dict[str, Any]:
    """Read and check a turn file; errors say what is missing and how to write it."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8-sig"))
    except FileNotFoundError:
        raise
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"{path}: not valid JSON ({str(exc)[:120]}); expected {TURN_HELP}") from None
    if not isinstance(data, Mapping):
        raise ValueError(f"{path}: expected a JSON object, {TURN_HELP}")
    messages = data.get("messages", data.get("prefix"))
    if not isinstance(messages, list) or not all(isinstance(m, Mapping) for m in messages):
        raise ValueError(f'{path}: "messages" must be a list of chat messages ({TURN_HELP})')
    if "expert" not in data:
        raise ValueError(f'{path}: no "expert" action ({TURN_HELP})')
    tools = data.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise ValueError(f'{path}: "tools" must be a list of functions (OpenAI tools or BFCL docs)')
    return {
        "messages": messages,
        "expert": data["expert"],
        "tools": tools,
        "env_id": data.get("env_id"),
        "task_id": data.get("task_id"),
    }


def verify_turn(
    env_id: str, turn: Mapping[str, Any], candidates: list[str], verifier: str = "functional"
) -> list[dict[str, Any]]:
    """Verdicts (as dicts) of each candidate for one turn, with the env's functional (or named) verifier;
    ``undecided`` is why a verdict is not a judgement (None for a judgement)."""
    from pivotgym.registry import get_registry

    registry = get_registry()
    registry.env_spec(env_id)  # an unknown env id fails here, with the list of ids
    judge = registry.make_verifier(registry.verifier_name_for(env_id, verifier))
    if turn.get("task_id") is not None:  # a typo must not turn into an ad-hoc turn judged without its task
        registry.make(env_id).get_task(str(turn["task_id"]))
    context = VerifyContext.from_turn(
        env_id, turn["messages"], turn["expert"], tools=turn.get("tools"), task_id=turn.get("task_id")
    )
    out = []
    for text, verdict in zip(candidates, verify_batch_safely(judge, context, candidates)):
        out.append(
            {
                "candidate": text,
                "reward": verdict.reward,
                "equivalent": verdict.equivalent,
                "reason": verdict.reason,
                "code": verdict.components.get("code", verdict.reason.split(": ")[0]),
                "undecided": verdict.undecided,
                "verifier": {"name": judge.name, "version": judge.version},
                "components": verdict.components,
            }
        )
    return out


def verify_cmd(
    turn: Path = typer.Option(..., "--turn", help=TURN_HELP),
    env: str | None = typer.Option(
        None,
        "--env",
        help="Env id whose verifier judges (default: the turn file's env_id), e.g. tooluse/bfcl-simple-v0.",
    ),
    candidate: list[str] = typer.Option(
        [], "--candidate", help="A candidate action's text (repeatable); '-' reads one from stdin."
    ),
    candidates_file: Path | None = typer.Option(
        None, "--candidates", help='A file of candidates: JSON lines of strings or {"text": ...}.'
    ),
    verifier: str = typer.Option(
        "functional",
        help="functional, exact, judge (a model: $PIVOTGYM_JUDGE_MODEL), a verifier name, or a composition "
        "such as functional|judge (the judge where the rule is undecided) or message:judge|functional.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Judge candidate actions for any turn (functions, messages, expert action) with an env's verifier."""
    try:
        data = load_turn(turn)
    except ValueError as exc:
        raise CLIError(str(exc), hint="see `pivotgym verify --help` for the turn file format") from None
    env_id = env or data["env_id"]
    if not env_id:
        raise CLIError("which env's verifier should judge? pass --env", hint="`pivotgym envs` lists env ids")
    texts = [sys.stdin.read() if c == "-" else c for c in candidate]
    if candidates_file is not None:
        for n, line in enumerate(Path(candidates_file).read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except ValueError:
                raise CLIError(
                    f"{candidates_file}:{n}: not a JSON line", hint='write one JSON string or {"text": ...} per line'
                ) from None
            texts.append(item.get("text", "") if isinstance(item, Mapping) else str(item))
    if not texts:
        raise CLIError("no candidate to judge", hint="pass --candidate TEXT (repeatable) or --candidates FILE")
    try:
        results = verify_turn(env_id, data, texts, verifier)
    except TaskNotFound as exc:
        raise CLIError(
            str(exc),
            hint=f'drop "task_id" to judge the turn ad-hoc, or use an id from `pivotgym expert {env_id}` output',
        ) from None
    except ValueError as exc:
        raise CLIError(str(exc), hint="see `pivotgym verify --help` for the turn file format") from None
    if as_json:
        emit_json(results)
    else:
        rows = [
            [f"{r['reward']:g}", r["code"], r["reason"][:90], r["candidate"].replace("\n", " ")[:60]] for r in results
        ]
        typer.echo(table(rows, ["reward", "code", "reason", "candidate"]))
    undecided = [r for r in results if r["undecided"]]
    if undecided:
        why = undecided[0]["reason"]  # whole (the stored ``undecided`` is cut to 300 characters)
        typer.echo(f"error: {len(undecided)} of {len(results)} verdict(s) undecided, not judgements: {why}", err=True)
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add ``verify``."""
    app.command("verify")(verify_cmd)
