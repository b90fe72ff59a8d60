"""The exact probability that a model answers a held-out expert state with a credited action.

Greedy turn accuracy scores one sample per state: 0 or 1, whatever the margin. Where the env can enumerate its
legal actions (:mod:`pivotgym.eval.floors` judged each one), the model's probability of each legal action can
be scored instead, by teacher forcing, and summed:

* ``p_credited``: the probability mass on actions the verifier credits, the expected turn accuracy of the
  model sampled at temperature 1 from this state (a continuous, lower-variance view of the same quantity);
* ``p_legal``: the mass on legal actions at all (the rest goes to malformed or inapplicable text, or to the
  same action written another way), so a low ``p_credited`` can be told apart from a format problem;
* ``p_credited_given_legal``: ``p_credited / p_legal``, the choice among legal actions alone.

How one action is scored: the prompt is the state's history rendered as turn accuracy and profiling render it
(``env.prompt_messages(prefix)`` through the sampler's ``encode``: the chat template with the generation
prompt). The action's tokens are those the chat template writes for an assistant message with that text (as
SFT trains them), up to the end-of-turn token; when the template does not render that way, the text is
tokenised on its own. ``p(action)`` is the probability of those tokens followed by any token the sampler stops
at (its EOS set), i.e. that the sampler emits this text and stops. An action longer than the env's generation
cap cannot be emitted (probability 0); one exactly as long is emitted without a stop token. Log-probabilities
come from one forward per trajectory, its legal actions hanging off its history
(:func:`pivotgym.sampling.action_scores.forest_scores`, no gradients), which can also decode every state's
greedy answer on its cache (``decode=True``) for turn accuracy to judge. Other tokenisations of the same text
are not counted (a lower bound). This module turns floors into prompts and sums the scores; the model side
lives in :mod:`pivotgym.sampling.action_scores`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from pivotgym.errors import RecordError
from pivotgym.eval.floors import FloorsResult
from pivotgym.eval.stats import MeanInterval, mean_interval_over
from pivotgym.sampling.action_scores import action_tokens, forest_scores, model_parts
from pivotgym.types import Completion

__all__ = ["LIKELIHOOD_METRICS", "LikelihoodResult", "StateLikelihood", "likelihood_scores"]

#: the per-problem metrics of :class:`LikelihoodResult`
LIKELIHOOD_METRICS = ("p_credited", "p_legal", "p_credited_given_legal")
SHARES = LIKELIHOOD_METRICS  # every one is a probability: its interval stays within [0, 1]


@dataclass
class StateLikelihood:
    """One state's scores: ``logp[i]`` is the log-probability of legal action i (``-inf`` if it cannot be
    emitted), ``credited[i]`` the verifier's verdict on it, ``greedy`` greedy decoding's answer from the state
    when it was decoded (``likelihood_scores(..., decode=True)``), as the sampler would return it."""

    task_id: str
    trajectory_id: str
    turn: int
    logp: list[float]
    credited: list[bool]
    greedy: Completion | None = field(default=None, repr=False)

    @property
    def p_legal(self) -> float:
        return sum(math.exp(v) for v in self.logp)

    @property
    def p_credited(self) -> float:
        return sum(math.exp(v) for v, ok in zip(self.logp, self.credited) if ok)

    @property
    def p_credited_given_legal(self) -> float:
        legal = self.p_legal
        return self.p_credited / legal if legal > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "trajectory_id": self.trajectory_id,
            "turn": self.turn,
            "logp": [v if math.isfinite(v) else None for v in self.logp],
            "credited": list(self.credited),
            "p_credited": self.p_credited,
            "p_legal": self.p_legal,
            "greedy": None if self.greedy is None else self.greedy.text,
        }


@dataclass
class LikelihoodResult:
    """The likelihood scores of one model on the judged states of a :class:`FloorsResult`, averaged per problem
    then over problems (``task_ids`` and ``per_task[metric]`` aligned, as in the floors)."""

    env_id: str
    split: str
    model: dict[str, Any]
    states: list[StateLikelihood]
    task_ids: list[str]
    per_task: dict[str, list[float]]
    #: how the actions' tokens were found: ``{"template": n, "plain": n}``, and ``over_cap`` actions
    tokenization: dict[str, int] = field(default_factory=dict)

    def value(self, metric: str) -> float:
        values = self.per_task[metric]
        return sum(values) / len(values) if values else float("nan")

    @property
    def p_credited(self) -> float:
        return self.value("p_credited")

    @property
    def p_legal(self) -> float:
        return self.value("p_legal")

    def per_item(self, metric: str) -> dict[str, float]:
        """``{task id: value}`` of ``metric`` (pairs with another model's, or with turn accuracy's)."""
        return dict(zip(self.task_ids, self.per_task[metric]))

    def interval(self, metric: str, method: str = "t", confidence: float = 0.95) -> MeanInterval:
        bounds = (0.0, 1.0) if metric in SHARES else None  # a share's interval stays within [0, 1]
        return mean_interval_over(self.per_task[metric], method, confidence, bounds)

    def to_dict(self, *, states: bool = False, method: str = "t") -> dict[str, Any]:
        out: dict[str, Any] = {
            "env_id": self.env_id,
            "split": self.split,
            "model": dict(self.model),
            "problems": len(self.task_ids),
            "states": len(self.states),
            "tokenization": dict(self.tokenization),
            "metrics": {m: self.interval(m, method).to_dict() for m in LIKELIHOOD_METRICS},
            "task_ids": list(self.task_ids),
            "per_task": {m: list(v) for m, v in self.per_task.items()},
        }
        if states:
            out["state_rows"] = [s.to_dict() for s in self.states]
        return out


def likelihood_scores(
    sampler: Any,
    floors: FloorsResult,
    env: Any = None,
    *,
    cap: int | None = None,
    decode: bool = False,
    progress: bool = True,
) -> LikelihoodResult:
    """Score the legal actions of every judged state of ``floors`` under ``sampler``'s model (an hf-backend
    sampler: :class:`~pivotgym.sampling.hf.HFSampler`). ``env`` renders the prompts (default: made from
    ``floors.env_id``); ``cap`` shortens the env's generation cap (:func:`pivotgym.env.generation_cap`), as the
    greedy measurement's cap would. With ``decode`` each state also gets its greedy answer
    (:attr:`StateLikelihood.greedy`, decoded on the scoring pass: see
    :func:`~pivotgym.sampling.action_scores.forest_scores`), which
    :func:`pivotgym.eval.turns.turn_accuracy` can judge instead of generating it again."""
    from tqdm.auto import tqdm

    from pivotgym.env import generation_cap
    from pivotgym.registry import get_registry

    model, tokenizer, stops = model_parts(sampler)
    if env is None:
        env = get_registry().make(floors.env_id)
    limit = generation_cap(env, cap)
    judged = [s for s in floors.states if s.judged and s.action_set == "legal"]
    if not judged and any(s.judged for s in floors.states):
        raise RecordError(
            f"{floors.env_id} offers candidate actions, not legal ones: a probability of a credited action needs "
            "every legal action",
            hint="leave likelihood scoring out for this env (eval.likelihood: false; pivotgym floors without --model)",
        )
    missing = [s for s in judged if s.state is None]
    if missing:
        raise RecordError(
            f"{len(missing)} floors states carry no expert state to render a prompt from",
            hint="score a FloorsResult made by pivotgym.eval.floors.floors() in this process, not one read back",
        )
    counts = {"template": 0, "plain": 0, "over_cap": 0}
    chains: dict[str, list[Any]] = {}
    for s in judged:
        chains.setdefault(s.trajectory_id, []).append(s)
    encoded = []
    for chain in chains.values():
        prompts, actions = [], []
        for s in chain:
            messages = env.prompt_messages(s.state.turn.prefix)
            prompt_ids = sampler.encode(messages)
            tokens = []
            for action in s.legal:
                ids, how = action_tokens(tokenizer, messages, prompt_ids, action, stops)
                counts[how] += 1
                counts["over_cap"] += int(len(ids) > limit)
                tokens.append(ids)
            prompts.append(prompt_ids)
            actions.append(tokens)
        encoded.append((prompts, actions))
    bar = tqdm(
        total=len(judged), desc=f"likelihood {floors.env_id}", unit="state", disable=not progress, dynamic_ncols=True
    )
    try:
        scored = forest_scores(model, encoded, stops, limit, decode=decode, progress=bar.update)
    finally:
        bar.close()
    rows: list[StateLikelihood] = []
    for chain, (prompts, _), scores in zip(chains.values(), encoded, scored):
        for s, prompt, score in zip(chain, prompts, scores):
            answer = (
                Completion(sampler.decode(score.greedy), score.greedy, [], score.finish, list(prompt))
                if score.finish
                else None
            )
            rows.append(StateLikelihood(s.task_id, s.trajectory_id, s.turn, score.logp, s.credited, answer))
    by_task: dict[str, list[StateLikelihood]] = {}
    for row in rows:
        by_task.setdefault(row.task_id, []).append(row)
    per_task: dict[str, list[float]] = {m: [] for m in LIKELIHOOD_METRICS}
    for task_rows in by_task.values():
        for m in LIKELIHOOD_METRICS:
            per_task[m].append(sum(float(getattr(r, m)) for r in task_rows) / len(task_rows))
    describe = getattr(sampler, "describe", None)
    return LikelihoodResult(
        env_id=floors.env_id,
        split=floors.split,
        model=dict(describe() or {}) if callable(describe) else {},
        states=rows,
        task_ids=list(by_task),
        per_task=per_task,
        tokenization=counts,
    )
