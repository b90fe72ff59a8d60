"""Counters: applied counts beside the configured ones, their snapshot keys and their checkpoint round trip."""

from __future__ import annotations

import pytest

from pivotgym.train.counters import APPLIED, Counters


def test_applied_counts_are_left_out_until_a_trainer_tracks_them():
    counters = Counters(steps=6)
    assert not set(APPLIED) & set(counters.snapshot())  # SFT: every step is applied, nothing to say
    counters.track_applied()
    assert {name: counters.snapshot()[name] for name in APPLIED} == dict.fromkeys(APPLIED, 0)
    counters.add_applied(steps_applied=3, groups_sampled=24, groups_applied=5)
    row = counters.snapshot()
    assert (row["steps_applied"], row["steps"], row["groups_applied"], row["groups_sampled"]) == (3, 6, 5, 24)
    with pytest.raises(KeyError, match="unknown applied count"):
        counters.add_applied(steps_skipped=1)


def test_applied_counts_round_trip_through_a_checkpoint_and_old_checkpoints_still_load():
    counters = Counters(steps=4, rollout_turns=12)
    counters.add_applied(steps_applied=2, optimizer_steps_applied=4, groups_sampled=8, groups_applied=3)
    restored = Counters.from_dict(counters.to_dict())
    assert restored == counters
    assert restored.snapshot()["optimizer_steps_applied"] == 4
    old = counters.to_dict()
    for name in APPLIED:
        old.pop(name)
    legacy = Counters.from_dict(old)  # a checkpoint written before the applied counts existed
    assert legacy.steps_applied is None and legacy.rollout_turns == 12
    legacy.add_applied(steps_applied=1)  # resuming it starts them at 0
    assert legacy.steps_applied == 1 and legacy.groups_applied == 0
    renamed = {**counters.to_dict(), "refill_pivots": 5}  # written when the refill count was pivot-only
    renamed.pop("refill_groups")
    assert Counters.from_dict(renamed).refill_groups == 5
