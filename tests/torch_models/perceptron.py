"""A two-layer perceptron in plain PyTorch."""
import torch
from torch import nn

BATCH_SIZE = 8


def model():
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))


def example_inputs(batch_size):
    return (torch.randn(batch_size, 1, 8, 8),)
