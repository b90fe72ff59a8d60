"""Per-token log-probabilities: logits kept only where SFT's loss is give the loss and gradient of full logits."""

from __future__ import annotations

import copy

import pytest
import torch
from core_helpers import make_tiny_llama

from pivotgym.sampling.logprobs import sequence_logprobs
from pivotgym.train.losses import nll_sum


@pytest.fixture()
def tiny_model():
    return make_tiny_llama()


SEQUENCES = [list(range(3, 40)), list(range(50, 70)), list(range(10, 30))]
# per sequence, 0/1 over target positions 1..T-1: two answers, one answer, and a sequence with none
MASKS = [
    [0] * 10 + [1] * 4 + [0] * 12 + [1] * 3 + [0] * 7,
    [0] * 15 + [1] * 4,
    [0] * 19,
]


def _loss_and_grads(model: torch.nn.Module, masks: list[list[int]] | None) -> tuple[torch.Tensor, list[torch.Tensor]]:
    model.zero_grad()
    logp, mask = sequence_logprobs(model, SEQUENCES, pad_id=0, target_masks=masks)
    if masks is None:  # the full form: the caller masks the loss positions itself
        mask = torch.zeros_like(logp)
        for row, m in enumerate(MASKS):
            mask[row, : len(m)] = torch.tensor(m, dtype=mask.dtype)
    loss = nll_sum(logp, mask)
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters()]


def test_logits_at_the_loss_positions_only_give_the_loss_and_gradients_of_full_logits(tiny_model):
    full_loss, full_grads = _loss_and_grads(copy.deepcopy(tiny_model), None)
    kept_loss, kept_grads = _loss_and_grads(copy.deepcopy(tiny_model), MASKS)
    assert float(full_loss) > 0
    assert float(kept_loss) == pytest.approx(float(full_loss), rel=1e-6)
    for a, b in zip(kept_grads, full_grads):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)


def test_the_returned_mask_is_the_selected_real_targets(tiny_model):
    logp, mask = sequence_logprobs(tiny_model, SEQUENCES, pad_id=0, target_masks=MASKS)
    assert logp.shape == mask.shape == (3, len(SEQUENCES[0]) - 1)
    assert mask.sum(dim=1).tolist() == [7, 4, 0]
    assert bool((logp[mask == 0] == 0).all()) and bool((logp[mask == 1] < 0).all())
    # a mask longer than its sequence cannot select padding
    _, clipped = sequence_logprobs(tiny_model, [[5, 6, 7], [5, 6, 7, 8, 9]], target_masks=[[1] * 4, [1] * 4])
    assert clipped.tolist() == [[1, 1, 0, 0], [1, 1, 1, 1]]


def test_a_batch_without_loss_positions_still_backpropagates(tiny_model):
    logp, mask = sequence_logprobs(tiny_model, SEQUENCES[:1], target_masks=[[0] * 36])
    assert int(mask.sum()) == 0
    nll_sum(logp, mask).backward()  # a graph exists: distributed ranks with an empty micro-batch stay in step
    assert all(p.grad is not None for p in tiny_model.parameters() if p.requires_grad)
