"""On a fake host "old*" (``fake_ssh.py``): Python there has another torch."""

import torch

torch.__version__ = "1.13.1"
