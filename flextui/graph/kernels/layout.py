"""Kernels of the layout ops (slice, transpose, parameter) and of the op-by-op
normalisation ops (mean, channel_mul)."""

from __future__ import annotations

from flextui.graph.kernels.base import Kernel, register


@register
class SliceKernel(Kernel):
    """The block's input is exactly the slice of its output block (moved by
    ``start``), so the kernel only drops the axis of a one-element slice."""

    name = "slice"
    passes_indices = True

    def forward(self, op, region, inputs, params, seed):
        (x,) = inputs
        return [x.squeeze(op.attrs["axis"]) if op.attrs.get("squeeze") else x]


@register
class TransposeKernel(Kernel):
    name = "transpose"

    def forward(self, op, region, inputs, params, seed):
        return [inputs[0].transpose(*op.attrs["dims"])]


@register
class ParameterKernel(Kernel):
    """The weight's shard broadcast to the block's samples."""

    name = "parameter"

    def forward(self, op, region, inputs, params, seed):
        (weight,) = params
        rows = region[0][1] - region[0][0]
        shard = weight[0] if op.attrs.get("leading_one") else weight
        return [shard.expand(rows, *shard.shape)]


@register
class MeanKernel(Kernel):
    name = "mean"

    def forward(self, op, region, inputs, params, seed):
        return [inputs[0].mean(-1, keepdim=True)]


@register
class ChannelMulKernel(Kernel):
    name = "channel_mul"

    def forward(self, op, region, inputs, params, seed):
        return [params[0] * inputs[0]]
