"""A small tanh network with 96 training items of its own (12 steps of 8 per epoch),
each a 16-vector and its class made from the item's index: enough for the checkpoint
tests' 10 steps."""
import torch
from torch import nn
from torch.utils.data import Dataset

BATCH_SIZE = 8


def model():
    return nn.Sequential(nn.Linear(16, 12), nn.Tanh(), nn.Linear(12, 4))


def example_inputs(batch_size):
    return (torch.randn(batch_size, 16),)


class Vectors(Dataset):
    def __len__(self):
        return 96

    def __getitem__(self, index):
        if not 0 <= index < len(self):
            raise IndexError(index)
        vector = torch.randn(16, generator=torch.Generator().manual_seed(500 + index))
        return vector, (7 * index) % 4


def dataset(split="train"):
    return Vectors()
