"""Advantages and the clipped surrogate against values computed by hand."""

from __future__ import annotations

import math

import pytest
import torch

from pivotgym.train.losses import clipped_surrogate, group_advantages, is_informative, kl_k3, nll_sum


def test_grpo_std_advantages_by_hand():
    adv = group_advantages([1.0, 0.0, 0.0, 1.0], "std")
    # mean 0.5, unbiased std sqrt((4 * 0.25) / 3) = 0.57735
    expected = 0.5 / math.sqrt(1 / 3)
    assert adv.tolist() == pytest.approx([expected, -expected, -expected, expected], rel=1e-5)


def test_no_std_and_leave_one_out_by_hand():
    rewards = [1.0, 0.0, 0.0, 0.0]
    assert group_advantages(rewards, "no_std").tolist() == pytest.approx([0.75, -0.25, -0.25, -0.25])
    # r_i - mean of the others: 1 - 0, 0 - 1/3
    assert group_advantages(rewards, "loo").tolist() == pytest.approx([1.0, -1 / 3, -1 / 3, -1 / 3])


def test_zero_variance_group_has_zero_advantages_and_is_not_informative():
    for mode in ("std", "no_std", "loo"):
        assert group_advantages([1.0, 1.0, 1.0], mode).abs().sum() == 0
    assert not is_informative([0.0, 0.0])
    assert is_informative([0.0, 0.5])
    with pytest.raises(ValueError, match="unknown advantage"):
        group_advantages([0.0, 1.0], "bogus")


def test_clipped_surrogate_asymmetric_clip_by_hand():
    ratios = torch.tensor([[1.5, 0.5, 1.0, 9.0]])
    logp, old = ratios.log(), torch.zeros(1, 4)
    mask = torch.tensor([[1, 1, 1, 0]])  # the last token is padding
    # A = +1: -min(r, clip(r, 0.8, 1.28)) = -1.28, -0.5, -1.0
    loss, clipped = clipped_surrogate(logp, old, torch.tensor([1.0]), mask, clip_low=0.2, clip_high=0.28)
    assert float(loss) == pytest.approx(-(1.28 + 0.5 + 1.0))
    assert float(clipped) == 1
    # A = -1: -min(-r, -clip(r)) = 1.5, 0.8, 1.0
    loss, clipped = clipped_surrogate(logp, old, torch.tensor([-1.0]), mask, clip_low=0.2, clip_high=0.28)
    assert float(loss) == pytest.approx(1.5 + 0.8 + 1.0)
    assert float(clipped) == 1


def test_kl_k3_and_nll_by_hand():
    logp = torch.tensor([[-1.0, -2.0]])
    ref = torch.tensor([[-1.5, -2.0]])
    mask = torch.ones(1, 2)
    d = -0.5
    assert float(kl_k3(logp, ref, mask)) == pytest.approx(math.exp(d) - d - 1)
    assert float(nll_sum(logp, torch.tensor([[1, 0]]))) == pytest.approx(1.0)
