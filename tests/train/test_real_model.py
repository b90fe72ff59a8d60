"""A short PivotRL run with the real SmolLM2-135M raises the score of its pivot states (slow).

Domain: the arith plugin env (multi-turn, functional verifier that credits any expression of the right
value). States are the turns after the first of a few expert trajectories (the chat then shows that a
bare number is the expected answer); a K=8 profile with the frozen model keeps the mixed ones as pivots;
four GRPO steps on them must lift the mean verifier reward on those same states, measured with the same
fixed sampling seeds before and after.
"""

from __future__ import annotations

import os

import pytest

from pivotgym.sampling.base import SamplingParams
from pivotgym.train import PivotConfig, PivotTrainer

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(1800),
    pytest.mark.skipif(os.environ.get("PIVOTGYM_TRAIN_REAL") != "1",
                       reason="real-model RL run (minutes of CPU); set PIVOTGYM_TRAIN_REAL=1 to run it"),
]


def test_pivot_training_raises_the_pivot_score_of_smollm2(arith_registry, tmp_path):
    import torch

    from pivotgym.registry import make
    from pivotgym.sampling.hf import HFSampler
    from pivotgym.sampling.models import load_model_and_tokenizer
    from pivotgym.train.states import StateScorer, states_from_trajectories

    torch.manual_seed(0)
    model, tokenizer = load_model_and_tokenizer("smollm2-135m", device="cpu", dtype=torch.float32)
    sampler = HFSampler(model, tokenizer)
    trajectories = list(make("arith/chain-v0").expert_trajectories("train", limit=10))
    candidates = [s for s in states_from_trajectories(trajectories, sampler.encode) if s.turn.turn >= 1]
    scorer = StateScorer()
    pivots = []
    for state in candidates:  # profile with the frozen reference: K=8, keep mixed states
        completions = sampler.sample([state.prompt_ids], n=8,
                                     params=SamplingParams(max_new_tokens=8, seed=1000 + state.index))[0]
        rewards = scorer.score(state, [c.text for c in completions])
        if 0 < sum(rewards) < len(rewards):
            pivots.append(state)
        if len(pivots) == 3:
            break
    assert pivots, "no mixed-reward state among the candidates: the reference model never answers correctly"
    for i, state in enumerate(pivots):
        state.index = i

    config = PivotConfig(output_dir=str(tmp_path / "run"), steps=4, pivots_per_step=2, group_size=8,
                         max_new_tokens=8, learning_rate=1e-4, eval_samples=8, eval_pivots=0,
                         advantage="std", report_to=["none"], progress=False, seed=0)
    trainer = PivotTrainer(config, model=model, tokenizer=tokenizer, sampler=sampler, states=pivots)
    summary = trainer.fit()
    curve = summary["eval_curve"]
    before, after = curve[0]["score"], curve[-1]["score"]
    assert summary["counters"]["rollout_turns"] > 0
    assert after > before, curve
