"""The step a trainer makes from its groups (RLTrainer.apply_update): skipped below min_informative_groups,
its rate scaled by the informative share, applied counts, weight drift; and the KL pulling back to the
reference. A tiny random-init Llama and hand-made groups, no sampling."""

from __future__ import annotations

import copy

import pytest
import torch
from train_testlib import make_tiny_llama

from pivotgym.errors import ConfigError
from pivotgym.sampling.logprobs import completion_logprobs
from pivotgym.train.config import RLConfig
from pivotgym.train.rl import PolicySample, RLTrainer, group_samples

PROMPT = [5, 6, 7, 8, 9]
COMPS = [[30, 31, 32], [33, 34], [35], [36, 37, 38, 39]]


def trainer_for(tmp_path, model=None, **overrides) -> RLTrainer:
    settings = dict(
        output_dir=str(tmp_path / "run"),
        steps=4,
        learning_rate=1e-2,
        optimizer="sgd",
        max_grad_norm=None,
        progress=False,
        report_to=["none"],
    )
    return RLTrainer(RLConfig(**{**settings, **overrides}), model=model or make_tiny_llama())


def one_group() -> list[PolicySample]:
    return group_samples(PROMPT, COMPS, [1.0, 0.0, 0.0, 1.0])


def params(trainer: RLTrainer) -> list[torch.Tensor]:
    return [p.detach().clone() for p in trainer.unwrapped_model.parameters()]


def test_a_step_short_of_informative_groups_is_skipped_and_counted(tmp_path):
    trainer = trainer_for(tmp_path, min_informative_groups=2)
    before = params(trainer)
    stats = trainer.apply_update(one_group(), informative=1, groups=4, planned=4)
    assert stats["skipped"] == 1 and stats["skip_reason"] == "few_informative_groups"
    assert stats["drift_rms"] == 0.0 and stats["groups_informative"] == 1
    assert all(torch.equal(a, b) for a, b in zip(before, trainer.unwrapped_model.parameters()))
    assert trainer.scheduler.last_epoch == 1  # the schedule still advances with the run
    stats = trainer.apply_update(
        one_group() + group_samples([11, 12], [[40], [41, 42]], [0.0, 1.0]), informative=2, groups=4, planned=4
    )
    assert "skipped" not in stats and stats["update_rms"] > 0
    c = trainer.counters
    assert (c.steps_applied, c.optimizer_steps_applied, c.groups_sampled, c.groups_applied) == (1, 1, 8, 2)
    assert c.snapshot()["steps_applied"] == 1


def test_informative_share_scales_the_rate_not_the_loss(tmp_path):
    """1 informative group of 4 planned: a quarter-size step. With SGD the change is exactly a quarter of
    the full step's; with AdamW (whose update does not follow the loss's scale) it is a quarter too, which
    scaling the loss could not do. The scheduler's rate is restored after the step."""
    model = make_tiny_llama()
    for optimizer in ("sgd", "adamw"):
        changes = {}
        for mode in ("full", "informative_share"):
            t = trainer_for(tmp_path / mode, model=copy.deepcopy(model), optimizer=optimizer, update_scale=mode)
            start = params(t)
            stats = t.apply_update(one_group(), informative=1, groups=4, planned=4)
            changes[mode] = [p.detach() - s for p, s in zip(t.unwrapped_model.parameters(), start)]
            assert stats["lr"] == pytest.approx(1e-2 * stats["lr_scale"])
            assert t.optimizer.param_groups[0]["lr"] == pytest.approx(1e-2)
            assert stats["update_rms"] == pytest.approx(stats["drift_rms"])  # first step: the update is the drift
        for full, scaled in zip(changes["full"], changes["informative_share"]):
            torch.testing.assert_close(scaled, full / 4, rtol=1e-3, atol=2e-7)  # fp32 rounding of p + dp - p (p ~ 1)


def test_drift_is_the_rms_distance_from_the_start_and_update_the_last_step(tmp_path):
    trainer = trainer_for(tmp_path, update_scale="full")
    start = params(trainer)
    trainer.apply_update(one_group(), informative=1, groups=1, planned=1)
    middle = params(trainer)
    stats = trainer.apply_update(one_group(), informative=1, groups=1, planned=1)
    end = params(trainer)

    def rms(pairs):
        sq = sum(float((a - b).double().pow(2).sum()) for a, b in pairs)
        return (sq / sum(a.numel() for a, _ in pairs)) ** 0.5

    assert stats["drift_rms"] == pytest.approx(rms(list(zip(end, start))), rel=1e-5)
    assert stats["update_rms"] == pytest.approx(rms(list(zip(end, middle))), rel=1e-5)
    assert stats["drift_rms"] > stats["update_rms"] > 0
    assert (
        trainer_for(tmp_path / "off", track_drift=False)
        .apply_update(one_group(), informative=1, groups=1, planned=1)
        .keys()
        .isdisjoint({"drift_rms", "update_rms"})
    )


def test_kl_to_the_frozen_reference_pulls_a_drifted_policy_back(tmp_path):
    """Zero advantages, only the k3 term: a policy moved off the reference moves back towards it on the
    trained tokens (each k3 term is minimised where the policy's logprob equals the reference's)."""
    trainer = trainer_for(tmp_path, kl_coef=1.0, learning_rate=0.05, update_scale="full")
    with torch.no_grad():
        for p in trainer.unwrapped_model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    samples = [PolicySample(PROMPT, c, 0.0) for c in COMPS]

    def gap() -> float:  # sum over the completions' tokens of |log pi - log pi_ref|
        total = 0.0
        for c in COMPS:
            with torch.no_grad():
                logp = completion_logprobs(trainer.unwrapped_model, PROMPT, [c])[0]
                ref = completion_logprobs(trainer._reference, PROMPT, [c])[0]
            total += float((logp - ref).abs().sum())
        return total

    before = gap()
    first = trainer.policy_update(samples)
    second = trainer.policy_update(samples)
    assert 0 < second["kl"] < first["kl"]
    assert gap() < before


def test_placebo_permutes_each_group_and_its_expected_gradient_is_zero(tmp_path):
    """Over every permutation of a group's advantages (uniform, as the placebo's shuffle draws them) the
    policy gradient averages to zero, while the real advantages' gradient does not."""
    model = make_tiny_llama()
    real = one_group()
    trainer = trainer_for(tmp_path, model=copy.deepcopy(model))

    def gradient(samples):
        trainer.optimizer.zero_grad(set_to_none=True)
        trainer.accumulate_gradients(*trainer.prepare_batches(samples))
        return torch.cat([p.grad.flatten() for p in trainer.model.parameters() if p.grad is not None])

    g_real = gradient(real)
    total = torch.zeros_like(g_real)
    # the gradient is linear in the advantages, so its mean over the uniform permutation equals its mean over
    # any set in which every sample gets every advantage equally often: the G cyclic shifts (G passes, not G!)
    k = len(real)
    perms = [[(i + shift) % k for i in range(k)] for shift in range(k)]
    assert {tuple(sorted(p)) for p in perms} == {tuple(range(k))} and len(set(map(tuple, perms))) == k
    for perm in perms:
        shuffled = [
            PolicySample(s.prompt_ids, s.completion_ids, real[j].advantage, s.reward) for s, j in zip(real, perm)
        ]
        total += gradient(shuffled)
    assert float(g_real.norm()) > 1e-4
    assert float((total / len(perms)).norm()) < 1e-6 * float(g_real.norm()) + 1e-9

    # the trainer's placebo RNG: every sample's advantage is independent of its reward (mean ~ 0 each)
    placebo = trainer_for(tmp_path / "placebo", model=copy.deepcopy(model), placebo=True)
    sums = torch.zeros(4, dtype=torch.float64)
    n = 800
    for group in range(n):
        drawn = group_samples(PROMPT, COMPS, [1.0, 0.0, 0.0, 0.0], placebo=placebo.placebo_rng(0, group))
        assert [s.reward for s in drawn] == [1.0, 0.0, 0.0, 0.0]  # rewards stay with their completions
        assert sorted(s.advantage for s in drawn) == pytest.approx(
            sorted(s.advantage for s in group_samples(PROMPT, COMPS, [1.0, 0.0, 0.0, 0.0]))
        )
        sums += torch.tensor([s.advantage for s in drawn], dtype=torch.float64)
    assert (sums / n).abs().max() < 0.15  # the real rewarded sample's advantage is 1.5 (SE of a mean 0.03)
    a = [s.advantage for s in group_samples(PROMPT, COMPS, [1.0, 0.0, 0.0, 0.0], placebo=placebo.placebo_rng(3, 7))]
    b = [s.advantage for s in group_samples(PROMPT, COMPS, [1.0, 0.0, 0.0, 0.0], placebo=placebo.placebo_rng(3, 7))]
    assert a == b  # seeded by (seed, step, group): repeatable and resumable


def test_placebo_refuses_groups_made_without_its_shuffle(tmp_path):
    trainer = trainer_for(tmp_path, placebo=True)
    with pytest.raises(ConfigError, match="placebo"):
        trainer.apply_update(one_group(), informative=1, groups=1, planned=1)
    assert trainer_for(tmp_path / "off").placebo_rng(0, 0) is None


def test_config_checks_the_new_fields():
    with pytest.raises(ConfigError, match="update_scale"):
        RLConfig(update_scale="half").validate()
    with pytest.raises(ConfigError, match="min_informative_groups"):
        RLConfig(min_informative_groups=-1).validate()
