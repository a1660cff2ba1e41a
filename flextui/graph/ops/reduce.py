"""Op types of normalisations written out op by op (RMSNorm: ``x * rsqrt(mean(x**2) +
eps) * weight``): a mean over the last dim, and a multiplication by a weight per
channel."""

from __future__ import annotations

from flextui.graph.dims import Dim, DimKind
from flextui.graph.ops.base import OpType, ParamSpec, elementwise_space, register, require
from flextui.graph.region import region_volume


@register
class Mean(OpType):
    """The mean over the last dim, kept as a dim of size 1 (``x.mean(-1,
    keepdim=True)``); the other dims are parallel."""

    name = "mean"

    def check(self, op):
        require(len(op.inputs) == 1 and op.inputs[0].rank >= 2, op,
                "takes one input of rank >= 2")

    def infer(self, op):
        return [(op.inputs[0].shape[:-1] + (1,), op.inputs[0].dtype)]

    def space(self, op):
        return elementwise_space(op.outputs[0].shape[:-1]) + (Dim("one", 1, None),)

    def input_regions(self, op, region):
        return [region[:-1] + ((0, op.inputs[0].shape[-1]),)]

    def flops(self, op, region):
        return float(region_volume(region) * op.inputs[0].shape[-1])


@register
class ChannelMul(OpType):
    """``x * weight``, the weight one value per channel of the last dim (an RMSNorm's
    scale); splitting the channels splits the weight."""

    name = "channel_mul"

    def check(self, op):
        require(len(op.inputs) == 1 and op.inputs[0].rank >= 2, op,
                "takes one input of rank >= 2")

    def infer(self, op):
        return [(op.inputs[0].shape, op.inputs[0].dtype)]

    def space(self, op):
        shape = op.outputs[0].shape
        return elementwise_space(shape[:-1]) + (Dim("channel", shape[-1], DimKind.PARAMETER),)

    def params(self, op):
        return [ParamSpec("weight", (op.inputs[0].shape[-1],), (op.inputs[0].rank - 1,))]

    def input_regions(self, op, region):
        return [region]

    def flops(self, op, region):
        return float(region_volume(region))
