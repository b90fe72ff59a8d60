"""TRL's GRPOTrainer on pivot states with the bundled model (SmolLM2-135M, CPU): 2 steps, and the gradient of
a group whose rewards differ is non-zero while one whose rewards agree gives none (TRL's advantage is 0)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from pivotgym.integrations.trl import (
    PivotReward,
    completion_text,
    dapo_scale,
    grpo_config_kwargs,
    pivot_dataset,
    trl_model,
)
from pivotgym.types import ExpertState, PivotSet, Trajectory, TurnProfile, Verdict

ENV = "general/navigate-v0"  # True/False answers: a 135M model gets some right at temperature 1


def profiles(trajectories: list[Trajectory], *, with_state: bool = False) -> list[TurnProfile]:
    return [
        TurnProfile(
            trajectory_id=t.id,
            turn=0,
            env_id=t.env_id,
            task_id=t.task_id,
            k=4,
            rewards=[1.0, 0.0, 0.0, 1.0],
            mean=0.5,
            var=0.25,
            reasons=["equivalent", "wrong", "wrong", "equivalent"],
            reference={},
            verifier={},
            key=t.id,
            state=ExpertState(t.turn(0)) if with_state else None,
        )
        for t in trajectories
    ]


@pytest.fixture(scope="module")
def dataset() -> Any:
    from pivotgym.registry import make

    env = make(ENV)
    trajectories = list(env.expert_trajectories(next(iter(env.splits)), limit=2))
    return pivot_dataset(profiles(trajectories), trajectories)


def test_the_reward_judges_with_the_envs_verifier(dataset: Any) -> None:
    row = dataset[0]
    wrong = "False" if row["expert"].strip() == "True" else "True"
    reward = PivotReward()
    completions = [[{"role": "assistant", "content": row["expert"]}], [{"role": "assistant", "content": wrong}]]
    assert reward(prompts=[row["prompt"]] * 2, completions=completions, state=[row["state"]] * 2) == [1.0, 0.0]
    assert completion_text(row["expert"]) == row["expert"]


def test_an_undecided_verdict_is_none_not_zero(dataset: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from pivotgym.integrations.common import StateJudge

    def undecided(self: StateJudge, state: str, tools_json: str | None, candidate: str) -> Verdict:
        return Verdict.undecided_because("verify_failed: timed out")

    monkeypatch.setattr(StateJudge, "verdict", undecided)
    row = dataset[0]
    completions = [[{"role": "assistant", "content": "True"}]]
    assert PivotReward()(completions=completions, state=[row["state"]]) == [None]
    assert PivotReward(undecided="zero")(completions=completions, state=[row["state"]]) == [0.0]


def test_config_matches_our_trainer() -> None:
    from pivotgym.train.config import PivotConfig

    ours = PivotConfig(pivots="p", trajectories="t", group_size=6, pivots_per_step=3, advantage="no_std")
    kwargs = grpo_config_kwargs(ours, output_dir="x")
    assert (kwargs["num_generations"], kwargs["beta"], kwargs["loss_type"]) == (6, 0.0, "dapo")
    assert kwargs["scale_rewards"] == "none" and kwargs["per_device_train_batch_size"] == 18
    assert kwargs["output_dir"] == "x"
    assert grpo_config_kwargs(group_size=4)["num_generations"] == 4
    # TRL's gradient is ours times the informative share of the tokens
    assert dapo_scale([[1, 0], [1, 1]], [[3, 1], [2, 2]]) == pytest.approx(4 / 8)


@pytest.mark.slow
def test_two_grpo_steps_on_the_bundled_model(dataset: Any, tmp_path: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from pivotgym.sampling.models import resolve_model

    path = resolve_model("smollm2-135m", progress=False)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    # train the last decoder layer and the final norm only: the same GRPO step, a fraction of the CPU time
    # (backward stops there and the optimiser updates 1/30 of the layers)
    model.requires_grad_(False)
    for module in (model.model.layers[-1], model.model.norm):
        module.requires_grad_(True)

    calls: list[list[float | None]] = []

    class Recorded(PivotReward):
        def __call__(self, *args: Any, **kwargs: Any) -> list[float | None]:
            out = super().__call__(*args, **kwargs)
            calls.append(out)
            return out

    grads: list[float] = []

    class GradNorm(TrainerCallback):  # type: ignore[misc] # the gradient each optimiser step applies
        def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            norms = [p.grad.norm() ** 2 for p in kwargs["model"].parameters() if p.grad is not None]
            grads.append(float(torch.stack(norms).sum().sqrt()) if norms else 0.0)

    args = GRPOConfig(
        **grpo_config_kwargs(
            group_size=8,
            pivots_per_step=1,
            steps=2,
            learning_rate=1e-5,
            max_new_tokens=6,
            mixed_precision="no",
            max_grad_norm=None,  # no clipping: the callback sees the raw gradient
            seed=0,
            output_dir=str(tmp_path / "run"),
            report_to=[],
            logging_steps=1,
            save_strategy="no",
            use_cpu=True,
        )
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=Recorded(),
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[GradNorm()],
    )
    trainer.train()

    assert len(calls) == 2 and len(grads) == 2  # one generation batch (one pivot group of 8) per step
    mixed = [len({r for r in rewards if r is not None}) > 1 for rewards in calls]
    assert any(mixed), f"no pivot group with mixed rewards in {calls}; pick another env or seed"
    for is_mixed, grad, rewards in zip(mixed, grads, calls):
        if is_mixed:
            assert grad > 0 and math.isfinite(grad), (rewards, grad)
        else:  # beta=0 and equal rewards: advantage 0 everywhere, no gradient
            assert grad == 0.0, (rewards, grad)
    logged = [h for h in trainer.state.log_history if "reward" in h]
    assert len(logged) == 2 and all("frac_reward_zero_std" in h for h in logged)
    print(json.dumps({"rewards": calls, "grad_norms": grads}))


def test_generation_is_capped_by_the_datasets_envs_and_model_names_are_resolved(dataset: Any) -> None:
    from pivotgym.errors import ModelError

    assert grpo_config_kwargs(dataset=dataset)["max_completion_length"] == 8  # navigate's own cap
    assert grpo_config_kwargs(dataset=dataset, max_new_tokens=4)["max_completion_length"] == 4
    assert "max_completion_length" not in grpo_config_kwargs()  # nothing to take it from: TRL's default
    with pytest.raises(ModelError, match="did you mean 'smollm2-135m'"):
        trl_model("smollm2-136m")


#: the peak resident memory the documented recipe may reach (docs/integrations.md states the measured figure)
RECIPE_PEAK_LIMIT_GB = 6.0


@pytest.mark.slow
def test_the_documented_recipe_runs_as_written_within_its_stated_memory(tmp_path: Path) -> None:
    """docs/integrations.md's TRL block, run as written (its own process, a pivot set of two navigate states
    beside it): two GRPO steps on the bundled model, a checkpoint, and a peak RSS under the stated bound (the
    issue's run of the old recipe, 4 pivots a step and no generation cap, was killed at 24.3 GB)."""
    import subprocess
    import sys

    from pivotgym.jsonl import write_pivot_set
    from pivotgym.registry import make

    env = make(ENV)
    trajectories = list(env.expert_trajectories(next(iter(env.splits)), limit=2))
    write_pivot_set(tmp_path / "pivots.jsonl", PivotSet({"max_mean": 0.6}, profiles(trajectories, with_state=True)))
    page = (Path(__file__).parents[2] / "docs" / "integrations.md").read_text()
    start = page.index("```python\nfrom trl import GRPOConfig")
    (tmp_path / "recipe.py").write_text(page[start + len("```python\n") : page.index("```", start + 3)])
    runner = "import resource, runpy; runpy.run_path('recipe.py', run_name='__main__'); "
    runner += "print('PEAK_KB', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"
    done = subprocess.run([sys.executable, "-c", runner], cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    peak_gb = int(done.stdout.split("PEAK_KB")[-1]) / 2**20
    assert (tmp_path / "runs" / "trl" / "checkpoint-2").is_dir()
    assert peak_gb < RECIPE_PEAK_LIMIT_GB, f"the recipe peaked at {peak_gb:.1f} GB"
    print(f"recipe peak RSS {peak_gb:.2f} GB")
