"""A two-layer perceptron with its own data: dataset(split) gives 40 training items
(and 16 for "val"), each an 8x8 image and its class, made from the item's index. With
FLEXTUI_TEST_DATA_LOG set to a directory, every item read is recorded in a file per
process (named by torchrun's RANK, else "launcher"): the item's index and the PID
that read it, so a test sees who read what, and that no reader outlives its launch."""
import os

import torch
from torch import nn
from torch.utils.data import Dataset

BATCH_SIZE = 8
LENGTHS = {"train": 40, "val": 16}


def model():
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))


def example_inputs(batch_size):
    return (torch.randn(batch_size, 1, 8, 8),)


class Digits(Dataset):
    def __init__(self, split):
        self.split = split

    def __len__(self):
        return LENGTHS[self.split]

    def __getitem__(self, index):
        if not 0 <= index < len(self):
            raise IndexError(index)
        log = os.environ.get("FLEXTUI_TEST_DATA_LOG")
        if log:
            who = os.environ.get("RANK", "launcher")
            with open(os.path.join(log, f"{self.split}-{who}.txt"), "a") as f:
                f.write(f"{index} {os.getpid()}\n")
        image = torch.randn(1, 8, 8, generator=torch.Generator().manual_seed(1000 + index))
        return image, (3 * index) % 10


def dataset(split="train"):
    return Digits(split)
