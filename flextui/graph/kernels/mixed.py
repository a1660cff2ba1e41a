"""A block kernel under mixed precision (``strategy.precision`` bf16): the op computes in
the compute dtype, its float operands and its parameters' blocks cast to it as it reads
them (autograd casts the gradients back: a float32 parameter gets a float32 gradient);
an op that computes a loss computes it in the master dtype, as torch's autocast runs
losses in float32, and hands on its outputs in the compute dtype. The runtime's ranks
and its one-process reference both run blocks through here, so they cast alike."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from flextui.graph.kernels.base import Kernel, kernel_for
from flextui.graph.op import Op
from flextui.graph.region import Region


@dataclass(frozen=True)
class Mixed:
    compute: torch.dtype   # what ops compute in, and activations are kept and sent in
    master: torch.dtype    # what parameters are kept in, and losses computed in


def computes_loss(kernel: Kernel) -> bool:
    return type(kernel).forward_loss is not Kernel.forward_loss


def forward_loss(op: Op, region: Region, inputs: Sequence[torch.Tensor],
                 params: Sequence[torch.Tensor], seed: int, mixed: Mixed | None,
                 ) -> tuple[list[torch.Tensor], torch.Tensor | None]:
    """``op``'s kernel's ``forward_loss`` on the block, under ``mixed`` when given."""
    kernel = kernel_for(op.type)
    if mixed is None:
        return kernel.forward_loss(op, region, list(inputs), list(params), seed)
    to = mixed.master if computes_loss(kernel) else mixed.compute
    outputs, loss = kernel.forward_loss(op, region, [_cast(t, to) for t in inputs],
                                        [_cast(p, to) for p in params], seed)
    return [_cast(t, mixed.compute) for t in outputs], loss


def _cast(tensor: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return tensor.to(dtype) if tensor.is_floating_point() else tensor
