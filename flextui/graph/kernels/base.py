"""The contract every block kernel fulfils, and the registry of kernels.

A kernel computes one task's output blocks of an op with torch: the block ``region``
of the op's partition space, from the blocks of its inputs that the region reads
(``Op.input_regions``, halos included) and the shards of its parameters
(``Op.param_region``). Kernels are stateless singletons, one per op type, keyed by the
op type's name like ``flextui.graph.ops.OP_TYPES``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

import torch

from flextui.errors import GraphError
from flextui.graph.region import Region

if TYPE_CHECKING:
    from flextui.graph.op import Op
    from flextui.graph.tensor import Tensor as GraphTensor

Tensors = Sequence[torch.Tensor]


class Kernel:
    """Base class of kernels. Subclasses implement ``forward``; loss ops override
    ``forward_loss`` instead, so the outputs and the loss share one computation."""

    name: ClassVar[str]
    #: whether the op passes an integer input's values on unchanged (a slice of the
    #: labels), so the ops that read its output bound them
    passes_indices: ClassVar[bool] = False

    def forward(self, op: Op, region: Region, inputs: Tensors, params: Tensors,
                seed: int) -> list[torch.Tensor]:
        """The output blocks of ``region`` (``seed`` drives stochastic ops only)."""
        return self.forward_loss(op, region, inputs, params, seed)[0]

    def forward_loss(self, op: Op, region: Region, inputs: Tensors, params: Tensors,
                     seed: int) -> tuple[list[torch.Tensor], torch.Tensor | None]:
        """The output blocks and the block's share of the training loss (None for ops
        that are not losses)."""
        return self.forward(op, region, inputs, params, seed), None

    def operands(self, op: Op) -> tuple[GraphTensor, ...]:
        """The graph tensors whose blocks ``forward`` takes: the op's inputs."""
        return op.inputs

    def operand_regions(self, op: Op, region: Region) -> list[Region]:
        """The region of each operand that the block ``region`` reads."""
        return op.input_regions(region)

    def index_bound(self, op: Op, i: int) -> int:
        """Integer operand ``i`` holds values in ``[0, bound)`` (ids below the table
        size, labels below the class count); {0, 1} where the op sets no range."""
        return 2


KERNELS: dict[str, Kernel] = {}


def register(cls: type[Kernel]) -> type[Kernel]:
    KERNELS[cls.name] = cls()
    return cls


def kernel_for(op_type_name: str) -> Kernel:
    """The kernel of op type ``op_type_name``; GraphError when there is none."""
    try:
        return KERNELS[op_type_name]
    except KeyError:
        known = ", ".join(sorted(KERNELS))
        raise GraphError(f"no kernel for op type {op_type_name!r}; kernels exist for: "
                         f"{known}") from None
