"""A small convolutional net with batch norm and dropout, in plain PyTorch: the two
things whose results a run computes on flextui's terms (batch statistics per sample
block of the strategy, dropout's masks drawn from each element's position)."""
import torch
from torch import nn

BATCH_SIZE = 4


def model():
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.Dropout(0.25), nn.Flatten(), nn.Linear(8 * 6 * 6, 16), nn.Tanh(),
                         nn.Dropout(0.5), nn.Linear(16, 10))


def example_inputs(batch_size):
    return (torch.randn(batch_size, 3, 6, 6),)
