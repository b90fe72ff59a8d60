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


def test_rloo_std_by_hand():
    """NeMo-RL's estimator: leave-one-out baseline over the leave-one-out SD, unnormalised where it is 0."""
    # [1, 0, 0, 0]: for sample 0 the others are [0, 0, 0] (SD 0): 1 - 0 = 1, left unnormalised; for each other
    # sample the others are [1, 0, 0]: baseline 1/3, unbiased SD sqrt(((1 - 1/3)^2 + 2 (1/3)^2) / 2) = sqrt(1/3)
    adv = group_advantages([1.0, 0.0, 0.0, 0.0], "rloo_std").tolist()
    assert adv == pytest.approx([1.0] + [(-1 / 3) / math.sqrt(1 / 3)] * 3, rel=1e-5)
    # [1, 1, 0, 0]: others of a 1 are [1, 0, 0] (baseline 1/3, SD sqrt(1/3)); of a 0, [1, 1, 0] (2/3, sqrt(1/3))
    mixed = group_advantages([1.0, 1.0, 0.0, 0.0], "rloo_std").tolist()
    assert mixed == pytest.approx([(2 / 3) / math.sqrt(1 / 3)] * 2 + [(-2 / 3) / math.sqrt(1 / 3)] * 2, rel=1e-5)
    # two samples: one other, no SD: the plain leave-one-out advantage
    assert group_advantages([1.0, 0.0], "rloo_std").tolist() == pytest.approx([1.0, -1.0])
    # continuous rewards against a direct computation
    r = [0.2, 0.9, 0.4, 0.4, 0.7]
    want = []
    for i, ri in enumerate(r):
        others = r[:i] + r[i + 1 :]
        mean = sum(others) / 4
        sd = math.sqrt(sum((o - mean) ** 2 for o in others) / 3)
        want.append((ri - mean) / (sd + 1e-6))
    assert group_advantages(r, "rloo_std").tolist() == pytest.approx(want, rel=1e-6)


def test_zero_variance_group_has_zero_advantages_and_is_not_informative():
    for mode in ("std", "no_std", "loo", "rloo_std"):
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


def test_placebo_shuffle_keeps_the_group_multiset_and_draws_by_its_seed():
    import random

    from pivotgym.train.losses import placebo_shuffle

    adv = group_advantages([1.0, 0.0, 0.0, 1.0, 0.5], "std")
    shuffled = placebo_shuffle(adv, random.Random(3))
    assert sorted(shuffled.tolist()) == pytest.approx(sorted(adv.tolist()))
    assert torch.equal(shuffled, placebo_shuffle(adv, random.Random(3)))  # seeded: repeatable
    orders = {tuple(placebo_shuffle(adv, random.Random(s)).tolist()) for s in range(50)}
    assert len(orders) > 5  # actually permutes


def _softmax_pair():
    torch.manual_seed(0)
    theta = torch.randn(6, dtype=torch.float64)
    ref = (theta + 0.05 * torch.randn(6, dtype=torch.float64)).log_softmax(-1)
    return theta, ref


def test_kl_k3_is_zero_with_zero_gradient_at_the_reference():
    theta, _ = _softmax_pair()
    theta.requires_grad_(True)
    logp = theta.log_softmax(-1)
    k3 = kl_k3(logp[None], logp.detach()[None], torch.ones(1, 6))
    k3.backward()
    assert float(k3.detach()) == 0.0
    assert torch.count_nonzero(theta.grad) == 0


def test_kl_k3_expectation_is_the_kl_and_its_gradient_pulls_towards_the_reference():
    """Over one categorical with every token weighted by pi (the exact expectation of sampled tokens):
    E_pi[k3] = KL(pi || ref); the gradient of k3 as a loss at fixed pi-weights is grad KL(ref || pi), whose
    direction matches the forward KL's near the reference; a step along minus it lowers the KL."""
    theta, ref = _softmax_pair()
    theta.requires_grad_(True)
    logp = theta.log_softmax(-1)
    pi = logp.exp().detach()
    forward_kl = (logp.exp() * (logp - ref)).sum()
    estimate = (pi * ((ref - logp).exp() - (ref - logp) - 1)).sum()
    assert float(estimate.detach()) == pytest.approx(float(forward_kl.detach()), rel=1e-9)

    # k3 as a loss: the tokens are samples from pi (weights detached), the estimator is differentiated
    expected_k3 = (pi * ((ref - logp).exp() - (ref - logp) - 1)).sum()
    (g_k3,) = torch.autograd.grad(expected_k3, theta, retain_graph=True)
    reverse_kl = (ref.exp() * (ref - logp)).sum()
    (g_reverse,) = torch.autograd.grad(reverse_kl, theta, retain_graph=True)
    (g_forward,) = torch.autograd.grad(forward_kl, theta)
    torch.testing.assert_close(g_k3, g_reverse, rtol=1e-8, atol=1e-12)
    cosine = float(torch.nn.functional.cosine_similarity(g_k3, g_forward, dim=0))
    assert cosine > 0.99
    with torch.no_grad():
        stepped = (theta - 0.5 * g_k3).log_softmax(-1)
        assert float((stepped.exp() * (stepped - ref)).sum()) < float(forward_kl.detach())
