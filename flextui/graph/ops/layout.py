"""Op types that move values rather than compute them: slice (a range of one axis, or
one index of it), transpose (two non-batch axes swapped) and parameter (a weight the
model reads as data, such as ViT's class token, broadcast over the batch)."""

from __future__ import annotations

from flextui.graph.ops.base import OpType, ParamSpec, elementwise_space, register, require


@register
class Slice(OpType):
    """Elements ``start`` to ``stop`` of ``axis`` (not the batch); with ``squeeze`` one
    element (stop = start + 1) and the axis dropped (``x[:, 0]``). Every output dim
    is parallel: a block reads the same block of the input, moved by ``start``."""

    name = "slice"

    def check(self, op):
        require(len(op.inputs) == 1, op, "takes one input")
        shape, axis = op.inputs[0].shape, op.attrs["axis"]
        start, stop = op.attrs["start"], op.attrs["stop"]
        require(1 <= axis < len(shape), op, f"axis {axis} is not a non-batch axis of "
                                            f"{list(shape)}")
        require(0 <= start < stop <= shape[axis], op,
                f"[{start}, {stop}) is not a range of axis {axis} ({shape[axis]})")
        require(not op.attrs.get("squeeze") or stop == start + 1, op,
                "squeeze takes one element")

    def infer(self, op):
        shape, axis = op.inputs[0].shape, op.attrs["axis"]
        size = op.attrs["stop"] - op.attrs["start"]
        kept = () if op.attrs.get("squeeze") else (size,)
        return [(shape[:axis] + kept + shape[axis + 1:], op.inputs[0].dtype)]

    def input_regions(self, op, region):
        axis, start = op.attrs["axis"], op.attrs["start"]
        if op.attrs.get("squeeze"):
            return [region[:axis] + ((start, start + 1),) + region[axis:]]
        lo, hi = region[axis]
        return [region[:axis] + ((lo + start, hi + start),) + region[axis + 1:]]


@register
class Transpose(OpType):
    """Swap axes ``dims`` (two non-batch axes): ``x.transpose(1, 2)``."""

    name = "transpose"

    def check(self, op):
        require(len(op.inputs) == 1, op, "takes one input")
        a, b = op.attrs["dims"]
        rank = len(op.inputs[0].shape)
        require(1 <= a < b < rank, op, f"dims {[a, b]} are not two non-batch axes, in "
                                       f"order, of a rank-{rank} input")

    def infer(self, op):
        a, b = op.attrs["dims"]
        shape = list(op.inputs[0].shape)
        shape[a], shape[b] = shape[b], shape[a]
        return [(tuple(shape), op.inputs[0].dtype)]

    def input_regions(self, op, region):
        a, b = op.attrs["dims"]
        swapped = list(region)
        swapped[a], swapped[b] = region[b], region[a]
        return [tuple(swapped)]


@register
class Parameter(OpType):
    """A weight read as data, the same for every sample: ``shape`` ([1, ...] or
    without the batch dim) broadcast to ``[batch, ...]``. Its non-batch dims split the
    weight; blocks of samples hold replicas."""

    name = "parameter"

    def check(self, op):
        require(not op.inputs, op, "takes no input")
        require(op.attrs["batch"] >= 1 and len(op.attrs["shape"]) >= 1, op,
                "needs a batch and a weight's shape")

    def infer(self, op):
        shape = tuple(op.attrs["shape"])
        rows = shape[1:] if op.attrs.get("leading_one") else shape
        return [((op.attrs["batch"], *rows), "float32")]

    def space(self, op):
        return elementwise_space(op.outputs[0].shape)

    def params(self, op):
        shape = tuple(op.attrs["shape"])
        lead = (None,) if op.attrs.get("leading_one") else ()
        rest = tuple(range(1, len(op.outputs[0].shape)))
        return [ParamSpec("weight", shape, lead + rest)]

    def input_regions(self, op, region):
        return []
