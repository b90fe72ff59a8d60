"""SWEEnv: repair a repository with view / search / edit / run / submit tool calls.

Each episode works on its own buggy working copy (forked from a cached pristine tree). ``run`` executes in
the sandbox on the task source's allow-listed Python runtime (:mod:`pivotgym_swe.runtime`: ``python``,
``pytest`` are the runtime's; the training venv is not in the sandbox), with every host copy of the task's
answer that is still visible hidden (:mod:`pivotgym_swe.leaks`); ``submit`` ends the episode with reward 1
only if our own run of FAIL_TO_PASS and PASS_TO_PASS, in a fresh sandbox on a fork of the state with the tests
restored, passes. When that run could not judge at all (the sandbox could not start, a process limit, the
repository could not be copied: ``TestRun.infrastructure_failure``), the step says so with
``info["verification_failed"]`` (the reason; ``info["error"] == "verification_failed"``) instead of passing
off reward 0 as a verdict. ``snapshot``/``restore`` fork the working copy, so a verifier can try several
actions from the exact state at turn t.

Episodes do not leak into each other: every judgement is tied to the episode it was asked in (a judge
abandoned at a step deadline that finishes later does not become the next episode's ``last_judgement``), and
``reset()``/``close()`` never raise on whatever the agent left in the work dir (removal is iterative and
best-effort; what cannot be removed now is retried when the env closes).
"""

from __future__ import annotations

import atexit
import copy
import os
import re
import tempfile
import threading
import weakref
from pathlib import Path
from typing import Any

from pivotgym import AgentEnv, InvalidAction, StepOutcome, Task
from pivotgym.sandbox import Limits, Sandbox, SandboxError, fork_dir, get_sandbox, remove_dir
from pivotgym.types import Message, ToolCall, assistant_message, message
from pivotgym_swe import tools
from pivotgym_swe.leaks import answer_paths
from pivotgym_swe.runtime import runtime_for, sandbox_for, source_key
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
        self._finalizer = weakref.finalize(self, _discard, str(self.root))
        self.workdir: Path | None = None
        self._counter = 0
        self.last_judgement: Judgement | None = None
        self._episode = 0  # bumped by every reset/restore; a judgement is kept only for the episode it was asked in
        self._episode_lock = threading.Lock()
        self._run_sandboxes: dict[str, tuple[Sandbox, dict[str, str], tuple[str, ...]]] = {}

    # ------------------------------------------------------------------ plumbing
    @property
    def sandbox(self) -> Sandbox:
        if self._sandbox is None:
            self._sandbox = get_sandbox(self._sandbox_spec if isinstance(self._sandbox_spec, str) else None)
        return self._sandbox

    def run_sandbox(self, source: dict[str, Any] | None) -> tuple[Sandbox, dict[str, str], tuple[str, ...]]:
        """(sandbox, environment, hidden paths) of a ``run`` on a task of ``source``: the env's sandbox set up
        for the source's runtime (built on first use), ``PATH`` with the runtime's ``bin`` first, and the
        answer copies still visible there (:func:`pivotgym_swe.leaks.answer_paths`)."""
        key = source_key(source)
        if key not in self._run_sandboxes:
            runtime = runtime_for(source)
            sandbox = sandbox_for(runtime, self.sandbox)
            roots = getattr(sandbox, "python_roots", None)
            self._run_sandboxes[key] = (sandbox, runtime.env_for(sandbox), answer_paths(source, python_roots=roots))
        return self._run_sandboxes[key]

    def _new_dir(self, stem: str) -> Path:
        self._counter += 1
        return self.root / f"{stem}-{self._counter}"

    def _new_episode(self) -> None:
        """Start a new episode: later judgements of the previous one are dropped; its work dir goes."""
        with self._episode_lock:
            self._episode += 1
            self.last_judgement = None
        if self.workdir is not None:
            _discard(self.workdir)
            self.workdir = None

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
            max_action_chars=self.max_action_chars,
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
        self._new_episode()
        self.workdir = materialize(task.data, self._new_dir("work"))
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
            sandbox, env, hide = self.run_sandbox(self.active_task.data.get("source"))
            result = sandbox.run(args["command"], root, limits=self.run_limits, env=env, hide=hide)
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
        verdict: Judgement | None = None
        try:
            verdict = self.judge()
            failure = infrastructure_failure(verdict)
        except SandboxError as exc:  # the judge's sandbox could not run at all: no verdict on the code
            failure = f"the judge's sandbox could not run: {exc}"[:300]
        if failure or verdict is None:
            text = f"Submitted, but the hidden tests could not be run ({failure}); the submission was not judged."
            info = {"tool": "submit", "solved": False, "error": VERIFICATION_FAILED, VERIFICATION_FAILED: failure}
            return text, 0.0, True, info
        reward = 1.0 if verdict.solved else 0.0
        text = f"Submitted. The hidden tests {'pass' if verdict.solved else 'do not pass'}: {verdict.summary}."
        return text, reward, True, {"tool": "submit", "solved": verdict.solved}

    def judge(self) -> Judgement:
        """Our own verdict on the current working copy (fresh fork, pristine tests, sandboxed run). It becomes
        :attr:`last_judgement` only if the episode it was asked in is still the current one."""
        with self._episode_lock:
            task, workdir, episode = self.task, self.workdir, self._episode
        assert task is not None and workdir is not None
        verdict = judge(workdir, task.data, pristine_tree(task.data), sandbox=self.sandbox)
        with self._episode_lock:
            if episode == self._episode:
                self.last_judgement = verdict
        return verdict

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
        snap_dir = fork_dir(self.workdir, self._new_dir("snap"), max_bytes=self.run_limits.disk_bytes)
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
        self._new_episode()
        self.workdir = fork_dir(snapshot["dir"], self._new_dir("work"), max_bytes=self.run_limits.disk_bytes)
        self._actions = list(snapshot["actions"])
        self.messages = copy.deepcopy(snapshot["messages"])
        self.turn, self.done = snapshot["turn"], snapshot["done"]


atexit.register(lambda: None)  # finalizers of live envs run at exit (weakref.finalize is atexit-aware)

#: the step info key (and error code) of a submission the judge could not judge: the core's undecided marker
VERIFICATION_FAILED = "verification_failed"


def infrastructure_failure(verdict: Judgement) -> str:
    """Why ``verdict`` is no judgement of the code (the sandbox could not start, a process limit, the repository
    could not be copied: ``TestRun.infrastructure_failure``), or "" when it is one."""
    run = verdict.run
    if not getattr(run, "infrastructure_failure", False):
        return ""
    return (run.error or "the judge's test run failed for reasons outside the code under test")[:300]


def _discard(path: str | os.PathLike[str]) -> None:
    """Remove a tree of any depth, best-effort: never raises (reset and close must survive any work dir)."""
    try:
        remove_dir(path)
    except Exception:
        pass


def _with_comment(code: str, comment: str) -> str:
    """``code`` with ``  # comment`` at the end of its last line (a trailing newline kept)."""
    body = code.rstrip("\n")
    return f"{body}  # {comment}" + code[len(body) :]
