"""The hand-off: a training run ends with a Hugging Face model folder that the loaders take directly."""

from __future__ import annotations

import json

import pytest
import torch

from pivotgym.train import SFTConfig, SFTTrainer
from train_testlib import write_arith_data


@pytest.fixture()
def expert(arith_registry, tmp_path):
    traj, _ = write_arith_data(tmp_path / "data", n_trajectories=2)
    return traj


def _logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits


def _fit(tmp_path, expert, **extra):
    from pivotgym.sampling.testing import tiny_llama

    model, tokenizer = tiny_llama(seed=3)
    config = SFTConfig(**{"output_dir": str(tmp_path / "run"), "trajectories": str(expert), "steps": 2,
                          "trajectories_per_step": 2, "learning_rate": 1e-2, "micro_batch_size": 1,
                          "report_to": ["none"], "progress": False, **extra})
    trainer = SFTTrainer(config, model=model, tokenizer=tokenizer)
    return trainer, trainer.fit()


@pytest.mark.parametrize("lora", [False, True])
def test_training_ends_with_a_loadable_model_folder(expert, tmp_path, lora):
    from transformers import AutoModelForCausalLM

    from pivotgym.sampling.models import load_model_and_tokenizer, resolve_model

    extra = {"lora": True, "lora_r": 4, "lora_alpha": 8, "learning_rate": 5e-2} if lora else {}
    trainer, summary = _fit(tmp_path, expert, **extra)
    final = tmp_path / "run" / "final"
    assert summary["final_model"] == str(final)
    assert (final / "config.json").is_file() and (final / "model.safetensors").is_file()
    assert not (final / "adapter_config.json").exists()  # LoRA is merged: a plain full model
    assert json.loads((final / "pivotgym-model.json").read_text())["step"] == 2
    assert resolve_model(str(final)) == str(final)
    loaded, tokenizer = load_model_and_tokenizer(str(final), device="cpu")
    plain = AutoModelForCausalLM.from_pretrained(str(final))
    ids = torch.tensor([tokenizer.encode("Start with 3. Add 4.")])
    trained = trainer.unwrapped_model.eval()
    expected = _logits(trained, ids)
    assert torch.allclose(_logits(loaded, ids), expected, atol=1e-4)
    assert torch.allclose(_logits(plain, ids), expected, atol=1e-4)
    if lora:  # merging worked on a copy: the trainer's model still carries its adapter, and the adapter mattered
        assert any("lora_A" in n for n, _ in trained.named_parameters())
        with trained.disable_adapter():
            assert not torch.allclose(_logits(trained, ids), expected, atol=1e-4)


def test_save_final_model_can_be_turned_off(expert, tmp_path):
    _, summary = _fit(tmp_path, expert, save_final_model=False)
    assert summary["final_model"] is None
    assert not (tmp_path / "run" / "final").exists()

