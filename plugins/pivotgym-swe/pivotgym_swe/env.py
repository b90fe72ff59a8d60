"""SWEEnv: repair a repository with view / search / edit / run / submit tool calls.

Each episode works on its own buggy working copy (forked from a cached pristine tree). ``run`` executes in
the sandbox, with every host copy of the task's answer hidden (:mod:`pivotgym_swe.leaks`); ``submit`` ends the
episode with reward 1 only if our own run of FAIL_TO_PASS and PASS_TO_PASS, in a fresh sandbox on a fork of
the state with the tests restored, passes. ``snapshot``/``restore`` fork the working copy, so a verifier can try
several actions from the exact state at turn t.
"""

from __future__ import annotations

import atexit
import copy
import re
import shutil
import tempfile
import weakref
from pathlib import Path
from typing import Any

from pivotgym import AgentEnv, InvalidAction, StepOutcome, Task
from pivotgym.sandbox import Limits, Sandbox, fork_dir, get_sandbox, remove_dir
from pivotgym.types import Message, ToolCall, assistant_message, message
from pivotgym_swe import tools
from pivotgym_swe.leaks import answer_paths
from pivotgym_swe.tasks import load_task_set, materialize, pristine_tree, task_file
from pivotgym_swe.testing import Judgement, judge

SYSTEM_PROMPT = """You are fixing a bug in a Python repository. Act with exactly one tool call per turn:
<tool_call>{{"name": TOOL, "arguments": {{...}}}}</tool_call>
Tools:
{tools}
Find the faulty library code, fix it with edit (exact text replacement), check with run, then submit."""

#: limits of one ``run``: per process (CPU, address space, processes, file size) and, for all its processes
#: together, memory (a cgroup where the host allows one) and what the work dir may hold (the episode's disk:
#: nothing of a run outlives it, and a run that overfills the work dir ends the episode)
RUN_LIMITS = Limits(
    wall_seconds=60,
    cpu_seconds=60,
    memory_bytes=2 << 30,
    max_processes=64,
    file_size_bytes=32 << 20,
    output_bytes=64 << 10,
    total_memory_bytes=2 << 30,
    disk_bytes=256 << 20,
)
OBS_MAX_CHARS = 6000
_DURATION = re.compile(r"\b(in )\d+(?:\.\d+)?s\b|\b\d+\.\d+s\b")


def mask_durations(text: str) -> str:
    """Replace wall-clock durations in tool output, so replaying the same actions gives the same observations."""
    return _DURATION.sub(lambda m: (m.group(1) or "") + "<t>s", text)


def clip(text: str, limit: int = OBS_MAX_CHARS) -> str:
    if len(text) <= limit:
        return text
    return text[: limit // 3] + f"\n[... {len(text) - limit} characters cut ...]\n" + text[-(2 * limit) // 3 :]


class SWEEnv(AgentEnv):
    """Repository repair on one task set (``task_set``: toolz, more-itertools, humanevalfix) or a JSONL file."""

    splits = ("train", "test")
    max_turns = 30
    error_role = "tool"
    #: one command or edit per turn: the expert's run up to ~150 tokens; a model's edit may carry more code
    max_new_tokens = 512

    def __init__(
        self,
        task_set: str = "toolz",
        *,
        tasks_path: str | None = None,
        sandbox: str | Sandbox | None = None,
        run_limits: Limits = RUN_LIMITS,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.task_set = task_set
        self.tasks_path = Path(tasks_path) if tasks_path else task_file(task_set)
        self._sandbox_spec = sandbox
        self._sandbox: Sandbox | None = sandbox if isinstance(sandbox, Sandbox) else None
        self.run_limits = run_limits
        self.root = Path(tempfile.mkdtemp(prefix="pivotgym-swe-"))
        self._finalizer = weakref.finalize(self, shutil.rmtree, str(self.root), True)
        self.workdir: Path | None = None
        self._counter = 0
        self.last_judgement: Judgement | None = None

    # ------------------------------------------------------------------ plumbing
    @property
    def sandbox(self) -> Sandbox:
        if self._sandbox is None:
            self._sandbox = get_sandbox(self._sandbox_spec if isinstance(self._sandbox_spec, str) else None)
        return self._sandbox

    def _new_dir(self, stem: str) -> Path:
        self._counter += 1
        return self.root / f"{stem}-{self._counter}"

    def close(self) -> None:
        self._finalizer()
        super().close()

    def __deepcopy__(self, memo: dict) -> SWEEnv:
        return type(self)(
            self.task_set,
            tasks_path=str(self.tasks_path),
            sandbox=self._sandbox_spec,
            run_limits=self.run_limits,
            max_turns=self.max_turns,
            step_timeout=self.step_timeout,
        )

    # ------------------------------------------------------------------ AgentEnv
    def load_tasks(self, split: str) -> list[Task]:
        return [
            Task(id=row["instance_id"], split=row["split"], data=dict(row), metadata={"repo": row["repo"]})
            for row in load_task_set(str(self.tasks_path))
            if row["split"] == split
        ]

    def tool_schemas(self) -> list[dict[str, Any]]:
        return tools.tool_schemas()

    def initial_messages(self, task: Task) -> list[Message]:
        if self.workdir is not None and self.workdir.exists():
            remove_dir(self.workdir)
        self.workdir = materialize(task.data, self._new_dir("work"))
        self.last_judgement = None
        listing = ", ".join(sorted(p.name + ("/" if p.is_dir() else "") for p in self.workdir.iterdir()))
        tool_lines = "\n".join(f"- {n}: {spec['description']}" for n, spec in tools.TOOLS.items())
        return [
            message("system", SYSTEM_PROMPT.format(tools=tool_lines)),
            message(
                "user", f"Repository {task.data['repo']} (top level: {listing}).\n\n{task.data['problem_statement']}"
            ),
        ]

    def apply_action(self, action: str) -> StepOutcome:
        call = tools.parse_tool_call(action)
        assistant = assistant_message(action, [call])
        observation, reward, terminated, info = self.execute(call)
        obs = [message("tool", observation, tool_call_id=assistant["tool_calls"][0]["id"], name=call.name)]
        return StepOutcome(obs, reward=reward, terminated=terminated, info=info, assistant=assistant)

    def execute(self, call: ToolCall) -> tuple[str, float, bool, dict[str, Any]]:
        """Carry out one parsed tool call on the working copy: (observation, reward, terminated, info)."""
        args, root = call.arguments, self.workdir
        assert root is not None
        if call.name == "view":
            return tools.view(root, args["path"], args.get("start", 1), args.get("end")), 0.0, False, {"tool": "view"}
        if call.name == "search":
            return tools.search(root, args["pattern"], args.get("path", ".")), 0.0, False, {"tool": "search"}
        if call.name == "edit":
            return tools.edit(root, args["path"], args["old"], args["new"]), 0.0, False, {"tool": "edit"}
        if call.name == "run":
            assert self.task is not None
            result = self.sandbox.run(
                args["command"], root, limits=self.run_limits, hide=answer_paths(self.task.data.get("source"))
            )
            status = "timed out" if result.timed_out else f"exit code {result.returncode}"
            text = mask_durations(clip(result.output))
            info: dict[str, Any] = {"tool": "run", "returncode": result.returncode}
            if result.limit_hit:
                text += f"\n[{result.limit_message}]"
                info["limit"] = result.limit_hit
            if result.limit_hit == "disk":  # the work dir is over its cap: the episode cannot go on
                info["error"] = "disk_limit"
                return f"[{status}]\n{text}\n[The episode ends: the work dir exceeded its disk limit.]", 0.0, True, info
            return f"[{status}]\n{text}", 0.0, False, info
        # submit
        verdict = self.judge()
        reward = 1.0 if verdict.solved else 0.0
        text = f"Submitted. The hidden tests {'pass' if verdict.solved else 'do not pass'}: {verdict.summary}."
        return text, reward, True, {"tool": "submit", "solved": verdict.solved}

    def judge(self) -> Judgement:
        """Our own verdict on the current working copy (fresh fork, pristine tests, sandboxed run)."""
        assert self.task is not None and self.workdir is not None
        self.last_judgement = judge(self.workdir, self.task.data, pristine_tree(self.task.data), sandbox=self.sandbox)
        return self.last_judgement

    def render_action(self, msg: Message) -> str:
        return tools.render_tool_call(msg)

    # ------------------------------------------------------------------ probes (`pivotgym check`, `calibrate`)
    def wrong_action(self, expert_action: str) -> str | None:
        """At an ``edit`` turn, an edit that applies cleanly but leaves the bug: the expert's ``old`` text kept,
        with a comment appended to its last line (the optional capability ``pivotgym check`` probes verifiers
        with). None at other turns: reading or running something else is not wrong in itself."""
        call = self._expert_call(expert_action)
        if call is None or call.name != "edit":
            return None
        args = call.arguments
        return self._render(ToolCall("edit", {**args, "new": _with_comment(args["old"], "left as it was")}))

    def calibration_candidates(self, expert_action: str) -> list[str]:
        """Other actions worth judging at this turn (``pivotgym calibrate`` without a model): at an ``edit``,
        the expert's fix with a comment appended (an equivalent edit); at a ``view``, the file's first lines; at
        a ``search``, the pattern of the buggy function's name only; at a ``run``, the whole test suite."""
        call = self._expert_call(expert_action)
        if call is None:
            return []
        args = call.arguments
        if call.name == "edit":
            return [self._render(ToolCall("edit", {**args, "new": _with_comment(args["new"], "fixed")}))]
        if call.name == "view":
            return [self._render(ToolCall("view", {"path": args["path"], "start": 1, "end": 5}))]
        if call.name == "search":
            name = re.sub(r"^def |\\\($", "", str(args.get("pattern", "")))
            return [self._render(ToolCall("search", {"pattern": name}))] if name else []
        if call.name == "run":
            return [self._render(ToolCall("run", {"command": "python -m pytest -q -p no:cacheprovider"}))]
        return []

    def _expert_call(self, expert_action: str) -> ToolCall | None:
        try:
            return tools.parse_tool_call(expert_action)
        except InvalidAction:
            return None

    def _render(self, call: ToolCall) -> str:
        return self.render_action(assistant_message("", [call]))

    # ------------------------------------------------------------------ expert
    def expert_actions(self, task: Task) -> list[Message]:
        """Search for the buggy function, view it, revert the mutation, run the failing tests, submit."""
        data = task.data
        fix, mutation = data["fix"], data["mutation"]
        line = mutation["lineno"]
        targets = " ".join(data["FAIL_TO_PASS"][:5])
        calls = [
            ToolCall("search", {"pattern": rf"def {re.escape(mutation['function'])}\("}),
            ToolCall("view", {"path": fix["path"], "start": max(1, line - 6), "end": line + 6}),
            ToolCall("edit", {"path": fix["path"], "old": fix["old"], "new": fix["new"]}),
            ToolCall("run", {"command": f"python -m pytest -q -p no:cacheprovider {targets}"}),
            ToolCall("submit", {}),
        ]
        return [assistant_message("", [c]) for c in calls]

    # ------------------------------------------------------------------ state
    def snapshot(self) -> dict[str, Any]:
        base = super().snapshot()
        if self.workdir is None:
            return base
        snap_dir = fork_dir(self.workdir, self._new_dir("snap"))
        return {
            **base,
            "dir": str(snap_dir),
            "messages": copy.deepcopy(self.messages),
            "turn": self.turn,
            "done": self.done,
        }

    def restore(self, snapshot: dict[str, Any]) -> None:
        if "dir" not in snapshot:
            return super().restore(snapshot)
        self.task = self.get_task(snapshot["task_id"])
        if self.workdir is not None and self.workdir.exists():
            remove_dir(self.workdir)
        self.workdir = fork_dir(snapshot["dir"], self._new_dir("work"))
        self._actions = list(snapshot["actions"])
        self.messages = copy.deepcopy(snapshot["messages"])
        self.turn, self.done = snapshot["turn"], snapshot["done"]
        self.last_judgement = None


atexit.register(lambda: None)  # finalizers of live envs run at exit (weakref.finalize is atexit-aware)


def _with_comment(code: str, comment: str) -> str:
    """``code`` with ``  # comment`` at the end of its last line (a trailing newline kept)."""
    body = code.rstrip("\n")
    return f"{body}  # {comment}" + code[len(body) :]
