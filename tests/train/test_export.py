"""The hand-off: a training run ends with a Hugging Face model folder that the loaders take directly."""

from __future__ import annotations

import json

import pytest
import torch
from train_testlib import write_arith_data

from pivotgym.train import SFTConfig, SFTTrainer


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
    config = SFTConfig(
        **{
            "output_dir": str(tmp_path / "run"),
            "trajectories": str(expert),
            "steps": 2,
            "trajectories_per_step": 2,
            "learning_rate": 1e-2,
            "micro_batch_size": 1,
            "report_to": ["none"],
            "progress": False,
            **extra,
        }
    )
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


def _saved_base(tmp_path):
    from pivotgym.sampling.testing import tiny_llama

    model, tokenizer = tiny_llama(seed=4)
    base = tmp_path / "base"
    model.save_pretrained(str(base))
    tokenizer.save_pretrained(str(base))
    return base, tokenizer


def test_eval_model_accepts_a_run_folder_and_its_checkpoints(expert, tmp_path):
    from pivotgym.sampling.models import load_model_and_tokenizer, resolve_model

    base, tokenizer = _saved_base(tmp_path)
    ids = torch.tensor([tokenizer.encode("Start with 3. Add 4.")])
    at_step = {}

    def record(trainer, row):
        at_step[row["step"]] = _logits(trainer.unwrapped_model, ids)

    config = SFTConfig(
        model=str(base),
        output_dir=str(tmp_path / "run"),
        trajectories=str(expert),
        steps=2,
        trajectories_per_step=2,
        learning_rate=5e-2,
        micro_batch_size=1,
        report_to=["none"],
        progress=False,
        checkpoint_every=1,
        keep_checkpoints=5,
    )
    SFTTrainer(config).fit(callbacks=[record])
    run = tmp_path / "run"
    step1, step2 = run / "checkpoints" / "step-000001", run / "checkpoints" / "step-000002"
    assert resolve_model(str(run)) == str(run / "final")  # the run folder itself
    assert resolve_model(str(step2)) == str(run / "final")  # the newest checkpoint is the final model
    built = resolve_model(str(step1))  # an older one is rebuilt from its weights + the base config
    assert built == str(step1 / "model") and (step1 / "model" / "config.json").is_file()
    loaded, _ = load_model_and_tokenizer(built, device="cpu")
    assert torch.allclose(_logits(loaded, ids), at_step[1], atol=1e-4)
    assert not torch.allclose(at_step[1], at_step[2], atol=1e-4)  # the steps differ, so the check can fail
    assert resolve_model(str(step1)) == built  # built once, reused


def test_a_checkpoint_that_cannot_be_loaded_is_a_clear_error(expert, tmp_path):
    from pivotgym.sampling.models import ModelError, resolve_model

    base, _ = _saved_base(tmp_path)
    config = SFTConfig(
        model=str(base),
        output_dir=str(tmp_path / "run"),
        trajectories=str(expert),
        steps=2,
        trajectories_per_step=2,
        micro_batch_size=1,
        report_to=["none"],
        progress=False,
        checkpoint_every=1,
        keep_checkpoints=5,
        lora=True,
        lora_r=4,
    )
    SFTTrainer(config).fit()
    step1 = tmp_path / "run" / "checkpoints" / "step-000001"
    with pytest.raises(ModelError, match="LoRA training checkpoint.*final"):
        resolve_model(str(step1))
    empty = tmp_path / "broken" / "checkpoints" / "step-000001"
    empty.mkdir(parents=True)
    (empty / "trainer_state.json").write_text(json.dumps({"step": 1, "config": {"model": str(base)}}))
    with pytest.raises(ModelError, match="without model weights"):
        resolve_model(str(empty))
    with pytest.raises(ModelError, match="no config.json.*checkpoint"):
        resolve_model(str(tmp_path / "broken"))


def test_zero_steps_is_refused_before_anything_is_loaded_or_written(expert, tmp_path):
    import subprocess
    import sys

    from pivotgym.train import ConfigError

    run = tmp_path / "run"
    with pytest.raises(ConfigError, match="steps is 0.*pivotgym eval"):
        SFTTrainer(
            SFTConfig(output_dir=str(run), trajectories=str(expert), steps=0, report_to=["none"], progress=False),
            model=object(),
            tokenizer=None,
        )
    config = tmp_path / "sft.yaml"
    config.write_text(f"trajectories: {expert}\noutput_dir: {run}\nsteps: 3\n")
    r = subprocess.run(
        [sys.executable, "-m", "pivotgym.cli", "train", "sft", "-c", str(config), "--steps", "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode != 0 and "steps is 0" in r.stderr and "Traceback" not in r.stderr
    assert not run.exists()  # no eval, no checkpoint a later run would resume from


def test_only_the_newest_checkpoint_keeps_optimizer_state(expert, tmp_path):
    from pivotgym.sampling.models import resolve_model

    base, _ = _saved_base(tmp_path)
    common = {
        "model": str(base),
        "trajectories": str(expert),
        "trajectories_per_step": 2,
        "micro_batch_size": 1,
        "report_to": ["none"],
        "progress": False,
        "checkpoint_every": 1,
        "keep_checkpoints": 3,
    }
    SFTTrainer(SFTConfig(output_dir=str(tmp_path / "run"), steps=3, **common)).fit()
    ckpts = sorted((tmp_path / "run" / "checkpoints").iterdir())
    assert [c.name for c in ckpts] == ["step-000001", "step-000002", "step-000003"]
    assert [(c / "optimizer.bin").is_file() for c in ckpts] == [False, False, True]
    assert all((c / "pytorch_model.bin").is_file() for c in ckpts)  # weights stay: loadable with --model
    assert resolve_model(str(ckpts[0])) == str(ckpts[0] / "model")
    with pytest.raises(FileNotFoundError, match="no optimizer state.*resume"):
        SFTTrainer(SFTConfig(output_dir=str(tmp_path / "run"), steps=4, resume=str(ckpts[0]), **common)).fit()
    SFTTrainer(SFTConfig(output_dir=str(tmp_path / "two"), steps=2, keep_optimizer_state=2, **common)).fit()
    assert all((c / "optimizer.bin").is_file() for c in (tmp_path / "two" / "checkpoints").iterdir())


def test_cli_train_then_eval_the_run_folder(expert, tmp_path, capsys):
    """The whole hand-off with the command line alone: `pivotgym train sft` writes a run folder, and
    `pivotgym eval --model RUN` scores the model it saved (with transcripts in the items)."""
    import yaml

    from pivotgym.cli import main

    base, _ = _saved_base(tmp_path)
    config = tmp_path / "sft.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "model": str(base),
                "output_dir": str(tmp_path / "run"),
                "trajectories": str(expert),
                "steps": 1,
                "trajectories_per_step": 2,
                "micro_batch_size": 1,
                "report_to": ["none"],
                "progress": False,
            }
        )
    )
    assert main(["train", "sft", "--config", str(config)]) == 0
    assert (tmp_path / "run" / "final" / "config.json").is_file()
    out = tmp_path / "scores.json"
    assert (
        main(
            [
                "eval",
                "--suite",
                "ood-quick",
                "--member",
                "general/arithmetic-v0",
                "--limit",
                "2",
                "--max-new-tokens",
                "2",
                "--model",
                str(tmp_path / "run"),
                "--out",
                str(out),
                "--json",
            ]
        )
        == 0
    )
    result = json.loads(out.read_text())
    assert result["scores"]["general/arithmetic-v0"]["n"] == 2
    items = [json.loads(line) for line in open(str(out) + ".items.jsonl")]
    assert len(items) == 2 and all(item["transcript"]["messages"] for item in items)
    assert (
        main(
            [
                "eval",
                "--suite",
                "ood-quick",
                "--member",
                "general/arithmetic-v0",
                "--limit",
                "1",
                "--model",
                str(tmp_path / "run"),
                "--out",
                str(tmp_path / "bare.json"),
                "--no-transcripts",
            ]
        )
        == 0
    )
    assert all("transcript" not in json.loads(line) for line in open(str(tmp_path / "bare.json") + ".items.jsonl"))
