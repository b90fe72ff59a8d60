"""Test helpers for every engineer: a tiny random-init Llama that shares SmolLM2's tokenizer.

It runs a forward pass in milliseconds on CPU, so tests of profilers, trainers and evaluators can exercise
the real sampling and scoring code paths without the 135M-parameter model. Its text is gibberish.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pivotgym.sampling.models import DEFAULT_MODEL, prepare_tokenizer, pull_tokenizer

if TYPE_CHECKING:
    from transformers import LlamaForCausalLM, PreTrainedTokenizerBase


def smollm2_tokenizer() -> PreTrainedTokenizerBase:
    """SmolLM2's tokenizer (ChatML chat template, left padding), offline; extracted from the GGUF once."""
    from transformers import AutoTokenizer

    return prepare_tokenizer(AutoTokenizer.from_pretrained(str(pull_tokenizer(DEFAULT_MODEL))))


def tiny_llama(
    seed: int = 0,
    hidden_size: int = 64,
    num_layers: int = 2,
) -> tuple[LlamaForCausalLM, PreTrainedTokenizerBase]:
    """``(model, tokenizer)``: a random-init ``LlamaForCausalLM`` (fp32, eval mode, ~3M parameters, almost
    all in the tied 49,152-token embedding) and SmolLM2's tokenizer. The same ``seed`` gives the same weights."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = smollm2_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.eval()
    return model, tokenizer
