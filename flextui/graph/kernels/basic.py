"""Kernels of the structural and elementwise ops: input, unary, binary, concat, split,
reshape."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from flextui.graph.kernels.base import Kernel, register
from flextui.graph.kernels.positional import block_hash, key_of
from flextui.graph.op import Op
from flextui.graph.region import Region

#: unary functions (of the input and the op's attrs) other than dropout, which needs the
#: block's position
_UNARY: dict[str, Callable[[torch.Tensor, dict[str, Any]], torch.Tensor]] = {
    "relu": lambda x, _: F.relu(x),
    "gelu": lambda x, attrs: F.gelu(x, approximate=attrs.get("approximate", "none")),
    "tanh": lambda x, _: torch.tanh(x),
    "sigmoid": lambda x, _: torch.sigmoid(x),
    "identity": lambda x, _: x,
    "scale": lambda x, attrs: x * attrs["factor"],
    "shift": lambda x, attrs: x + attrs["offset"],
    "pow": lambda x, attrs: x ** attrs["exponent"],
    "silu": lambda x, _: F.silu(x),
    "neg": lambda x, _: -x,
    "rsqrt": lambda x, _: torch.rsqrt(x),
}
_BINARY: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul}


@register
class InputKernel(Kernel):
    """An input op is fed, not computed: its one operand is the data block of its own
    output region (from the data loader, or random for profiling), passed through."""

    name = "input"

    def operands(self, op):
        return op.outputs

    def operand_regions(self, op, region):
        return op.output_regions(region)

    def forward(self, op, region, inputs, params, seed):
        return [inputs[0]]


@register
class UnaryKernel(Kernel):
    name = "unary"

    def forward(self, op, region, inputs, params, seed):
        fn = op.attrs["fn"]
        if fn == "dropout":
            return [dropout(inputs[0], op, region, seed)]
        return [_UNARY[fn](inputs[0], op.attrs)]


def dropout(x: torch.Tensor, op: Op, region: Region, seed: int) -> torch.Tensor:
    """Training-mode dropout with probability ``op.attrs["p"]`` (default 0.5, torch's).

    Whether an element is dropped depends only on ``seed``, the op's name and the
    element's position in the whole tensor (``positional``), never on how the op is
    split, so blocks assemble to exactly the whole op's result."""
    p = float(op.attrs.get("p", 0.5))
    if p == 0.0:
        return x
    key = key_of(op.name, seed)
    keep = block_hash(region, op.outputs[0].shape, key, x.device) >= int(p * 2**32)
    return x * keep / (1.0 - p)


@register
class BinaryKernel(Kernel):
    """Size-1 dims of either input broadcast (their blocks keep size 1)."""

    name = "binary"

    def forward(self, op, region, inputs, params, seed):
        return [_BINARY[op.attrs["fn"]](*inputs)]


@register
class ConcatKernel(Kernel):
    name = "concat"

    def forward(self, op, region, inputs, params, seed):
        join = torch.stack if op.attrs.get("stack") else torch.cat
        return [join(list(inputs), op.attrs["axis"])]


@register
class SplitKernel(Kernel):
    name = "split"

    def forward(self, op, region, inputs, params, seed):
        return list(torch.split(inputs[0], op.attrs["sizes"], op.attrs["axis"]))


@register
class ReshapeKernel(Kernel):
    """Only the batch dim is split, so a block reshapes its own samples."""

    name = "reshape"

    def forward(self, op, region, inputs, params, seed):
        x = inputs[0]
        return [x.reshape((x.shape[0], *op.attrs["shape"][1:]))]
