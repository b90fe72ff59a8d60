"""Fixtures for the trainer tests: a tiny random-init Llama built from a config (no tokenizer needed)."""

from __future__ import annotations

import pytest
import torch


def make_tiny_llama(seed: int = 0, vocab: int = 97):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         pad_token_id=0, eos_token_id=1, bos_token_id=2)
    return LlamaForCausalLM(config)


@pytest.fixture()
def tiny_model():
    return make_tiny_llama()
