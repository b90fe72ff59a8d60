"""The trainers' sampler option: ``sampler: hf`` wraps the live policy; any other sampler holds its own copy
of the weights, which is pushed the policy's weights after they change (the colocated vLLM engine's route;
``test_vllm_sync.py`` runs that engine). Here the copy is a second transformers model, so the tests run
wherever the trainers do."""

from __future__ import annotations

import copy

import pytest
import torch

from pivotgym.errors import ConfigError
from pivotgym.registry import make_sampler
from pivotgym.sampling.base import SamplingParams
from pivotgym.sampling.hf import HFSampler
from pivotgym.sampling.testing import tiny_llama
from pivotgym.train.config import RLConfig, load_config
from pivotgym.train.policy_sampler import policy_weights, push_weights
from pivotgym.train.rl import RLTrainer, group_samples, sampler_agreement

GREEDY = SamplingParams(temperature=0.0, max_new_tokens=8)
PROMPT = [{"role": "user", "content": "Name a colour."}]


class CopySampler:
    """A sampler with its own model (like an engine): it samples only what was loaded into it."""

    backend = "copy"
    prompt_seeds = True

    def __init__(self, model, tokenizer) -> None:
        self.model = model
        self.inner = HFSampler(model, tokenizer)
        self.loads = 0

    def load_weights(self, weights) -> None:
        self.inner.load_weights(weights)  # an unknown name is a KeyError: names must be the HF model's
        self.loads += 1

    def encode(self, prompt):
        return self.inner.encode(prompt)

    def describe(self):
        return {**self.inner.describe(), "backend": self.backend}

    def sample(self, prompts, n=1, params=None, *, seeds=None):
        return self.inner.sample(prompts, n=n, params=params, seeds=seeds)


def rl_trainer(tmp_path, model, tokenizer, **overrides) -> RLTrainer:
    settings = dict(
        output_dir=str(tmp_path / "run"),
        steps=1,
        optimizer="sgd",
        learning_rate=5.0,
        max_grad_norm=None,
        mixed_precision="no",
        progress=False,
        report_to=["none"],
    )
    return RLTrainer(RLConfig(**{**settings, **overrides}), model=model, tokenizer=tokenizer)


def greedy_ids(sampler, prompt_ids) -> list[int]:
    return sampler.sample([prompt_ids], n=1, params=GREEDY)[0][0].token_ids


def test_a_copying_sampler_gets_the_policy_weights_after_each_optimizer_step(tmp_path):
    policy, tokenizer = tiny_llama(seed=0)
    receiver = CopySampler(tiny_llama(seed=1)[0], tokenizer)  # different weights until the first push
    trainer = RLTrainer(
        RLConfig(
            output_dir=str(tmp_path / "run"),
            steps=1,
            optimizer="sgd",
            learning_rate=20.0,
            max_grad_norm=None,
            updates_per_batch=2,
            mixed_precision="no",
            progress=False,
            report_to=["none"],
            sampler="copy",
        ),
        model=policy,
        tokenizer=tokenizer,
        sampler=receiver,
    )
    live = HFSampler(trainer.unwrapped_model, tokenizer)
    prompt = live.encode(PROMPT)
    before = greedy_ids(trainer.sampler, prompt)
    assert receiver.loads == 1 and before == greedy_ids(live, prompt)
    trainer.sampler.describe()
    assert receiver.loads == 1  # no optimiser step since: nothing pushed

    completions = trainer.sampler.sample([prompt], n=4, params=SamplingParams(max_new_tokens=6), seeds=[3])[0]
    target = [c.token_ids for c in completions]
    samples = group_samples(prompt, target, [1.0, 0.0, 1.0, 0.0], "std", logprobs=[c.logprobs for c in completions])
    assert all(s.sampler_logprobs is not None for s in samples)
    stats = trainer.policy_update(samples)
    # the sampler's recorded logprobs are the policy's (same weights, fp32): on-policy ratio 1
    assert stats["sampler_ratio"] == pytest.approx(1.0, abs=1e-4)
    assert stats["sampler_logprob_gap"] < 1e-4
    assert trainer.weights_version == 2 and receiver.loads == 1  # two optimiser steps, not pushed yet

    after = greedy_ids(trainer.sampler, prompt)
    assert receiver.loads == 2  # one push before sampling again, however many steps were made
    assert after == greedy_ids(live, prompt)
    assert after != before  # the update changed what the policy says, and the copy says it too
    for (name, p), q in zip(trainer.unwrapped_model.named_parameters(), receiver.model.parameters()):
        assert torch.equal(p, q), name


def test_sampler_agreement_measures_a_sampler_that_differs():
    logp = torch.tensor([[-1.0, -2.0, 0.0]])
    mask = torch.tensor([[1, 1, 0]])
    samples = group_samples([1], [[5, 6], [7]], [1.0, 0.0], logprobs=[[-1.1, -2.1], [-3.0]])
    ratio, gap, tokens = sampler_agreement(logp, mask, samples[:1])
    assert tokens == 2 and ratio / tokens == pytest.approx(torch.exp(torch.tensor(0.1)).item())
    assert gap / tokens == pytest.approx(0.1)
    unrecorded = group_samples([1], [[5, 6], [7]], [1.0, 0.0])
    assert sampler_agreement(logp, mask, unrecorded[:1]) == (0.0, 0.0, 0.0)


def test_a_sampler_that_cannot_take_weights_is_refused(tmp_path):
    policy, tokenizer = tiny_llama()

    class Server:  # like the openai backend: samples from a process we cannot load weights into
        backend = "openai"

    with pytest.raises(ConfigError, match="cannot receive the policy's weights") as info:
        RLTrainer(
            RLConfig(output_dir=str(tmp_path / "run"), sampler="openai", progress=False, report_to=["none"]),
            model=policy,
            tokenizer=tokenizer,
            sampler=Server(),
        )
    assert "sampler: vllm" in str(info.value.hint)


def test_lora_policy_weights_are_the_merged_model(tmp_path):
    policy, tokenizer = tiny_llama()
    trainer = rl_trainer(
        tmp_path, policy, tokenizer, lora=True, lora_r=4, lora_target_modules=["q_proj", "v_proj"], learning_rate=1.0
    )
    prompt = HFSampler(trainer.unwrapped_model, tokenizer).encode(PROMPT)
    trainer.policy_update(group_samples(prompt, [[30, 31, 32], [33, 34]], [1.0, 0.0]))
    model = trainer.unwrapped_model
    merged = copy.deepcopy(model).merge_and_unload()
    expected = dict(merged.named_parameters())
    got = dict(policy_weights(model))
    assert set(got) == set(expected)
    for name, value in got.items():
        torch.testing.assert_close(value, expected[name], rtol=0, atol=1e-6, msg=name)
    base = dict(model.get_base_model().named_parameters())
    moved = [
        n
        for n in got
        if n.endswith("q_proj.weight") and not torch.equal(got[n], base[n.removesuffix("weight") + "base_layer.weight"])
    ]
    assert moved, "one step with a large learning rate moves the adapter, so merged q_proj differs from the base"
    receiver = CopySampler(tiny_llama(seed=1)[0], tokenizer)
    push_weights(receiver, model)
    assert greedy_ids(receiver, prompt) == greedy_ids(HFSampler(merged, tokenizer), prompt)


def test_hf_sampler_load_weights_copies_in_place_and_drops_kept_prefixes():
    source, tokenizer = tiny_llama(seed=0)
    sampler = HFSampler(tiny_llama(seed=1)[0], tokenizer)
    prompt = sampler.encode(PROMPT)
    tensors = list(sampler.model.parameters())
    with sampler.reuse_prefixes():
        greedy_ids(sampler, prompt)
        assert sampler._prefixes  # the prompt's rows are kept: they are the old weights'
        sampler.load_weights(policy_weights(source))
        assert not sampler._prefixes
        assert greedy_ids(sampler, prompt) == greedy_ids(HFSampler(source, tokenizer), prompt)
    assert all(a is b for a, b in zip(tensors, sampler.model.parameters()))  # in place: compiled steps stay valid
    for p, q in zip(sampler.model.parameters(), source.parameters()):
        assert torch.equal(p, q)
    with pytest.raises(KeyError, match="no parameter 'model.not_a_layer.weight'"):
        sampler.load_weights([("model.not_a_layer.weight", torch.zeros(1))])


@pytest.mark.parametrize("lora", [False, True])
def test_half_precision_sampler_is_a_bf16_copy_kept_in_step(tmp_path, lora):
    """With ``half_precision_sampler`` under bf16 mixed precision the trainer samples from a bf16 copy (LoRA merged
    in), pushed the policy's weights after an optimiser step and before the next rollout; the fp32 weights it
    trains are untouched."""
    policy, tokenizer = tiny_llama()
    adapters = dict(lora=True, lora_r=4, lora_target_modules=["q_proj", "v_proj"]) if lora else {}
    trainer = rl_trainer(
        tmp_path, policy, tokenizer, mixed_precision="bf16", half_precision_sampler=True, learning_rate=1.0, **adapters
    )
    sampler = trainer.sampler
    assert trainer.copies_weights and sampler.model is not trainer.unwrapped_model
    assert sampler.autocast_dtype is None and {p.dtype for p in sampler.model.parameters()} == {torch.bfloat16}
    assert {b.dtype for b in sampler.model.buffers()} == {torch.float32}  # rotary inv_freq: as bf16 loading keeps it
    assert {p.dtype for p in trainer.unwrapped_model.parameters()} == {torch.float32}

    def assert_in_step() -> None:
        copy_params = dict(sampler.model.named_parameters())
        for name, value in policy_weights(trainer.unwrapped_model):
            assert torch.equal(copy_params[name], value.to(torch.bfloat16)), name

    assert_in_step()
    prompt = sampler.encode(PROMPT)
    before = {name: value.clone() for name, value in policy_weights(trainer.unwrapped_model)}
    stats = trainer.policy_update(group_samples(prompt, [[30, 31, 32], [33, 34]], [1.0, 0.0]))
    assert trainer.weights_version == 1 and stats["tokens_in_loss"] > 0
    moved = [n for n, v in policy_weights(trainer.unwrapped_model) if not torch.equal(v, before[n])]
    assert moved  # the step changed the policy, so an unrefreshed copy would fail the check below
    assert trainer.sampler is sampler  # the same sampler, its copy refreshed on this access
    assert_in_step()


def test_half_precision_sampler_off_by_default_or_in_fp32_samples_the_live_model(tmp_path):
    policy, tokenizer = tiny_llama()
    off = rl_trainer(tmp_path, policy, tokenizer, mixed_precision="bf16")
    assert not off.copies_weights and off.sampler.model is off.unwrapped_model
    assert off.sampler.autocast_dtype == torch.bfloat16
    fp32 = rl_trainer(tmp_path, tiny_llama()[0], tokenizer, mixed_precision="no", half_precision_sampler=True)
    assert not fp32.copies_weights and fp32.sampler.model is fp32.unwrapped_model  # nothing to copy into


def test_hf_sampler_options_reach_the_live_sampler(tmp_path):
    policy, tokenizer = tiny_llama()
    trainer = rl_trainer(tmp_path, policy, tokenizer, sampler_options={"max_batch_size": 3})
    assert trainer.sampler.max_batch_size == 3 and trainer.sampler.model is trainer.unwrapped_model


def test_build_sampler_gives_defaults_only_to_backends_that_take_them(tmp_path):
    from pivotgym.train.export import save_model

    model, tokenizer = tiny_llama()
    folder = str(save_model(model, tokenizer, tmp_path / "m"))
    assert make_sampler("hf", folder, None, max_batch_size=5, not_a_parameter=1).max_batch_size == 5
    assert make_sampler("hf", folder, {"max_batch_size": 2}, max_batch_size=5).max_batch_size == 2
    with pytest.raises(TypeError, match="not_a_parameter"):  # what the user set is never dropped silently
        make_sampler("hf", folder, {"not_a_parameter": 1})


def test_trainer_config_sampler_keys_and_typos(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text("sampler: vllm\nsampler_options: {dtype: float32, enforce_eager: true}\n")
    cfg = load_config(good, "pivot")
    assert cfg.sampler == "vllm" and cfg.sampler_options == {"dtype": "float32", "enforce_eager": True}
    typo = tmp_path / "typo.yaml"
    typo.write_text("sampler: vllm\nsampler_option: {dtype: float32}\n")
    with pytest.raises(ConfigError, match=r"typo.yaml:2.*sampler_option.*did you mean 'sampler_options'"):
        load_config(typo, "pivot")
    scalar = tmp_path / "scalar.yaml"
    scalar.write_text("sampler_options: float32\n")
    with pytest.raises(ConfigError, match="sampler_options"):
        load_config(scalar, "e2e")
    empty = tmp_path / "empty.yaml"
    empty.write_text("sampler: ''\n")
    with pytest.raises(ConfigError, match="sampler must name a registered sampler"):
        load_config(empty, "sft")


def test_the_hf_sampler_of_a_trainer_refuses_options_that_would_cast_the_model_it_trains(tmp_path):
    """``HFSampler(model, dtype=...)`` casts the model it wraps: given to a trainer's live sampler it would have
    turned the fp32 weights under training into bf16 without a word."""
    from pivotgym.train.config import SFTConfig

    with pytest.raises(ConfigError, match=r"dtype would convert the model being trained") as caught:
        SFTConfig(output_dir=str(tmp_path), sampler_options={"dtype": "bfloat16"}).validate()
    assert "mixed_precision" in str(caught.value.hint)
    SFTConfig(output_dir=str(tmp_path), sampler_options={"max_batch_size": 8}).validate()
    SFTConfig(output_dir=str(tmp_path), sampler="vllm", sampler_options={"dtype": "bfloat16"}).validate()


def test_the_live_sampler_generates_in_the_trainers_mixed_precision_and_trainers_in_turn_may_differ(tmp_path):
    """One process, trainers one after another in different precisions (an experiment's sections may differ):
    accelerate's process-wide state used to refuse the second ("restart your runtime")."""
    for i, (precision, autocast) in enumerate([("bf16", torch.bfloat16), ("no", None), ("bf16", torch.bfloat16)]):
        policy, tokenizer = tiny_llama(seed=0)
        trainer = rl_trainer(tmp_path / str(i), policy, tokenizer, mixed_precision=precision)
        assert trainer.accelerator.mixed_precision == precision
        assert trainer.sampler.autocast_dtype is autocast and trainer.sampler.model is trainer.unwrapped_model
        copying = rl_trainer(
            tmp_path / str(i), policy, tokenizer, mixed_precision=precision, half_precision_sampler=True
        )
        assert copying.sampler_copy_dtype is autocast  # the copy follows each trainer's own precision
        assert {p.dtype for p in trainer.unwrapped_model.parameters()} == {torch.float32}


def test_sampler_options_from_the_command_line():
    from pivotgym.cli.eval import parse_sampler_options
    from pivotgym.cli.output import CLIError

    assert parse_sampler_options(["dtype=float32", "gpu_memory_utilization=0.3", "enforce_eager=true"]) == {
        "dtype": "float32",
        "gpu_memory_utilization": 0.3,
        "enforce_eager": True,
    }
    with pytest.raises(CLIError, match="write KEY=VALUE"):
        parse_sampler_options(["float32"])


def test_train_cli_refuses_a_sampler_that_cannot_follow_the_policy(tmp_path, capsys):
    from pivotgym.cli import main

    config = tmp_path / "cfg.yaml"
    config.write_text("steps: 1\nsampler: openai\n")
    assert main(["train", "sft", "--config", str(config)]) == 1
    err = capsys.readouterr().err
    assert f"{config}:2: sampler: 'openai' cannot be given the policy's weights" in err and "use hf or vllm" in err
    assert main(["train", "sft", "--config", str(config), "--sampler", "hff"]) == 1
    assert "unknown sampler 'hff'" in capsys.readouterr().err


class ClosingCopySampler(CopySampler):
    """A :class:`CopySampler` that counts its ``close()`` calls, as a vLLM engine must be closed."""

    def __init__(self, model, tokenizer) -> None:
        super().__init__(model, tokenizer)
        self.closed = 0

    def close(self) -> None:
        self.closed += 1


def test_close_shuts_the_engine_the_trainer_built_and_leaves_a_given_one(tmp_path, monkeypatch):
    policy, tokenizer = tiny_llama(seed=0)
    monkeypatch.setattr(RLTrainer, "_build_engine", lambda self: ClosingCopySampler(copy.deepcopy(policy), tokenizer))
    with rl_trainer(tmp_path / "own", policy, tokenizer, sampler="copy") as trainer:
        first = trainer.sampler
        trainer.close()
        assert first.closed == 1
        second = trainer.sampler  # a new engine on next use, given the current weights
        assert second is not first and second.loads == 1
        trainer.close()
        trainer.close()  # nothing left to close
    assert (first.closed, second.closed) == (1, 1)

    given = ClosingCopySampler(tiny_llama(seed=1)[0], tokenizer)
    settings = dict(output_dir=str(tmp_path / "given"), steps=1, sampler="copy", progress=False, report_to=["none"])
    with RLTrainer(RLConfig(**settings), model=policy, tokenizer=tokenizer, sampler=given) as trainer:
        assert trainer.sampler is given
    assert given.closed == 0  # the caller's to close
