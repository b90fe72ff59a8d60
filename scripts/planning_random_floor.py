"""The floor of in-domain turn accuracy on a planning env: the expected score of a uniformly random *legal*
action at every held-out expert state, judged by the env's functional verifier and averaged per task, then
over tasks (the metric's own rule).

    python scripts/planning_random_floor.py runs/quickstart/data/test-expert.jsonl [--env planning/blocks-v0]

Prints the floor beside which the quickstart's turn accuracies are read (docs/results/README.md).
"""

from __future__ import annotations

import argparse
from statistics import mean

from pivotgym.jsonl import read_trajectories
from pivotgym.registry import verifier_for
from pivotgym.verify import VerifyContext, verify_safely


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trajectories", help="held-out expert trajectories (an experiment's data/test-expert.jsonl)")
    parser.add_argument("--env", default="planning/blocks-v0", help="the planning env they come from")
    args = parser.parse_args()
    verifier = verifier_for(args.env)
    per_task: list[float] = []
    states = 0
    for trajectory in read_trajectories(args.trajectories):
        shares = []
        for n in range(len(trajectory.assistant_turns())):
            context = VerifyContext.from_trajectory(trajectory, n)
            env = context.env()  # positioned at the state before turn n
            legal = [action.text for action in env.problem.applicable(env.state)]
            shares.append(mean(verify_safely(verifier, context, action).reward for action in legal))
            states += 1
        per_task.append(mean(shares))
    print(
        f"{states} states of {len(per_task)} tasks: a uniformly random legal action scores "
        f"{100 * mean(per_task):.1f}% turn accuracy (per task: {', '.join(f'{100 * x:.1f}' for x in per_task)})"
    )


if __name__ == "__main__":
    main()
