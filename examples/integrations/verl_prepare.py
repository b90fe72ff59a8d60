"""Write a pivot set as verl's RL parquet and check compute_score on it (the expert's own action scores 1).

    python examples/integrations/verl_prepare.py --pivots runs/x/pivots.jsonl --out data/pivots/train.parquet

Without ``--pivots``, ``--demo-env`` (default general/navigate-v0) takes the env's first expert turns as
*unprofiled* states. Then train with verl, e.g.::

    python -m verl.trainer.main_ppo algorithm.adv_estimator=grpo \\
        data.train_files=data/pivots/train.parquet data.val_files=data/pivots/train.parquet \\
        actor_rollout_ref.rollout.n=8 actor_rollout_ref.actor.use_kl_loss=False \\
        actor_rollout_ref.actor.loss_agg_mode=token-mean \\
        reward.custom_reward_function.path=$(python -c "import pivotgym.integrations.verl as m; print(m.__file__)") \\
        reward.custom_reward_function.name=compute_score ...

(verl's reward manager runs it in .venv-verl, `make verl`; its trainer was not run: docs/integrations.md says
what was tested.)
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pivots", type=Path)
    parser.add_argument("--trajectories", type=Path, help="only for pivot sets written before rows carried states")
    parser.add_argument("--demo-env", default="general/navigate-v0")
    parser.add_argument("--demo-states", type=int, default=4)
    parser.add_argument("--split", default="train")
    parser.add_argument("--out", type=Path, default=Path("runs/verl/train.parquet"))
    args = parser.parse_args(argv)

    import pandas as pd

    from pivotgym.integrations.verl import compute_score, write_verl_parquet

    trajectories: Any = args.trajectories
    if args.pivots:
        pivots: Any = args.pivots
    else:
        from pivotgym.integrations.common import unprofiled_pivots

        pivots = unprofiled_pivots(args.demo_env, args.demo_states)
    n = write_verl_parquet(args.out, pivots, trajectories, split=args.split)
    frame = pd.read_parquet(args.out)
    checks = []
    for _, row in frame.iterrows():
        expert = row["reward_model"]["ground_truth"]
        checks.append(compute_score(row["data_source"], expert, expert, dict(row["extra_info"]))["score"])
    summary = {"rows": n, "out": str(args.out), "expert_scores": checks}
    print(json.dumps(summary))
    return summary


if __name__ == "__main__":
    main()
