"""The policy-gradient update on a tiny random-init Llama: loss value, zero-variance groups, shared-prefix
forward and micro-batching."""

from __future__ import annotations

import copy

import pytest
import torch
from train_testlib import make_tiny_llama

from pivotgym.sampling.logprobs import completion_logprobs
from pivotgym.train.config import RLConfig
from pivotgym.train.rl import PolicySample, RLTrainer, group_samples

PROMPT_A = [5, 6, 7, 8, 9, 10, 11, 12]
PROMPT_B = [20, 21, 22]
COMPS_A = [[30, 31, 32], [33], [34, 35], [36, 37, 38, 39]]
COMPS_B = [[40, 41], [42, 43, 44]]


def trainer_for(tmp_path, model=None, **overrides) -> RLTrainer:
    settings = dict(
        output_dir=str(tmp_path / "run"),
        steps=1,
        learning_rate=1e-2,
        max_grad_norm=None,
        progress=False,
        report_to=["none"],
    )
    config = RLConfig(**{**settings, **overrides})
    return RLTrainer(config, model=model or make_tiny_llama())


def fixed_batch() -> list[PolicySample]:
    return group_samples(PROMPT_A, COMPS_A, [1.0, 0.0, 0.0, 1.0], "std") + group_samples(
        PROMPT_B, COMPS_B, [0.0, 1.0], "no_std"
    )


def grads(model) -> list[torch.Tensor]:
    return [p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p) for p in model.parameters()]


def naive_logprobs(model, prompt, completion) -> torch.Tensor:
    """log p(completion | prompt) token by token from one plain forward of prompt + completion."""
    ids = torch.tensor([prompt + completion])
    logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1]
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(completion)[:, None]).squeeze(-1)


def test_loss_and_gradient_equal_the_hand_computed_surrogate(tmp_path):
    trainer = trainer_for(tmp_path, clip_low=0.2, clip_high=0.28)
    reference = copy.deepcopy(trainer.model)
    samples = fixed_batch()
    batches, n_tokens = trainer.prepare_batches(samples)
    assert n_tokens == sum(len(c) for c in COMPS_A + COMPS_B) == 15
    # give the batch behaviour log-probabilities that differ from the policy, so ratios are clipped
    shift = {0: 0.5, 1: -0.5}
    with torch.no_grad():
        for j, mb in enumerate(batches):
            logp, _ = completion_logprobs(trainer.model, mb.prompt_ids, [s.completion_ids for s in mb.samples])
            mb.old_logprobs = logp - shift[j % 2]
    totals = trainer.accumulate_gradients(batches, n_tokens)
    got_grads = grads(trainer.model)

    hand = torch.zeros(())
    for s in samples:
        logp = naive_logprobs(reference, s.prompt_ids, s.completion_ids)
        j = 0 if s.prompt_ids == PROMPT_A else 1
        ratio = torch.exp(logp - (logp.detach() - shift[j]))
        a = s.advantage
        hand = hand - torch.minimum(ratio * a, ratio.clamp(0.8, 1.28) * a).sum()
    hand = hand / 15
    hand.backward()
    hand = hand.detach()
    assert totals["pg"] / n_tokens == pytest.approx(hand.item(), rel=1e-5)
    assert totals["clipped"] > 0
    for g, p in zip(got_grads, reference.parameters()):
        torch.testing.assert_close(g, p.grad, rtol=1e-4, atol=1e-6)


def test_zero_variance_groups_give_no_gradient_and_do_not_dilute(tmp_path):
    assert group_samples(PROMPT_B, COMPS_B, [1.0, 1.0]) == []
    model = make_tiny_llama()
    informative = trainer_for(tmp_path, model=copy.deepcopy(model))
    informative.accumulate_gradients(*informative.prepare_batches(fixed_batch()))
    with_flat = trainer_for(tmp_path, model=copy.deepcopy(model))
    flat_group = group_samples([50, 51, 52], [[60, 61, 62, 63]] * 4, [0.0, 0.0, 0.0, 0.0])
    batches, n_tokens = with_flat.prepare_batches(fixed_batch() + flat_group)
    assert n_tokens == 15  # the flat group adds no tokens to the denominator
    with_flat.accumulate_gradients(batches, n_tokens)
    for a, b in zip(grads(informative.model), grads(with_flat.model)):
        torch.testing.assert_close(a, b)
    # a step made only of flat groups changes nothing
    only_flat = trainer_for(tmp_path, model=copy.deepcopy(model))
    before = [p.detach().clone() for p in only_flat.model.parameters()]
    stats = only_flat.policy_update(flat_group)
    assert stats["skipped"] == 1 and stats["tokens_in_loss"] == 0
    for p, q in zip(before, only_flat.model.parameters()):
        assert torch.equal(p, q)


@pytest.mark.parametrize("micro_batch_size", [1, 3])
def test_shared_prefix_and_micro_batches_give_the_same_loss_and_gradients(tmp_path, micro_batch_size):
    model = make_tiny_llama()
    runs = {}
    for shared in (True, False):
        for mbs in (micro_batch_size, 16):
            t = trainer_for(tmp_path, model=copy.deepcopy(model), shared_prefix=shared, micro_batch_size=mbs)
            totals = t.accumulate_gradients(*t.prepare_batches(fixed_batch()))
            runs[(shared, mbs)] = (totals["pg"], grads(t.model))
    base_loss, base_grads = runs[(False, 16)]
    for key, (loss, g) in runs.items():
        assert loss == pytest.approx(base_loss, rel=1e-5, abs=1e-7), key
        for a, b in zip(g, base_grads):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_policy_update_moves_probability_towards_positive_advantages(tmp_path):
    trainer = trainer_for(tmp_path, learning_rate=5e-3)
    good, bad = [30, 31, 32], [33, 34, 35]
    samples = group_samples(PROMPT_A, [good, bad, good, bad], [1.0, 0.0, 1.0, 0.0])
    with torch.no_grad():
        before = completion_logprobs(trainer.model, PROMPT_A, [good, bad])[0].sum(-1)
    for _ in range(3):
        stats = trainer.policy_update(samples)
    with torch.no_grad():
        after = completion_logprobs(trainer.model, PROMPT_A, [good, bad])[0].sum(-1)
    assert after[0] > before[0] and after[1] < before[1]
    assert stats["tokens_in_loss"] == 12 and trainer.counters.tokens_trained == 36


def test_kl_to_reference_and_several_passes(tmp_path):
    trainer = trainer_for(tmp_path, kl_coef=0.5, updates_per_batch=2, learning_rate=5e-2)
    stats = trainer.policy_update(fixed_batch())
    assert stats["kl"] == pytest.approx(0.0, abs=1e-6) or stats["kl"] > 0  # first pass starts at the reference
    stats = trainer.policy_update(fixed_batch())
    assert stats["kl"] > 0 and stats["clip_fraction"] >= 0


@pytest.mark.parametrize("schedule", ["linear", "cosine"])
@pytest.mark.parametrize("updates", [1, 3])
def test_lr_schedule_is_sized_in_optimizer_steps_and_ends_with_the_run(tmp_path, schedule, updates):
    """With updates_per_batch > 1 the LR used to reach 0 part-way (the schedule counted training steps but
    was stepped per optimiser step). Now every optimiser step of the run gets a positive, decreasing LR and
    the schedule reaches 0 exactly after the last one; a skipped batch still advances it."""
    steps = 4
    trainer = trainer_for(
        tmp_path, steps=steps, updates_per_batch=updates, lr_schedule=schedule, optimizer="sgd", learning_rate=0.1
    )
    used: list[float] = []
    step_once = trainer.optimizer_step

    def recording() -> dict:
        out = step_once()
        used.append(out["lr"])
        return out

    trainer.optimizer_step = recording
    for step in range(steps):
        if step == 1:
            assert trainer.policy_update([])["skipped"] == 1  # nothing to learn from: no optimiser step
        else:
            trainer.policy_update(fixed_batch())
    assert len(used) == (steps - 1) * updates
    assert all(lr > 0 for lr in used) and all(a > b for a, b in zip(used, used[1:]))
    assert trainer.scheduler.last_epoch == steps * updates
    assert trainer.scheduler.get_last_lr()[0] == pytest.approx(0.0, abs=1e-12)
    assert used[-1] == pytest.approx(0.1 * trainer._lr_lambda(steps * updates - 1))


def test_warmup_counts_training_steps(tmp_path):
    trainer = trainer_for(tmp_path, steps=4, updates_per_batch=2, warmup_steps=1, lr_schedule="linear")
    assert [round(trainer._lr_lambda(i), 4) for i in range(9)] == [
        0.5,
        1.0,
        1.0,
        0.8333,
        0.6667,
        0.5,
        0.3333,
        0.1667,
        0.0,
    ]


def test_gradient_checkpointing_with_shared_prefix_is_refused_and_works_without_it(tmp_path):
    """The shared-prefix forward needs the prompt's KV cache, which checkpointing turns off (it crashed with
    'NoneType has no attribute batch_repeat_interleave'): the config refuses the pair and says what to set."""
    from pivotgym.train.config import ConfigError

    model = make_tiny_llama()
    model.gradient_checkpointing_enable()
    model.train()
    with pytest.raises(AttributeError):
        completion_logprobs(model, PROMPT_A, COMPS_A, shared_prefix=True)
    with pytest.raises(ConfigError, match="shared_prefix: false"):
        trainer_for(tmp_path, gradient_checkpointing=True)
    plain = trainer_for(tmp_path / "plain", shared_prefix=False)
    checkpointed = trainer_for(tmp_path / "ckpt", gradient_checkpointing=True, shared_prefix=False)
    assert checkpointed.unwrapped_model.is_gradient_checkpointing
    for t in (plain, checkpointed):
        batches, n_tokens = t.prepare_batches(fixed_batch())
        t.accumulate_gradients(batches, n_tokens)
    for a, b in zip(grads(plain.model), grads(checkpointed.model)):
        assert torch.allclose(a, b, atol=1e-6)
