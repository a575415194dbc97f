"""Tiny random models built from configs with fixed seeds (diffusers' get_dummy_components style)."""
from __future__ import annotations

import torch
from torch import nn


def tiny_llama(seed: int = 0, vocab: int = 64, hidden: int = 32, layers: int = 2):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=64)
    return LlamaForCausalLM(cfg).eval()


class TinyMLP(nn.Module):
    def __init__(self, seed: int = 0, width: int = 16):
        super().__init__()
        torch.manual_seed(seed)
        self.fc1 = nn.Linear(8, width)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(width, 4)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))
