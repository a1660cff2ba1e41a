"""Kernels of the convolutional-network ops: conv2d, pool2d, batchnorm (NCHW).

A conv or pool block receives its input rows and columns with the halo, clipped to the
tensor (``Op.input_regions``). The op's padding is added back only where the block's
windows reach past a true border of the whole tensor, so interior block edges read
their neighbours' real rows and the blocks assemble to exactly the whole op.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from flextui.graph.kernels.base import Kernel, Tensors, register
from flextui.graph.op import Op
from flextui.graph.ops.base import pair
from flextui.graph.region import Region


def border_pad(start: int, stop: int, size: int, kernel: int, stride: int, padding: int,
               dilation: int = 1) -> tuple[int, int]:
    """Padding rows before and after the input block of output rows [start, stop): the
    part of its windows that lies outside the ``size`` rows of the whole input."""
    first = start * stride - padding
    last = (stop - 1) * stride - padding + dilation * (kernel - 1) + 1
    return max(-first, 0), max(last - size, 0)


def _pad_block(x: torch.Tensor, op: Op, region: Region, value: float = 0.0) -> torch.Tensor:
    """``x`` with the op's padding on the true borders that the block touches."""
    _, _, h, w = op.inputs[0].shape
    (kh, kw), (sh, sw) = pair(op.attrs["kernel"]), pair(op.attrs["stride"])
    (ph, pw), (dh, dw) = pair(op.attrs["padding"]), pair(op.attrs.get("dilation", 1))
    top, bottom = border_pad(*region[2], h, kh, sh, ph, dh)
    left, right = border_pad(*region[3], w, kw, sw, pw, dw)
    return F.pad(x, (left, right, top, bottom), value=value)


@register
class Conv2dKernel(Kernel):
    name = "conv2d"

    def forward(self, op, region, inputs, params, seed):
        weight, bias = params[0], (params[1] if len(params) > 1 else None)
        x = _pad_block(inputs[0], op, region)
        return [F.conv2d(x, weight, bias, pair(op.attrs["stride"]), 0,
                         pair(op.attrs["dilation"]))]


@register
class Pool2dKernel(Kernel):
    """Max pooling pads with -inf; average pooling pads with zeros that count in the
    divisor (torch's default ``count_include_pad=True``). Adaptive pooling follows
    torch's bin edges, one separable pass per spatial dim."""

    name = "pool2d"

    def forward(self, op: Op, region: Region, inputs: Tensors, params: Tensors,
                seed: int) -> list[torch.Tensor]:
        x, mode = inputs[0], op.attrs["mode"]
        if op.attrs.get("output_size"):
            (oh, ow), (_, _, h, w) = pair(op.attrs["output_size"]), op.inputs[0].shape
            x = adaptive_pool_1d(x, 2, *region[2], h, oh, mode)
            return [adaptive_pool_1d(x, 3, *region[3], w, ow, mode)]
        kernel, stride = pair(op.attrs["kernel"]), pair(op.attrs["stride"])
        if mode == "max":
            return [F.max_pool2d(_pad_block(x, op, region, float("-inf")), kernel, stride)]
        return [F.avg_pool2d(_pad_block(x, op, region), kernel, stride)]


def adaptive_pool_1d(x: torch.Tensor, dim: int, start: int, stop: int, size: int, out: int,
                     mode: str) -> torch.Tensor:
    """Adaptive max or average pooling along ``dim`` for output rows [start, stop) of
    ``out`` over ``size`` input rows; ``x`` holds the input rows from the first bin's
    start. Bin ``i`` covers rows [floor(i*size/out), ceil((i+1)*size/out)).

    Every bin is gathered to the widest bin's width by repeating its last row (harmless
    for a max), and averaged with weights that ignore the repeats."""
    offset = start * size // out
    outs = torch.arange(start, stop, device=x.device)
    lo = outs * size // out - offset
    hi = -((-(outs + 1) * size) // out) - offset
    width = int((hi - lo).max())
    index = lo[:, None] + torch.arange(width, device=x.device)
    valid = index < hi[:, None]
    rows = x.index_select(dim, torch.minimum(index, hi[:, None] - 1).flatten())
    rows = rows.unflatten(dim, (stop - start, width))
    if mode == "max":
        return rows.max(dim + 1).values
    weights = valid.to(x.dtype) / valid.sum(1, keepdim=True)
    return (rows * weights.view(weights.shape + (1,) * (x.dim() - dim - 1))).sum(dim + 1)


@register
class BatchNormKernel(Kernel):
    """Training-mode batch normalisation with the statistics of the block's own samples
    (per channel, over samples and positions), as the op type specifies: blocks along
    the sample dim normalise independently, like data parallelism without synchronised
    batchnorm. No running statistics are kept. A block with one value per channel (one
    sample of an NC input) normalises to the bias; ``F.batch_norm`` refuses such input,
    so this calls the ATen op, which computes it. ``eps`` is the op's (torch's 1e-5
    unless it says)."""

    name = "batchnorm"

    def forward(self, op, region, inputs, params, seed):
        weight, bias = params
        eps = float(op.attrs.get("eps", 1e-5))
        return [torch.batch_norm(inputs[0], weight, bias, None, None, True, 0.0, eps,
                                 torch.backends.cudnn.enabled)]
