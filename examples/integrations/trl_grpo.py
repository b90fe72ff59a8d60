"""Train on pivot states with TRL's GRPOTrainer, rewarded by the env's functional verifier.

    # a pivot set from `pivotgym profile` + `pivotgym select` (its rows carry their states)
    python examples/integrations/trl_grpo.py --pivots runs/x/pivots.jsonl
    # or the folder `pivotgym pivots export ... --to hf` wrote
    python examples/integrations/trl_grpo.py --hf-dataset runs/x/pivots-hf

Without either, ``--demo-env`` (default general/navigate-v0) takes the env's first expert turns as states,
*unprofiled* (not a pivot selection: only to see the wiring run). ``--tiny`` swaps the model for a tiny
random Llama (seconds; rewards are then all 0, so nothing is learnt). The GRPOConfig comes from
``grpo_config_kwargs``: group size, beta 0, the dapo loss and our clip range (docs/integrations.md says
where TRL differs from ``pivotgym train pivot``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def demo_states(env_id: str, n: int) -> Any:
    """The first ``n`` expert turns of ``env_id`` as states, with placeholder profile rows (unprofiled)."""
    from pivotgym.integrations.common import unprofiled_pivots
    from pivotgym.integrations.trl import pivot_dataset

    return pivot_dataset(unprofiled_pivots(env_id, n))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pivots", type=Path)
    parser.add_argument("--trajectories", type=Path, help="only for pivot sets written before rows carried states")
    parser.add_argument("--hf-dataset", type=Path)
    parser.add_argument("--demo-env", default="general/navigate-v0")
    parser.add_argument("--demo-states", type=int, default=2)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--tiny", action="store_true", help="a tiny random Llama instead of --model")
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--pivots-per-step", type=int, default=1)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--learning-rate", type=float, default=1e-5)
    parser.add_argument("--out", type=Path, default=Path("runs/trl-grpo"))
    args = parser.parse_args(argv)

    import torch
    from trl import GRPOConfig, GRPOTrainer

    from pivotgym.integrations.trl import PivotReward, grpo_config_kwargs, pivot_dataset

    if args.hf_dataset:
        dataset = pivot_dataset(args.hf_dataset)
    elif args.pivots:
        dataset = pivot_dataset(args.pivots, args.trajectories)
    else:
        dataset = demo_states(args.demo_env, args.demo_states)

    if args.tiny:
        from pivotgym.sampling.testing import tiny_llama

        model, tokenizer = tiny_llama(seed=0)
    else:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from pivotgym.sampling.models import resolve_model

        path = resolve_model(args.model, progress=False)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(path)

    config = GRPOConfig(
        **grpo_config_kwargs(
            group_size=args.group_size,
            pivots_per_step=args.pivots_per_step,
            steps=args.steps,
            max_new_tokens=args.max_new_tokens,
            learning_rate=args.learning_rate,
            output_dir=str(args.out),
            report_to=[],
            logging_steps=1,
            save_strategy="no",
        )
    )
    reward = PivotReward()
    trainer = GRPOTrainer(
        model=model, reward_funcs=reward, args=config, train_dataset=dataset, processing_class=tokenizer
    )
    trainer.train()
    logged = [
        {k: h[k] for k in ("step", "reward", "reward_std", "frac_reward_zero_std", "grad_norm") if k in h}
        for h in trainer.state.log_history
        if "reward" in h
    ]
    print(json.dumps(logged, indent=1))
    return {"steps": logged}


if __name__ == "__main__":
    main()
