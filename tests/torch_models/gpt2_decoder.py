"""A GPT-2-style decoder in plain PyTorch (nanoGPT's layout, small): token and learned
position embeddings, pre-layernorm blocks of causal self-attention through
scaled_dot_product_attention and a tanh-GELU MLP, a final layernorm and a head (its own
matrix; ``tied()`` ties it to the token embedding, as GPT-2 does); the module computes
its own token-level cross-entropy."""

import torch
import torch.nn.functional as F
from torch import nn

BATCH_SIZE = 4
VOCAB, SEQ, WIDTH, HEADS, LAYERS = 96, 16, 32, 4, 2


class CausalSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(WIDTH, 3 * WIDTH)
        self.c_proj = nn.Linear(WIDTH, WIDTH)

    def forward(self, x):
        b, t, c = x.size()
        q, k, v = self.c_attn(x).split(c, dim=2)
        q = q.view(b, t, HEADS, c // HEADS).transpose(1, 2)
        k = k.view(b, t, HEADS, c // HEADS).transpose(1, 2)
        v = v.view(b, t, HEADS, c // HEADS).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(WIDTH)
        self.attn = CausalSelfAttention()
        self.ln_2 = nn.LayerNorm(WIDTH)
        self.mlp = nn.Sequential(nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(approximate="tanh"),
                                 nn.Linear(4 * WIDTH, WIDTH))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, tied=False):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, WIDTH)
        self.wpe = nn.Embedding(SEQ, WIDTH)
        self.h = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln_f = nn.LayerNorm(WIDTH)
        self.lm_head = nn.Linear(WIDTH, VOCAB, bias=False)
        if tied:                                  # GPT-2's own: one matrix both ways
            self.lm_head.weight = self.wte.weight

    def forward(self, idx, targets):
        positions = torch.arange(0, idx.size(1), dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(positions)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def model():
    return GPT()


def tied():
    return GPT(tied=True)


def example_inputs(batch_size):
    return (torch.randint(0, VOCAB, (batch_size, SEQ)),
            torch.randint(0, VOCAB, (batch_size, SEQ)))
