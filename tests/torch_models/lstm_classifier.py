"""An LSTM classifier: nn.LSTM is not mapped op by op, so with --opaque it becomes one
opaque op (batch-wise: each sample's sequence runs on its own)."""

import torch
from torch import nn

BATCH_SIZE = 4
STEPS, WIDTH, HIDDEN, LAYERS = 5, 6, 8, 2


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(WIDTH, HIDDEN, num_layers=LAYERS, batch_first=True)
        self.fc = nn.Linear(HIDDEN, 10)

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.fc(out[:, -1])


def model():
    return Net()


def example_inputs(batch_size):
    return (torch.randn(batch_size, STEPS, WIDTH),)
