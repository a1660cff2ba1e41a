"""Two things the importer keeps as views of tensors (positions from torch.arange, and
an activation split into heads) read by an op it cannot map (cumsum), and a boolean
mask one opaque region makes for another (``masked``)."""

import torch
from torch import nn

BATCH_SIZE = 4
STEPS, WIDTH, HEADS = 5, 8, 2


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(WIDTH, WIDTH)
        self.out = nn.Linear(STEPS * WIDTH, 10)

    def forward(self, x):
        h = self.fc(x)
        positions = torch.arange(STEPS)
        h = h * torch.cumsum(positions, 0).unsqueeze(-1)
        heads = h.view(x.shape[0], STEPS, HEADS, WIDTH // HEADS).transpose(1, 2)
        h = torch.cumsum(heads, 2).transpose(1, 2).reshape(x.shape[0], STEPS, WIDTH)
        return self.out(torch.tanh(h).flatten(1))


class Masked(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(WIDTH, WIDTH)
        self.out = nn.Linear(STEPS * WIDTH, 10)

    def forward(self, x):
        summed = torch.cumsum(x, 1)
        mask = summed > 0
        h = torch.relu(summed)
        h = self.fc(h).masked_fill(mask, 0.0)
        return self.out(h.flatten(1))


def model():
    return Net()


def masked():
    return Masked()


def example_inputs(batch_size):
    return (torch.randn(batch_size, STEPS, WIDTH),)
