"""A causal language model whose mask is a buffer: learned positions, blocks of
nn.MultiheadAttention given the buffer as ``attn_mask`` (no ``is_causal``), then
scaled_dot_product_attention given a bool mask sliced from a ``tril`` buffer, a token
-level loss."""

import torch
import torch.nn.functional as F
from torch import nn

BATCH_SIZE = 4
VOCAB, SEQ, WIDTH, HEADS = 50, 8, 16, 4


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(WIDTH)
        self.attn = nn.MultiheadAttention(WIDTH, HEADS, batch_first=True)
        self.register_buffer("mask", torch.triu(torch.full((SEQ, SEQ), float("-inf")), 1))

    def forward(self, x):
        y, _ = self.attn(*[self.ln(x)] * 3, attn_mask=self.mask, need_weights=False)
        return x + y


class SdpaBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH)
        self.proj = nn.Linear(WIDTH, WIDTH)
        self.register_buffer("bias", torch.tril(torch.ones(2 * SEQ, 2 * SEQ, dtype=torch.bool)))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = (h.view(b, t, HEADS, c // HEADS).transpose(1, 2)
                   for h in self.qkv(x).split(c, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=self.bias[:t, :t])
        return x + self.proj(y.transpose(1, 2).reshape(b, t, c))


class CausalLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.tokens = nn.Embedding(VOCAB, WIDTH)
        self.positions = nn.Embedding(SEQ, WIDTH)
        self.blocks = nn.Sequential(Block(), SdpaBlock())
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, tokens, targets):
        where = torch.arange(tokens.shape[1])
        x = self.blocks(self.tokens(tokens) + self.positions(where))
        logits = self.head(x)
        return F.cross_entropy(logits.view(-1, VOCAB), targets.view(-1))


def model():
    return CausalLM()


def example_inputs(batch_size):
    return (torch.randint(0, VOCAB, (batch_size, SEQ)),
            torch.randint(0, VOCAB, (batch_size, SEQ)))
