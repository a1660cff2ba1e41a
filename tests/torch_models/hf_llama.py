"""A tiny random-weight Llama from Hugging Face transformers (a config, no download):
RMSNorm, rotary positions, a SiLU-gated MLP, its causal mask built from positions. It
returns the logits of the last position (what comes next)."""

import torch
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM

BATCH_SIZE = 2
VOCAB, SEQ = 50, 8


class NextToken(nn.Module):
    def __init__(self):
        super().__init__()
        self.lm = LlamaForCausalLM(LlamaConfig(
            vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
            num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=SEQ,
            use_cache=False))

    def forward(self, ids):
        return self.lm(input_ids=ids).logits[:, -1]


def model():
    return NextToken()


def example_inputs(batch_size):
    return (torch.randint(0, VOCAB, (batch_size, SEQ)),)
