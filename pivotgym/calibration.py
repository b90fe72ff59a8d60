"""Calibrating a verifier against what actually happens when the episode goes on.

A turn-level verifier answers "does this action achieve what the expert's achieved?" without playing the
episode out. Every env with expert trajectories holds what is needed to check that answer: put a candidate
action in place of the expert's at state s_t, let the episode continue, and read the env's own terminal
reward. The *continuation* is either

* ``"expert"``: the expert's remaining actions, as recorded (any env, no extra code). An action that reaches
  the same state as the expert's leaves them valid; one that does not usually breaks them. An action that is
  equivalent by another route (picking another of two interchangeable blocks) can break them too, so under
  this continuation a "false positive" may be a verifier that is right for a reason the replay cannot see.
* ``"optimal"``: the env's own :meth:`~pivotgym.env.AgentEnv.continuation_actions` from the state after the
  candidate (planning: an optimal plan from there). Exact wherever the env provides it.

The outcome is a *success* when the episode then terminates with a positive reward within the expert's own
number of turns (an optimal continuation makes every legal action reach the goal eventually; what the
expert achieved is the goal in that many turns). A candidate the env refuses (an error observation) is a
failure. An env that cannot say how to go on from a state (``continuation_actions`` returned None) leaves
that candidate *undetermined*, counted apart and out of the matrix.

Candidates come from a model (K samples per state at temperature 1, seeded per state) or, without one, from
the env itself: the expert's action, paraphrases of it (:func:`paraphrases`: the same tool calls with
arguments or parallel calls in another order, or in python call syntax; the same text with other
surrounding whitespace), the env's optional ``calibration_candidates(expert_text)`` (planning: every
applicable action) and its optional ``wrong_action(expert_text)``.

Each candidate is judged by the env's functional verifier and by its exact-match verifier, and
:class:`CalibrationResult` holds each verifier's confusion matrix against the outcomes, rates with Wilson
intervals, and the disagreeing examples. ``pivotgym calibrate`` prints them; ``pivotgym check`` runs a small
probe of the same machinery (:func:`calibrate` with the env's own candidates on one trajectory).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pivotgym.env import AgentEnv, generation_cap
from pivotgym.errors import PivotgymError
from pivotgym.eval.stats import wilson
from pivotgym.parsing.tool_calls import python_call, render_calls
from pivotgym.sampling.base import Sampler, SamplingParams, sample_seeded
from pivotgym.types import Message, ToolCall, Trajectory, Turn, content_hash, tool_calls_of
from pivotgym.verify import Verifier, VerifyContext, verify_batch_safely

__all__ = [
    "CONTINUATIONS",
    "CalibrationError",
    "CalibrationResult",
    "Candidate",
    "Confusion",
    "Outcome",
    "Row",
    "calibrate",
    "continue_episode",
    "env_candidates",
    "format_calibration",
    "paraphrases",
    "provides_continuation",
]

#: how an episode goes on after the candidate (see the module docstring)
CONTINUATIONS = ("expert", "optimal")


class CalibrationError(PivotgymError, ValueError):
    """A calibration that cannot run as asked (no expert trajectories, no optimal continuation, ...)."""


@dataclass(frozen=True)
class Candidate:
    """An action to judge at a state and where it came from: ``expert``, ``paraphrase``, ``env`` (the env's
    ``calibration_candidates``), ``wrong_action`` or ``model``."""

    text: str
    source: str


@dataclass(frozen=True)
class Outcome:
    """What happened when the episode went on after a candidate. ``success`` is None when it could not be
    determined (the env had no continuation from the state the candidate reached)."""

    success: bool | None
    detail: str
    turns: int = 0


@dataclass
class Row:
    """One judged candidate: the state, the candidate, its outcome and each verifier's verdict
    (``{"credited": bool | None, "reason": str}``; ``credited`` None for an undecided verdict)."""

    trajectory_id: str
    task_id: str
    turn: int
    candidate: Candidate
    outcome: Outcome
    verdicts: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "trajectory_id": self.trajectory_id,
            "task_id": self.task_id,
            "turn": self.turn,
            "candidate": self.candidate.text,
            "source": self.candidate.source,
            "success": self.outcome.success,
            "outcome": self.outcome.detail,
            "verdicts": self.verdicts,
        }


@dataclass
class Confusion:
    """A verifier's verdicts against the continuation outcomes. Positive = credited (verifier) / success
    (outcome). ``undecided``: verdicts that are not judgements; ``undetermined``: outcomes unknown."""

    tp: int = 0
    fp: int = 0
    fn: int = 0
    tn: int = 0
    undecided: int = 0
    undetermined: int = 0

    def add(self, credited: bool | None, success: bool | None) -> None:
        if success is None:
            self.undetermined += 1
        elif credited is None:
            self.undecided += 1
        elif credited:
            self.tp, self.fp = self.tp + success, self.fp + (not success)
        else:
            self.fn, self.tn = self.fn + success, self.tn + (not success)

    @property
    def n(self) -> int:
        """Judged candidates with a known outcome (the matrix's total)."""
        return self.tp + self.fp + self.fn + self.tn

    def rates(self) -> dict[str, dict[str, Any]]:
        """Agreement, precision, false-positive rate (credited among failures) and false-negative rate
        (rejected among successes), each ``{"value", "k", "n", "ci95"}`` (Wilson); value None when n is 0."""

        def share(k: int, n: int) -> dict[str, Any]:
            return {"value": k / n if n else None, "k": k, "n": n, "ci95": wilson(k, n)}

        return {
            "agreement": share(self.tp + self.tn, self.n),
            "precision": share(self.tp, self.tp + self.fp),
            "false_positive_rate": share(self.fp, self.fp + self.tn),
            "false_negative_rate": share(self.fn, self.fn + self.tp),
        }

    def to_dict(self) -> dict[str, Any]:
        counts = {k: getattr(self, k) for k in ("tp", "fp", "fn", "tn", "undecided", "undetermined")}
        return {**counts, "n": self.n, "rates": self.rates()}


@dataclass
class CalibrationResult:
    """Every judged candidate and, per verifier, its confusion matrix against the outcomes."""

    env_id: str
    split: str
    continuation: str
    candidates: str  # "env" (no model) or the model's description
    verifiers: dict[str, str]  # label -> "name vversion"
    rows: list[Row]
    elapsed_s: float = 0.0

    def confusion(self, label: str, source: str | None = None) -> Confusion:
        """The confusion matrix of verifier ``label`` (over candidates from ``source`` only, when given)."""
        matrix = Confusion()
        for row in self.rows:
            if source is None or row.candidate.source == source:
                matrix.add(row.verdicts[label]["credited"], row.outcome.success)
        return matrix

    def against(self, label: str, reference: str) -> Confusion:
        """The confusion matrix of verifier ``label`` with verifier ``reference``'s verdicts as the truth (the
        judge against the env's rule verifier); a candidate ``reference`` left undecided is undetermined."""
        matrix = Confusion()
        for row in self.rows:
            matrix.add(row.verdicts[label]["credited"], row.verdicts[reference]["credited"])
        return matrix

    def disagreements(self, label: str) -> list[Row]:
        """The rows where verifier ``label``'s verdict and the outcome differ (false positives first)."""
        rows = [
            r
            for r in self.rows
            if r.outcome.success is not None
            and r.verdicts[label]["credited"] is not None
            and r.verdicts[label]["credited"] != r.outcome.success
        ]
        return sorted(rows, key=lambda r: not r.verdicts[label]["credited"])

    @property
    def sources(self) -> list[str]:
        return sorted({r.candidate.source for r in self.rows})

    def to_dict(self, examples: int = 10) -> dict[str, Any]:
        return {
            "env_id": self.env_id,
            "split": self.split,
            "continuation": self.continuation,
            "candidates": self.candidates,
            "states": len({(r.trajectory_id, r.turn) for r in self.rows}),
            "rows": len(self.rows),
            "successes": sum(r.outcome.success is True for r in self.rows),
            "elapsed_s": round(self.elapsed_s, 3),
            "verifiers": {
                label: {
                    "verifier": described,
                    "confusion": self.confusion(label).to_dict(),
                    "by_source": {s: self.confusion(label, s).to_dict() for s in self.sources},
                    "disagreements": [r.to_dict() for r in self.disagreements(label)[:examples]],
                }
                for label, described in self.verifiers.items()
            },
            "against_functional": {
                label: self.against(label, "functional").to_dict()
                for label in self.verifiers
                if label != "functional" and "functional" in self.verifiers
            },
        }


def provides_continuation(env: AgentEnv) -> bool:
    """Whether ``env`` implements :meth:`~pivotgym.env.AgentEnv.continuation_actions` (the optimal
    continuation) rather than inheriting the default that offers none."""
    return type(env).continuation_actions is not AgentEnv.continuation_actions


# ------------------------------------------------------------------------------------------ candidates
def paraphrases(env: AgentEnv, expert: Message) -> list[str]:
    """Texts that say what the expert's message says in another form, domain-free: its tool calls with the
    arguments (or the parallel calls) in reverse order and in python call syntax; for plain text, the text
    with other surrounding whitespace. The expert's own rendering is left out."""
    own = env.render_action(expert)
    calls = tool_calls_of(expert)
    out: list[str] = []
    if calls:
        reordered = [ToolCall(c.name, dict(reversed(list(c.arguments.items())))) for c in calls]
        out.append(render_calls(reordered, expert.get("content") or ""))
        if len(calls) > 1:
            out.append(render_calls(list(reversed(calls)), expert.get("content") or ""))
        python = ", ".join(python_call(c) for c in calls)
        out.append(python if len(calls) == 1 else f"[{python}]")
    elif own.strip():
        out.append(f"  {own.strip()}\n")
    return [t for t in dict.fromkeys(out) if t != own]


def env_candidates(env: AgentEnv, expert: Message) -> list[Candidate]:
    """The candidates judged without a model at a state ``env`` is positioned at: the expert's action, its
    :func:`paraphrases`, the env's optional ``wrong_action(expert_text)`` and ``calibration_candidates``."""
    own = env.render_action(expert)
    found = [Candidate(own, "expert")] + [Candidate(t, "paraphrase") for t in paraphrases(env, expert)]
    wrong = getattr(env, "wrong_action", None)
    if callable(wrong) and isinstance(text := wrong(own), str):
        found.append(Candidate(text, "wrong_action"))
    extra = getattr(env, "calibration_candidates", None)
    if callable(extra):
        found += [Candidate(str(t), "env") for t in extra(own) or ()]
    seen: set[str] = set()
    unique = []
    for c in found:  # one row per distinct text; the first source named wins (the expert's own text is "expert")
        if c.text not in seen:
            seen.add(c.text)
            unique.append(c)
    return unique


def injection_cases(env_id: str, *, split: str | None = None, limit: int = 10, per_trajectory: int = 2) -> list[Any]:
    """Cases for :func:`pivotgym.verify.injection.injection_report` from an env's own expert states: at up to
    ``per_trajectory`` states of each of ``limit`` expert trajectories, the first of the env's own candidates
    (:func:`env_candidates`: its wrong action, its calibration candidates) that the env's functional verifier
    rejects, beside the expert's own action. The labels come from the rule verifier, not from the judge."""
    from pivotgym.registry import get_registry
    from pivotgym.verify.injection import InjectionCase

    registry = get_registry()
    env = registry.make(env_id)
    rule = registry.make_verifier(registry.verifier_name_for(env_id))
    split = split or ("test" if "test" in env.splits else env.splits[0])
    cases = []
    for trajectory in env.expert_trajectories(split, limit=limit):
        found = 0
        for turn in trajectory.turns():
            if found >= per_trajectory:
                break
            context = VerifyContext.from_trajectory(trajectory, turn.turn)
            own = context.expert_text
            for candidate in env_candidates(context.env(), turn.expert):
                if candidate.source in ("wrong_action", "env") and candidate.text != own:
                    verdict = verify_batch_safely(rule, context, [candidate.text])[0]
                    if verdict.decided and verdict.reward == 0:
                        cases.append(
                            InjectionCase(VerifyContext.from_trajectory(trajectory, turn.turn), candidate.text, own)
                        )
                        found += 1
                        break
    return cases


# ------------------------------------------------------------------------------------------ outcomes
def continue_episode(env: AgentEnv, candidate: str, rest: Sequence[str] | None, budget: int) -> Outcome:
    """Step ``candidate`` on ``env`` (positioned at the state), then go on with ``rest`` (the expert's
    remaining actions) or, when ``rest`` is None, with the env's ``continuation_actions()`` from the state the
    candidate reached. Success: the episode terminates with a positive reward within ``budget`` turns
    (counting the candidate's)."""
    _obs, reward, terminated, truncated, info = env.step(candidate)
    if "error" in info:
        return Outcome(False, f"the env refused the candidate ({info['error']})", 1)
    steps = 1
    if not (terminated or truncated):
        if rest is None:
            plan = env.continuation_actions()
            if plan is None:
                return Outcome(None, "the env has no continuation from the state the candidate reached", steps)
            rest = list(plan)
        for action in rest:
            _obs, reward, terminated, truncated, info = env.step(action)
            steps += 1
            if "error" in info:
                return Outcome(False, f"continuation action {steps - 1} refused ({info['error']})", steps)
            if terminated or truncated:
                break
    if not terminated:
        why = "truncated" if truncated else "not finished after the continuation"
        return Outcome(False, f"{why} ({steps} turns)", steps)
    if reward <= 0:
        return Outcome(False, f"ended with reward {reward:g} after {steps} turns", steps)
    if steps > budget:
        return Outcome(False, f"reward {reward:g} but in {steps} turns, the expert needed {budget}", steps)
    return Outcome(True, f"reward {reward:g} in {steps} turns", steps)


# ------------------------------------------------------------------------------------------ the run
def calibrate(
    env_id: str,
    trajectories: Iterable[Trajectory],
    verifiers: Mapping[str, Verifier],
    *,
    continuation: str = "expert",
    sampler: Sampler | None = None,
    k: int = 4,
    seed: int = 0,
    env_factory: Callable[[], AgentEnv] | None = None,
    split: str = "",
    progress: bool = False,
) -> CalibrationResult:
    """Judge candidates at every expert state of ``trajectories`` with each of ``verifiers`` (label ->
    verifier) and play each out (see the module docstring). ``sampler``: draw ``k`` candidates per state from
    it instead of the env's own candidates. ``env_factory`` builds a fresh env (default: the registry's)."""
    from tqdm import tqdm

    if continuation not in CONTINUATIONS:
        raise CalibrationError(f"continuation must be one of {', '.join(CONTINUATIONS)}, got {continuation!r}")
    if env_factory is None:
        from pivotgym.registry import make

        def env_factory() -> AgentEnv:
            return make(env_id)

    start = time.perf_counter()
    probe = env_factory()
    trajectories = list(trajectories)
    if not trajectories:
        raise CalibrationError(
            f"{env_id}: no expert trajectory to calibrate on", hint="pick a split with expert trajectories (--split)"
        )
    if continuation == "optimal" and not provides_continuation(probe):
        raise CalibrationError(
            f"{env_id}: the env provides no optimal continuation (AgentEnv.continuation_actions)",
            hint="use --continuation expert, or implement continuation_actions() in the env",
        )
    states = [(t, turn) for t in trajectories for turn in t.turns()]
    drawn = _model_candidates(probe, states, sampler, k, seed) if sampler is not None else None
    rows: list[Row] = []
    bar = tqdm(total=len(states), desc="calibrate", unit="state", disable=not progress or None, dynamic_ncols=True)
    try:
        for index, (trajectory, turn) in enumerate(states):
            rows.extend(_judge_state(trajectory, turn, verifiers, env_factory, continuation, drawn, index))
            bar.update(1)
    finally:
        bar.close()
    described = {label: f"{v.name} v{v.version}" for label, v in verifiers.items()}
    return CalibrationResult(
        env_id,
        split,
        continuation,
        "env" if sampler is None else str((sampler.describe() or {}).get("model", "model")),
        described,
        rows,
        time.perf_counter() - start,
    )


def _judge_state(
    trajectory: Trajectory,
    turn: Turn,
    verifiers: Mapping[str, Verifier],
    env_factory: Callable[[], AgentEnv],
    continuation: str,
    drawn: list[list[Candidate]] | None,
    index: int,
) -> list[Row]:
    """The rows of one state: its candidates, each verifier's verdicts, each candidate played out."""
    context = VerifyContext.from_trajectory(trajectory, turn.turn, env_factory=env_factory)
    candidates = drawn[index] if drawn is not None else env_candidates(context.env(), turn.expert)
    expert_texts = [context.fresh_env().render_action(m) for m in trajectory.messages if m.get("role") == "assistant"]
    budget = len(expert_texts) - turn.turn
    rest = expert_texts[turn.turn + 1 :] if continuation == "expert" else None
    judged = {  # every verifier judges the state's candidates together (one model call for the judge)
        label: verify_batch_safely(verifier, context, [c.text for c in candidates])
        for label, verifier in verifiers.items()
    }
    rows = []
    for i, candidate in enumerate(candidates):
        verdicts = {}
        for label in verifiers:
            verdict = judged[label][i]
            undecided = verdict.undecided
            verdicts[label] = {"credited": None if undecided else verdict.reward > 0, "reason": verdict.reason[:200]}
        outcome = continue_episode(context.env(), candidate.text, rest, budget)
        rows.append(Row(trajectory.id, trajectory.task_id, turn.turn, candidate, outcome, verdicts))
    return rows


def _model_candidates(
    env: AgentEnv, states: list[tuple[Trajectory, Turn]], sampler: Sampler, k: int, seed: int
) -> list[list[Candidate]]:
    """``k`` samples per state at temperature 1 within the env's generation limit, each state under its own
    seed (derived from the state and ``seed``), so a state's candidates do not depend on the batch."""
    if k < 1:
        raise CalibrationError(f"k must be >= 1, got {k}")
    params = SamplingParams(temperature=1.0, max_new_tokens=generation_cap(env))
    prompts = [env.prompt_messages(turn.prefix) for _t, turn in states]
    seeds = [int(content_hash("pivotgym-calibrate", t.id, turn.turn, seed)[:8], 16) for t, turn in states]
    out: list[list[Candidate]] = []
    for lo in range(0, len(states), 8):  # a few states per batched call: bounded memory, one prefill each
        groups = sample_seeded(sampler, prompts[lo : lo + 8], k, params, seeds[lo : lo + 8])
        out.extend([Candidate(c.text, "model") for c in group] for group in groups)
    return out


# ------------------------------------------------------------------------------------------ report
def _rate(rate: Mapping[str, Any]) -> str:
    if rate["value"] is None:
        return "n/a"
    low, high = rate["ci95"]
    return f"{rate['value']:.3f} [{low:.3f}, {high:.3f}] ({rate['k']}/{rate['n']})"


def format_calibration(result: CalibrationResult, examples: int = 5) -> str:
    """The result as Markdown: per verifier its confusion matrix and rates (95% Wilson intervals), the
    same by candidate source, and the first disagreeing examples."""
    data = result.to_dict(examples=examples)
    lines = [
        f"## Calibration of {result.env_id} ({result.split or 'split ?'})",
        "",
        f"{data['states']} expert states, {data['rows']} candidates ({result.candidates}), "
        f"continuation: {result.continuation}; {data['successes']} candidates succeed when played out "
        f"({data['elapsed_s']:.1f} s).",
        "",
        "| verifier | TP | FP | FN | TN | undecided | undetermined | agreement | precision | FP rate | FN rate |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for label, info in data["verifiers"].items():
        c = info["confusion"]
        r = c["rates"]
        lines.append(
            f"| {label} ({info['verifier']}) | {c['tp']} | {c['fp']} | {c['fn']} | {c['tn']} | {c['undecided']} | "
            f"{c['undetermined']} | {_rate(r['agreement'])} | {_rate(r['precision'])} | "
            f"{_rate(r['false_positive_rate'])} | {_rate(r['false_negative_rate'])} |"
        )
    if data["against_functional"]:
        lines += [
            "",
            "Against the env's rule verifier's verdicts (the `functional` row as the truth):",
            "",
            "| verifier | TP | FP | FN | TN | undecided | agreement | FP rate | FN rate |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for label, c in data["against_functional"].items():
            r = c["rates"]
            lines.append(
                f"| {label} | {c['tp']} | {c['fp']} | {c['fn']} | {c['tn']} | {c['undecided']} | "
                f"{_rate(r['agreement'])} | {_rate(r['false_positive_rate'])} | {_rate(r['false_negative_rate'])} |"
            )
    lines += ["", "By candidate source (agreement):", "", "| source | " + " | ".join(data["verifiers"]) + " |"]
    lines.append("|---|" + "---|" * len(data["verifiers"]))
    for source in result.sources:
        cells = [_rate(info["by_source"][source]["rates"]["agreement"]) for info in data["verifiers"].values()]
        lines.append(f"| {source} | " + " | ".join(cells) + " |")
    for label, info in data["verifiers"].items():
        if not info["disagreements"]:
            continue
        lines += ["", f"Disagreements of {label} (first {len(info['disagreements'])}):", ""]
        for row in info["disagreements"]:
            verdict = "credited" if row["verdicts"][label]["credited"] else "rejected"
            text = row["candidate"].replace("\n", " ")
            lines.append(
                f"- {row['task_id']} turn {row['turn']} [{row['source']}] `{text[:90]}`: {verdict} "
                f"({row['verdicts'][label]['reason'][:70]}); played out: {row['outcome']}"
            )
    return "\n".join(lines)
