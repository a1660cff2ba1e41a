"""A small U-Net for per-pixel classes: ConvTranspose2d and Upsample (neither mapped op
by op: with --opaque each is an opaque op), torch.cat skips, logits [B, C, H, W].
``model`` returns the logits (flextui adds the per-pixel loss), ``with_loss`` takes the
target [B, H, W] and returns F.cross_entropy, ``pixels`` returns the logits one pixel a
row, [B*H*W, C] (a reshape flextui maps only inside an opaque op)."""

import torch
import torch.nn.functional as F
from torch import nn

BATCH_SIZE = 4
CLASSES, SIZE = 3, 8


def block(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.ReLU())


class UNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.down1, self.down2 = block(3, 4), block(4, 8)
        self.pool = nn.MaxPool2d(2)
        self.mid = block(8, 8)
        self.up2 = nn.ConvTranspose2d(8, 8, 2, stride=2)
        self.dec2 = block(16, 4)
        self.up1 = nn.Upsample(scale_factor=2)
        self.dec1 = block(8, 4)
        self.head = nn.Conv2d(4, CLASSES, 1)

    def forward(self, x):
        d1 = self.down1(x)
        d2 = self.down2(self.pool(d1))
        m = self.mid(self.pool(d2))
        u2 = self.dec2(torch.cat([self.up2(m), d2], dim=1))
        u1 = self.dec1(torch.cat([self.up1(u2), d1], dim=1))
        return self.head(u1)


class WithLoss(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = UNet()

    def forward(self, x, target):
        return F.cross_entropy(self.net(x), target)


class Pixels(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = UNet()

    def forward(self, x):
        return self.net(x).permute(0, 2, 3, 1).reshape(-1, CLASSES)


def model():
    return UNet()


def with_loss():
    return WithLoss()


def pixels():
    return Pixels()


def example_inputs(batch_size):
    return (torch.randn(batch_size, 3, SIZE, SIZE),)
