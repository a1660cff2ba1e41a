"""A residual MLP of Linear layers over a short sequence, a layer norm and a head, its
loss computed in forward: the model an exported plan is trained with in a plain
PyTorch loop (tests/test_export_torch.py)."""

import torch
import torch.nn.functional as F
from torch import nn

BATCH_SIZE = 8
SEQ, FEATURES, WIDTH, HIDDEN, CLASSES = 4, 6, 8, 16, 5


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(WIDTH, HIDDEN)
        self.down = nn.Linear(HIDDEN, WIDTH)

    def forward(self, x):
        return x + self.down(F.gelu(self.up(x)))


class ResidualMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(FEATURES, WIDTH)
        self.blocks = nn.Sequential(Block(), Block())
        self.norm = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, CLASSES)

    def forward(self, x, labels):
        h = self.blocks(torch.tanh(self.embed(x)))
        logits = self.head(self.norm(h))
        return F.cross_entropy(logits.reshape(-1, CLASSES), labels.reshape(-1))


def model():
    return ResidualMLP()


def example_inputs(batch_size):
    return (torch.randn(batch_size, SEQ, FEATURES), torch.randint(0, CLASSES, (batch_size, SEQ)))
