"""The placebo ablation in the pivot trainer: the same rollouts and rewards as the real run (same seed),
each group's advantages a permutation of the real ones drawn independently of the rewards, and the run
still trains (a placebo is an update of the same size with no signal behind it)."""

from __future__ import annotations

import pytest
from test_pivot import small_config
from train_testlib import register_test_verifier, write_arith_data

from pivotgym.train import PivotTrainer


@pytest.fixture()
def arith_data(arith_registry, tmp_path):
    register_test_verifier()
    write_arith_data(tmp_path / "data", n_trajectories=2)
    return tmp_path / "data"


def captured_step(arith_data, out, placebo: bool, step: int = 0):
    from pivotgym.sampling.testing import tiny_llama

    model, tokenizer = tiny_llama(seed=1)
    trainer = PivotTrainer(
        small_config(arith_data, out, steps=1, pivots_per_step=3, group_size=6, placebo=placebo),
        model=model,
        tokenizer=tokenizer,
    )
    trainer.setup_data()
    seen = []
    real_apply = trainer.apply_update

    def recording(samples, **kwargs):
        seen.extend(samples)
        return real_apply(samples, **kwargs)

    trainer.apply_update = recording
    stats = trainer.train_step(step)
    return seen, stats


def by_group(samples):
    groups: dict[int, list] = {}
    for s in samples:
        groups.setdefault(s.meta["state"], []).append(s)
    return groups


def test_placebo_shuffles_advantages_within_each_group_and_keeps_everything_else(arith_data, tmp_path):
    real, real_stats = captured_step(arith_data, tmp_path / "real", placebo=False)
    placebo, placebo_stats = captured_step(arith_data, tmp_path / "placebo", placebo=True)
    assert real and real_stats["groups_informative"] == placebo_stats["groups_informative"]
    assert not placebo_stats.get("skipped") and placebo_stats["update_rms"] > 0  # the placebo still updates
    moved = 0
    for state, group in by_group(real).items():
        shuffled = by_group(placebo)[state]
        assert [s.completion_ids for s in shuffled] == [s.completion_ids for s in group]  # same rollouts
        assert [s.reward for s in shuffled] == [s.reward for s in group]  # each keeps its own reward
        assert sorted(s.advantage for s in shuffled) == pytest.approx(sorted(s.advantage for s in group))
        moved += [s.advantage for s in shuffled] != [s.advantage for s in group]
    assert moved >= 1  # at least one group's advantages left their rewards
    again, _ = captured_step(arith_data, tmp_path / "again", placebo=True)
    assert [s.advantage for s in again] == [s.advantage for s in placebo]  # seeded: a resume repeats it
