"""On the real SmolLM2-135M, a short PivotRL run on a real domain raises the score of its pivot states (slow).

Domain: ``planning/blocks-v0`` (pddlgym's blocks world) with its functional verifier ``planning/optimal``,
which credits any applicable action that keeps the goal reachable at optimal cost. The whole PivotRL path
runs for real: the frozen model profiles the candidate turns (the real ``Profiler``, K=16), the real
``select_pivots`` keeps the mixed-outcome ones, and ``PivotTrainer`` trains on that pivot set read from
files. The first evaluation runs before any update, so "before" is the reference model's score on the
pivot states; "after" is measured with the same fixed sampling seeds.

How the pinned states were found: a one-off offline profile of every turn of the first three train
trajectories (K=16, temperature 0.6, 10 new tokens, one fixed seed). Once the chat holds a couple of
expert turns, SmolLM2 answers in the action format and often picks an applicable action, but not always
an optimal one: turn 4 of ``blocks/problem1`` (``(pick-up d robot)``) scored 6/16, turn 2 of
``blocks/problem3`` 4/16; most other turns 0-1/16 (first turns: prose). Each trajectory is cut after its
pinned turn, so profiling (the costly part) stops there. BFCL tool use was tried first and gives no signal:
on ``tooluse/bfcl-simple-v0`` the model answers in prose (0/16 greedy on the 16 shortest calls, 0/16
sampled at temperature 1). Planning actions are ~8 tokens, which keeps sampling cheap.

Cost (one torch thread, see ``one_thread``): about a minute of CPU; a single AdamW step at lr 3e-5 already
moves the pinned states from ~0.3 to ~1.0.
"""

from __future__ import annotations

import dataclasses
import shutil

import pytest
import torch

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ENV_ID = "planning/blocks-v0"
#: task id -> the last turn profiled (the pinned mixed-outcome state; earlier turns are profiled too)
PINNED = {"blocks/problem1": 4, "blocks/problem3": 2}
TEMPERATURE = 0.6
MAX_NEW_TOKENS = 10  # an action is ~8 tokens with the end-of-turn token


@pytest.fixture()
def one_thread():
    """One torch thread: with the cores shared (other tests, other jobs) two threads per process made the
    sampler ~10x slower (OpenMP threads spinning on oversubscribed cores); one thread costs < 2x idle."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_pivot_training_raises_the_pivot_score_of_smollm2(one_thread, tmp_path):
    pytest.importorskip("pivotgym_planning", reason="the planning plugin (plugins/pivotgym-planning) is not installed")
    from pivotgym.jsonl import write_pivot_set, write_trajectories
    from pivotgym.pivot import ProfileConfig, Profiler, SelectionRule, select_pivots
    from pivotgym.registry import make
    from pivotgym.sampling.base import SamplingParams
    from pivotgym.sampling.hf import HFSampler
    from pivotgym.sampling.models import load_model_and_tokenizer
    from pivotgym.train import PivotConfig, PivotTrainer

    torch.manual_seed(0)
    model, tokenizer = load_model_and_tokenizer("smollm2-135m", device="cpu", dtype=torch.float32)
    sampler = HFSampler(model, tokenizer)
    by_task = {t.task_id: t for t in make(ENV_ID).expert_trajectories("train", limit=len(PINNED))}
    assert set(by_task) == set(PINNED), f"{ENV_ID}'s first train tasks are now {sorted(by_task)}; re-pin the test"
    trajectories = [
        dataclasses.replace(t, messages=t.messages[: t.assistant_turns()[PINNED[t.task_id]] + 1])
        for t in by_task.values()
    ]

    # the offline half of PivotRL: profile with the frozen model, keep the mixed turns
    profile_config = ProfileConfig(
        k=16, params=SamplingParams(temperature=TEMPERATURE, max_new_tokens=MAX_NEW_TOKENS), seed=0, timeout=None
    )
    profiles = (
        Profiler(sampler, profile_config, executor="serial")
        .profile(trajectories, tmp_path / "profiles.jsonl", progress=False)
        .profiles
    )
    pivot_set = select_pivots(profiles, SelectionRule(min_var=0.0, max_mean=0.6))
    assert pivot_set.pivots, f"no mixed turn: {[(p.task_id, p.turn, p.mean) for p in profiles]}"
    write_pivot_set(tmp_path / "pivots.jsonl", pivot_set)
    write_trajectories(tmp_path / "expert.jsonl", trajectories)

    config = PivotConfig(
        output_dir=str(tmp_path / "run"),
        pivots=str(tmp_path / "pivots.jsonl"),
        trajectories=str(tmp_path / "expert.jsonl"),
        profiles=str(tmp_path / "profiles.jsonl"),
        steps=3,
        pivots_per_step=len(pivot_set.pivots),
        group_size=8,
        temperature=TEMPERATURE,
        max_new_tokens=MAX_NEW_TOKENS,
        learning_rate=3e-5,
        advantage="std",
        eval_pivots=0,
        eval_samples=16,
        eval_temperature=TEMPERATURE,
        report_to=["none"],
        progress=False,
        seed=0,
    )
    summary = PivotTrainer(config, model=model, tokenizer=tokenizer, sampler=sampler).fit()

    shutil.rmtree(tmp_path / "run" / "checkpoints", ignore_errors=True)  # the final one is ~1.6 GB (weights+AdamW)
    curve, counters = summary["eval_curve"], summary["counters"]
    before, after = curve[0]["score"], curve[-1]["score"]
    print(
        f"pivots {[(p.task_id, p.turn, p.mean) for p in pivot_set.pivots]}: before {before:.3f} after {after:.3f}; "
        f"{counters['wall_seconds']:.0f}s in fit"
    )
    assert counters["profiling_turns"] == 16 * len(profiles)
    assert counters["rollout_turns"] > 0 and counters["tokens_trained"] > 0
    assert after >= before + 0.25, curve  # observed: ~0.3 -> ~1.0
