"""A small CNN with two things the importer cannot map op by op: a grouped convolution
and a cumulative sum (both batch-wise), then a batch-mixing step when MIX is set."""

import torch
from torch import nn

BATCH_SIZE = 4


class Net(nn.Module):
    def __init__(self, mix=False):
        super().__init__()
        self.mix = mix
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.grouped = nn.Conv2d(8, 8, 3, padding=1, groups=4)
        self.fc = nn.Linear(8 * 8 * 8, 10)

    def forward(self, x):
        x = torch.relu(self.conv(x))
        x = torch.cumsum(self.grouped(x), dim=3)
        if self.mix:
            x = x - torch.cumsum(x, dim=0)    # each sample depends on the ones before
        return self.fc(torch.tanh(x).flatten(1))


def model():
    return Net()


def mixing():
    return Net(mix=True)


def example_inputs(batch_size):
    return (torch.randn(batch_size, 3, 8, 8),)
