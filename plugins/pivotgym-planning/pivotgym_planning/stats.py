"""What the experiment can resolve on a generated domain: optimal lengths, legal and credited actions.

Apart from the generators because it plays the domain's env and verifier over their problems.
"""

from __future__ import annotations

import time
from typing import Any

import pivotgym
from pivotgym.verify import VerifyContext
from pivotgym_planning.generators import SPLITS, generated_splits
from pivotgym_planning.verifier import OptimalActionVerifier

__all__ = ["domain_stats"]


def domain_stats(
    name: str, seed: int = 0, n_train: int = 400, n_test: int = 200, n_warmup: int = 100
) -> dict[str, Any]:
    """What the experiment can resolve on domain ``name``: the optimal lengths of both splits, and over every
    expert state of the test split (the state before each expert action) the number of legal actions
    (``PlanningEnv.legal_actions``) and how many of them the functional verifier (``planning/optimal``)
    credits, judged through a real :class:`pivotgym.VerifyContext` at that turn.

    ``random_legal_accuracy`` is the mean over states of credited/legal: the expected turn accuracy of a
    policy that picks a legal action uniformly at random (the floor beside the always-expert ceiling, 1).
    """
    start = time.monotonic()
    splits = generated_splits(name, seed, n_train, n_test, n_warmup)
    kwargs = {"seed": seed, "n_train": n_train, "n_test": n_test, "n_warmup": n_warmup}
    env_id = f"planning/{name}-gen-v0"
    env = pivotgym.make(env_id, **kwargs)
    verifier = OptimalActionVerifier()
    legal_counts: list[int] = []
    credited_counts: list[int] = []
    undecided = 0
    for trajectory in env.expert_trajectories("test"):
        for n in range(len(trajectory.assistant_turns())):
            context = VerifyContext(trajectory.turn(n), env_kwargs=kwargs)
            legal = context.env().legal_actions() or []
            credited = 0
            for action in legal:
                verdict = verifier.verify(context, action)
                if not verdict.decided:
                    undecided += 1
                credited += verdict.reward == 1.0
            legal_counts.append(len(legal))
            credited_counts.append(credited)
    states = len(legal_counts)

    def lengths(split: str) -> dict[int, int]:
        counts: dict[int, int] = {}
        for p in splits[split]:
            counts[p.optimal_length] = counts.get(p.optimal_length, 0) + 1
        return dict(sorted(counts.items()))

    return {
        "domain": name,
        "env_id": env_id,
        "seed": seed,
        "problems": {s: len(splits[s]) for s in SPLITS},
        "optimal_length": {s: lengths(s) for s in SPLITS},
        "mean_optimal_length": {
            s: round(sum(p.optimal_length for p in splits[s]) / max(1, len(splits[s])), 2) for s in SPLITS
        },
        "test_states": states,
        "mean_legal_actions": round(sum(legal_counts) / max(1, states), 2),
        "mean_credited_actions": round(sum(credited_counts) / max(1, states), 2),
        "share_states_credited_ge2": round(sum(c >= 2 for c in credited_counts) / max(1, states), 4),
        "random_legal_accuracy": round(
            sum(c / lg for c, lg in zip(credited_counts, legal_counts) if lg) / max(1, states), 4
        ),
        "states_with_no_credited_action": sum(c == 0 for c in credited_counts),
        "undecided_verdicts": undecided,
        "seconds": round(time.monotonic() - start, 1),
    }
