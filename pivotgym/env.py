"""AgentEnv: a gymnasium.Env for multi-turn text interaction.

A domain subclasses :class:`AgentEnv` and implements three methods:

* :meth:`AgentEnv.load_tasks` - the tasks of one split;
* :meth:`AgentEnv.initial_messages` - the opening chat messages for a task (system prompt, tools, question);
* :meth:`AgentEnv.apply_action` - parse and execute one raw assistant text, returning a :class:`StepOutcome`,
  or raising :class:`InvalidAction` for a malformed or inapplicable action.

Everything else - task selection under a seed, the chat history, turn limits, a step deadline, turning
errors into observations, replaying a prefix (so a verifier can act from the exact state at turn t), expert
trajectories from expert actions - is done here once for every domain.

The step deadline: every step has a wall-clock deadline, ``step_timeout`` seconds (default
:data:`DEFAULT_STEP_TIMEOUT`, 300 s: above the longest legitimate step of the shipped domains, a sandboxed
test run of up to 120 s plus its setup; pass a number to change it, ``None`` or 0 to turn it off).
``apply_action`` then runs in a worker thread; when the deadline passes, the step returns an error
observation (``info["error"] == "step_timeout"``), reward 0, and the episode ends (truncated). Python cannot
kill a thread, so the deadline keeps the *caller* responsive but does not stop the work: a domain must still
bound its own actions (sandbox deadlines, regex timeouts, no blocking opens), and an env whose step timed out
should be reset before reuse, since the abandoned step may still be touching its state.

The generation length: ``max_new_tokens`` is how many tokens one assistant turn of this env needs at most (a
PDDL action: a few dozen; a tool call: a few hundred). Evaluation, profiling and RL training generate at most
that many tokens per turn (:func:`generation_cap`, the one rule): a suite-wide, profiler or trainer cap can
only shorten it. ``None`` (the default) states no limit of its own: the caller's cap applies, else
:data:`DEFAULT_MAX_NEW_TOKENS`.
Set it as a class attribute, or per instance with ``make(env_id, max_new_tokens=N)`` (or the registration's
keyword arguments).

The action cap: ``max_action_chars`` is the longest action text an env reads (default
:data:`DEFAULT_MAX_ACTION_CHARS`, 100,000 characters: far above any turn of ``max_new_tokens``). A longer
action is refused before :meth:`AgentEnv.apply_action` sees it: an error observation, reward 0 and
``info["error"] == "action_too_long"``; the episode goes on, as after any malformed action. The step deadline
cannot stop a parser that holds the GIL (a backtracking regex, ``compile()``), so parsers must be linear in
the text (:mod:`pivotgym.parsing`) and the cap bounds what linear still costs. The action space
(``TextAction(max_length=...)``) and ``pivotgym serve`` use the same number. Set it as a class attribute, or
per instance with ``make(env_id, max_action_chars=N)``.
"""

from __future__ import annotations

import copy
import queue
import threading
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import gymnasium as gym

from pivotgym.errors import InvalidAction, TaskNotFound
from pivotgym.parsing.tool_calls import MAX_ACTION_CHARS
from pivotgym.spaces import Messages, TextAction
from pivotgym.types import Message, Role, Task, Trajectory, message

#: the default wall-clock deadline of one step, in seconds (see the module docstring)
DEFAULT_STEP_TIMEOUT: float = 300.0

#: new tokens per assistant turn where neither the env (``max_new_tokens = None``) nor the caller sets a limit
DEFAULT_MAX_NEW_TOKENS: int = 256

#: the longest action text an env reads unless it sets its own ``max_action_chars`` (see the module docstring)
DEFAULT_MAX_ACTION_CHARS: int = MAX_ACTION_CHARS


@dataclass
class StepOutcome:
    """What :meth:`AgentEnv.apply_action` returns for a well-formed action."""

    observation: list[Message]
    reward: float = 0.0
    terminated: bool = False
    info: dict[str, Any] = field(default_factory=dict)
    #: the structured reading of the action (e.g. with ``tool_calls``); stored in the history in place of
    #: the bare text so trajectories carry OpenAI-style tool calls. ``content`` keeps the raw text.
    assistant: Message | None = None


class AgentEnv(gym.Env[list, str]):
    """Base class of every pivotgym environment. Observations are lists of new chat messages."""

    metadata: dict[str, Any] = {"render_modes": ["ansi"]}
    #: the splits this env serves; domains add OOD splits (e.g. ``"ood"``, ``"test_java"``)
    splits: tuple[str, ...] = ("train", "test")
    #: episode length limit in assistant turns (truncation)
    max_turns: int = 20
    #: role of error observations (``"tool"`` suits tool-calling envs)
    error_role: Role = "user"
    #: most new tokens one assistant turn needs (evaluation's generation length); None: no limit of its own,
    #: the caller's applies (see the module docstring)
    max_new_tokens: int | None = None
    #: longest action text the env reads; a longer one is an ``action_too_long`` error observation, refused
    #: before any parsing (see the module docstring)
    max_action_chars: int = DEFAULT_MAX_ACTION_CHARS

    def __init__(
        self,
        *,
        max_turns: int | None = None,
        step_timeout: float | None = DEFAULT_STEP_TIMEOUT,
        render_mode: str | None = None,
        max_action_chars: int | None = None,
        max_new_tokens: int | None = None,
    ) -> None:
        if max_turns is not None:
            self.max_turns = int(max_turns)
        if max_action_chars is not None:
            self.max_action_chars = max_action_chars
        if (
            isinstance(self.max_action_chars, bool)
            or not isinstance(self.max_action_chars, int)
            or self.max_action_chars < 1
        ):
            raise ValueError(
                f"{type(self).__name__}: max_action_chars must be a positive integer, got {self.max_action_chars!r}"
            )
        if max_new_tokens is not None:
            self.max_new_tokens = max_new_tokens
        check_max_new_tokens(self.max_new_tokens, type(self).__name__)
        self.step_timeout = step_timeout
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}")
        self.render_mode = render_mode
        self.observation_space = Messages()
        self.action_space = TextAction(max_length=self.max_action_chars)
        self.env_id: str = getattr(self, "env_id", "") or type(self).__name__
        self.task: Task | None = None
        self.messages: list[Message] = []
        self.turn: int = 0
        self.done: bool = True
        self._tasks: dict[str, list[Task]] = {}
        self._actions: list[str] = []

    # ------------------------------------------------------------------ to implement in a domain
    def load_tasks(self, split: str) -> list[Task]:
        """Return the tasks of ``split`` (called once per split, then cached)."""
        raise NotImplementedError

    def initial_messages(self, task: Task) -> list[Message]:
        """The messages that open an episode on ``task``; the domain sets its internal state here."""
        raise NotImplementedError

    def apply_action(self, action: str) -> StepOutcome:
        """Parse and execute one assistant text. Raise :class:`InvalidAction` when it cannot be executed."""
        raise NotImplementedError

    # ------------------------------------------------------------------ optional domain hooks
    def tool_schemas(self) -> list[dict[str, Any]]:
        """JSON schemas (OpenAI ``tools`` format) of the tools of the current task; empty if none."""
        return []

    def expert_actions(self, task: Task) -> list[Message] | None:
        """The expert's assistant messages for ``task`` (or None if it has no known solution).

        The default :meth:`expert_trajectories` replays them through the env so that observations in the
        trajectory are the env's real outputs.
        """
        raise NotImplementedError(f"{type(self).__name__} does not provide expert actions")

    def continuation_actions(self) -> list[str] | None:
        """Actions that complete the task optimally from the current state, ``[]`` when nothing more can be
        done (the task is complete, or can no longer be completed: a dead end), or None when the env cannot
        say. Optional: ``pivotgym calibrate --continuation optimal``
        plays a candidate action out with it, which judges an action that is equivalent to the expert's by
        another route (the expert's own remaining actions may no longer apply after it). The default, None,
        means the env offers no such continuation."""
        return None

    #: what :meth:`candidate_actions` offers, in a phrase the floors' report prints ("an action of the task's
    #: own expert trajectory"); empty where the env has no candidates
    candidate_description: ClassVar[str] = ""
    #: what "achieves what the expert's action achieved" means in this domain, in words for the ``judge``
    #: verifier (:mod:`pivotgym.verify.llm_judge`); None: the judge's generic instructions. A config overrides
    #: it (``$PIVOTGYM_JUDGE_INSTRUCTIONS``, or ``JudgeVerifier(instructions=...)``).
    judge_instructions: ClassVar[str | None] = None

    def legal_actions(self) -> list[str] | None:
        """Every action the env would accept in the current state, one canonical text each, or None when the
        env cannot enumerate them (free text, code, tool calls with open arguments). Optional: the evaluation's
        floors read it (the random-legal-action baseline, the share of states where the verifier credits two
        or more distinct actions) and the likelihood scores (the probability mass a model puts on legal and on
        credited actions). The default, None, leaves those rows out for the env."""
        return None

    def candidate_actions(self) -> list[str] | None:
        """A finite set of plausible actions for the current state, for an env whose :meth:`legal_actions` is
        None (tool calls with open arguments, free text), or None. Optional: the floors judge these in place of
        the legal actions, so a domain with no finite action set still gets a naive-policy floor (a uniformly
        random candidate) and the share of states where two or more candidates are credited; the report names
        the set from :attr:`candidate_description`. Never used for likelihood scores (they need every legal
        action)."""
        return None

    def progress(self) -> float | None:
        """How far the current state is towards the goal, in [0, 1] (1: solved), or None when the env cannot
        say. Optional: the end-to-end RL baseline's partial-progress reward row reads it (e.g. planning's
        ``1 - h*(s) / h*(s0)``); the outcome reward stays the main comparison. The default, None."""
        return None

    def render_action(self, msg: Message) -> str:
        """The text a policy would emit for assistant message ``msg`` (inverse of the action parser).

        The default returns the raw ``content``; tool-calling domains render ``tool_calls`` when the
        content is empty.
        """
        return msg.get("content") or ""

    # ------------------------------------------------------------------ tasks
    @property
    def active_task(self) -> Task:
        """The task of the episode in progress, for domain code that runs only inside one (``apply_action``,
        a verifier at a turn): ``self.task`` without the ``None`` that means no episode was started."""
        if self.task is None:
            raise gym.error.ResetNeeded(f"{self.env_id}: no episode is in progress; call reset() first")
        return self.task

    def tasks(self, split: str = "train") -> list[Task]:
        if split not in self.splits:
            raise KeyError(f"{self.env_id}: unknown split {split!r}; splits are {list(self.splits)}")
        if split not in self._tasks:
            self._tasks[split] = list(self.load_tasks(split))
        return self._tasks[split]

    def get_task(self, task_id: str) -> Task:
        for split in self.splits:
            for task in self.tasks(split):
                if task.id == task_id:
                    return task
        raise TaskNotFound(f"{self.env_id}: no task with id {task_id!r}")

    # ------------------------------------------------------------------ gymnasium API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[list, dict]:
        super().reset(seed=seed)
        options = dict(options or {})
        if "task_id" in options:
            task = self.get_task(options["task_id"])
        else:
            pool = self.tasks(options.get("split", self.splits[0]))
            if not pool:
                raise ValueError(f"{self.env_id}: split {options.get('split', self.splits[0])!r} has no tasks")
            task = pool[int(self.np_random.integers(len(pool)))]
        self.task = task
        self.turn = 0
        self.done = False
        self._actions = []
        obs = _copy_messages(self.initial_messages(task))
        self.messages = _copy_messages(obs)
        return obs, {"task_id": task.id, "split": task.split, "turn": 0}

    def step(self, action: str) -> tuple[list, float, bool, bool, dict]:
        if self.task is None:
            raise gym.error.ResetNeeded("call reset() before step()")
        if self.done:
            return self._error_step("The episode has ended; call reset() to start a new one.", "episode_over")
        if not isinstance(action, str):
            return self._error_step(f"An action must be text (str), got {type(action).__name__}.", "not_text")
        self._actions.append(action)
        self.turn += 1
        try:
            if len(action) > self.max_action_chars:  # before any parser sees it
                raise InvalidAction(
                    f"The reply has {len(action)} characters; {self.env_id} reads at most {self.max_action_chars} "
                    "per turn. Send one shorter action.",
                    code="action_too_long",
                )
            outcome = self._run_with_deadline(action)
        except InvalidAction as exc:
            self.messages.append(message("assistant", action))
            return self._error_step(str(exc), exc.code, count_turn=False)
        except _StepTimeout:
            self.messages.append(message("assistant", action))
            self.done = True
            obs = [message(self.error_role, f"Error: the action did not finish within {self.step_timeout}s.")]
            self.messages.extend(obs)
            return obs, 0.0, False, True, self._info(error="step_timeout")
        except Exception as exc:  # a bug in the domain: keep the caller alive, end the episode, say why
            self.messages.append(message("assistant", action))
            self.done = True
            obs = [message(self.error_role, f"Error: the environment failed on this action ({exc!r}).")]
            self.messages.extend(obs)
            return obs, 0.0, False, True, self._info(error="env_exception", traceback=traceback.format_exc())

        assistant = dict(outcome.assistant) if outcome.assistant else message("assistant", action)
        assistant.setdefault("content", action)
        self.messages.append(assistant)  # type: ignore[arg-type]
        obs = _copy_messages(outcome.observation)
        self.messages.extend(_copy_messages(obs))
        terminated = bool(outcome.terminated)
        truncated = not terminated and self.turn >= self.max_turns
        self.done = terminated or truncated
        return obs, float(outcome.reward), terminated, truncated, self._info(**outcome.info)

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        return "\n".join(f"[{m['role']}] {m.get('content', '')}" for m in self.messages)

    # ------------------------------------------------------------------ state for verifiers
    def snapshot(self) -> Any:
        """An opaque copy of the episode state. The default records the actions taken (replayed by
        :meth:`restore`); stateful domains override both with a direct copy of their state."""
        if self.task is None:
            raise gym.error.ResetNeeded("nothing to snapshot before reset()")
        return {"task_id": self.task.id, "actions": list(self._actions)}

    def restore(self, snapshot: Any) -> None:
        """Return to a state produced by :meth:`snapshot`."""
        self.goto(snapshot["task_id"], snapshot["actions"])

    def goto(self, task_id: str, actions: Sequence[str | Message]) -> list[Message]:
        """Reset to ``task_id`` and replay ``actions`` (texts, or assistant messages, or a whole message
        prefix whose non-assistant messages are skipped). Returns the history. Deterministic replay is what
        lets a verifier act from the exact state at turn t."""
        self.reset(options={"task_id": task_id})
        for act in actions:
            if isinstance(act, dict):
                if act.get("role") != "assistant":
                    continue
                act = self.render_action(act)
            self.step(act)
        return self.messages

    # ------------------------------------------------------------------ expert data
    def expert_trajectories(self, split: str = "train", limit: int | None = None) -> Iterator[Trajectory]:
        """Expert trajectories for the tasks of ``split``, built by replaying :meth:`expert_actions`.

        Tasks without a solution are skipped. The trajectory's messages are the env's own history, with the
        expert's structured messages (tool calls) in place of the assistant turns.
        """
        produced = 0
        for task in self.tasks(split):
            if limit is not None and produced >= limit:
                return
            actions = self.expert_actions(task)
            if actions is None:
                continue
            obs, _ = self.reset(options={"task_id": task.id})
            messages: list[Message] = list(obs)
            reward = 0.0
            for act in actions:
                obs, reward, terminated, truncated, info = self.step(self.render_action(act))
                expert_msg = dict(act)
                expert_msg.setdefault("content", "")
                messages.append(expert_msg)  # type: ignore[arg-type]
                messages.extend(obs)
                if terminated or truncated:
                    break
            produced += 1
            yield Trajectory(
                id=f"{self.env_id}:{task.id}",
                env_id=self.env_id,
                task_id=task.id,
                messages=messages,
                reward=float(reward),
                source="expert",
                metadata={"split": split, "n_turns": len(actions)},
            )

    def prompt_messages(self, messages: Sequence[Message]) -> list[Message]:
        """Messages as a model should see them: assistant turns become the text the model would emit."""
        out: list[Message] = []
        for m in messages:
            if m.get("role") == "assistant":
                out.append(message("assistant", self.render_action(m)))
            else:
                out.append({"role": m["role"], "content": m.get("content") or ""})
        return out

    # ------------------------------------------------------------------ internals
    def _info(self, **extra: Any) -> dict[str, Any]:
        info: dict[str, Any] = {"task_id": self.task.id if self.task else None, "turn": self.turn}
        info.update(extra)
        return info

    def _error_step(self, text: str, code: str, count_turn: bool = True) -> tuple[list, float, bool, bool, dict]:
        """Emit an error observation with reward 0; the episode goes on unless the turn limit is reached."""
        if count_turn and not self.done:
            self.turn += 1
        obs = [message(self.error_role, f"Error: {text}")]
        if not self.done:
            self.messages.extend(_copy_messages(obs))
        truncated = not self.done and self.turn >= self.max_turns
        if truncated:
            self.done = True
        return obs, 0.0, False, truncated, self._info(error=code, error_message=text)

    def _run_with_deadline(self, action: str) -> StepOutcome:
        if not self.step_timeout:
            return self.apply_action(action)
        worker = self.__dict__.get("_step_worker")
        if worker is None:
            worker = self.__dict__["_step_worker"] = _StepWorker(f"{self.env_id}-step")
        try:
            return worker.call(self.apply_action, action, float(self.step_timeout))
        except _StepTimeout:
            self.__dict__.pop("_step_worker", None)  # abandoned: it exits once the stuck step returns
            raise

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_step_worker", None)  # a thread is neither copied nor pickled
        return state


def check_max_new_tokens(value: Any, owner: str) -> int | None:
    """``value`` as an env's generation limit: a positive int or None; anything else is a one-line error."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{owner}: max_new_tokens must be a positive integer or None, got {value!r}")
    return value


def generation_cap(env: Any, cap: int | None = None) -> int:
    """New tokens per assistant turn for ``env``: its own ``max_new_tokens``, which ``cap`` (a suite's, the
    profiler's or a trainer's setting) can only shorten; an env without one gets ``cap``, else
    :data:`DEFAULT_MAX_NEW_TOKENS`. Evaluation, profiling and training all use this rule, so none of them
    samples what another would cut off."""
    own = check_max_new_tokens(getattr(env, "max_new_tokens", None), getattr(env, "env_id", type(env).__name__))
    if own is None:
        return int(cap) if cap else DEFAULT_MAX_NEW_TOKENS
    return min(int(cap), own) if cap else own


class _StepTimeout(Exception):
    pass


class _StepWorker:
    """One reusable daemon thread that runs steps (a thread per step cost ~0.3 ms; a hand-off ~0.03 ms)."""

    def __init__(self, name: str) -> None:
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.results: queue.SimpleQueue = queue.SimpleQueue()
        # the thread holds the queues, not this object: when the env goes, __del__ tells the thread to stop
        threading.Thread(target=_worker_loop, args=(self.jobs, self.results), daemon=True, name=name).start()

    def call(self, fn: Any, arg: Any, timeout: float) -> Any:
        self.jobs.put((fn, arg))
        try:
            ok, value = self.results.get(timeout=timeout)
        except queue.Empty:
            self.jobs.put(None)  # stop after the stuck job, whenever it returns
            raise _StepTimeout() from None
        if not ok:
            raise value
        return value

    def __del__(self) -> None:
        try:
            self.jobs.put(None)
        except Exception:
            pass


def _worker_loop(jobs: queue.SimpleQueue, results: queue.SimpleQueue) -> None:
    while True:
        job = jobs.get()
        if job is None:
            return
        fn, arg = job
        try:
            results.put((True, fn(arg)))
        except BaseException as exc:
            results.put((False, exc))
        del job, fn, arg  # keep no reference to the env between steps


def _copy_messages(messages: Sequence[Message]) -> list[Message]:
    """Copies that callers may mutate without touching the env's history (deep only where needed)."""
    return [dict(m) if all(type(v) is str for v in m.values()) else copy.deepcopy(m) for m in messages]  # type: ignore[misc]


__all__ = [
    "DEFAULT_MAX_ACTION_CHARS",
    "DEFAULT_MAX_NEW_TOKENS",
    "DEFAULT_STEP_TIMEOUT",
    "AgentEnv",
    "InvalidAction",
    "StepOutcome",
    "TaskNotFound",
    "check_max_new_tokens",
    "generation_cap",
]
