"""Structural and elementwise op types: input, unary, binary, concat, split, reshape."""

from __future__ import annotations

import math
from enum import StrEnum

from flextui.graph.dims import Dim, DimKind
from flextui.graph.ops.base import OpType, elementwise_space, register, require
from flextui.graph.region import region_volume
from flextui.graph.tensor import DTYPE_BYTES

#: forward FLOPs per element of each unary function
UNARY_FLOPS = {"relu": 1, "gelu": 8, "tanh": 4, "sigmoid": 4, "dropout": 2, "identity": 0,
               "scale": 1, "shift": 1, "pow": 2, "silu": 5, "neg": 1, "rsqrt": 2}
#: the number each unary function that takes one is given by
UNARY_NUMBERS = {"scale": "factor", "shift": "offset", "pow": "exponent"}
BINARY_FNS = ("add", "sub", "mul")


class InputFill(StrEnum):
    """What an input op holds."""

    DATA = "data"
    POSITIONS = "positions"
    ZEROS = "zeros"


@register
class Input(OpType):
    """A graph input (images, token ids, labels): loaded where its tasks are placed.
    ``attrs["fill"]`` says what it holds (``InputFill``): data, the positions along
    dim 1 (0, 1, 2, ... in every row: what a model's ``torch.arange`` makes), or zeros
    (one token type in every place)."""

    name = "input"

    def check(self, op):
        dtype = op.attrs.get("dtype", "float32")
        require(dtype in DTYPE_BYTES, op,
                f"unknown dtype {dtype!r:.40}; use one of {', '.join(DTYPE_BYTES)}")
        fill = op.attrs.get("fill", InputFill.DATA)
        require(fill in tuple(InputFill), op,
                f"unknown fill {fill!r:.40}; use one of {', '.join(InputFill)}")
        require(fill == InputFill.DATA or len(op.attrs["shape"]) == 2, op,
                f"{fill} are [batch, length]")

    def infer(self, op):
        return [(tuple(op.attrs["shape"]), op.attrs.get("dtype", "float32"))]

    def input_regions(self, op, region):
        return []


@register
class Unary(OpType):
    """An elementwise function (``attrs["fn"]``); gelu takes torch's ``approximate``,
    dropout its ``p``, scale (multiplying by a number) its ``factor``, shift (adding
    one) its ``offset``, pow its ``exponent``."""

    name = "unary"

    def check(self, op):
        require(len(op.inputs) == 1, op, "takes one input")
        require(op.attrs["fn"] in UNARY_FLOPS, op,
                f"unknown function {op.attrs['fn']!r}; use one of {', '.join(UNARY_FLOPS)}")
        require(op.attrs.get("approximate", "none") in ("none", "tanh"), op,
                "gelu's approximate is 'none' or 'tanh'")
        number = UNARY_NUMBERS.get(op.attrs["fn"])
        value = op.attrs.get(number, 1.0) if number else 1.0
        require(isinstance(value, (int, float)) and not isinstance(value, bool), op,
                f"{op.attrs['fn']} takes a number, {number}")

    def infer(self, op):
        return [(op.inputs[0].shape, op.inputs[0].dtype)]

    def input_regions(self, op, region):
        return [region]

    def flops(self, op, region):
        return UNARY_FLOPS[op.attrs["fn"]] * region_volume(region)


@register
class Binary(OpType):
    """Elementwise add/sub/mul of two tensors of one rank; size-1 dims broadcast."""

    name = "binary"

    def check(self, op):
        require(len(op.inputs) == 2, op, "takes two inputs")
        require(op.attrs["fn"] in BINARY_FNS, op, f"fn must be one of {', '.join(BINARY_FNS)}")
        a, b = op.inputs[0].shape, op.inputs[1].shape
        require(len(a) == len(b) and all(x == y or 1 in (x, y) for x, y in zip(a, b)), op,
                f"shapes {a} and {b} do not broadcast (same rank, dims equal or 1)")

    def infer(self, op):
        a, b = op.inputs[0].shape, op.inputs[1].shape
        return [(tuple(max(x, y) for x, y in zip(a, b)), op.inputs[0].dtype)]

    def input_regions(self, op, region):
        return [tuple((0, 1) if size == 1 and out > 1 else r
                      for r, size, out in zip(region, t.shape, op.outputs[0].shape))
                for t in op.inputs]

    def flops(self, op, region):
        return region_volume(region)


@register
class Concat(OpType):
    """Concatenate along ``axis``; with ``stack`` the inputs gain that axis first."""

    name = "concat"

    def check(self, op):
        require(len(op.inputs) >= 1, op, "takes at least one input")
        axis, first = op.attrs["axis"], op.inputs[0].shape
        rank = len(first) + (1 if op.attrs.get("stack") else 0)
        require(0 <= axis < rank, op, f"axis {axis} out of range for rank {rank}")
        for t in op.inputs:
            same = t.shape == first if op.attrs.get("stack") else (
                len(t.shape) == len(first)
                and all(x == y for i, (x, y) in enumerate(zip(t.shape, first)) if i != axis))
            require(same, op, f"input shapes {first} and {t.shape} cannot be concatenated")

    def infer(self, op):
        axis, first = op.attrs["axis"], op.inputs[0].shape
        if op.attrs.get("stack"):
            shape = first[:axis] + (len(op.inputs),) + first[axis:]
        else:
            shape = first[:axis] + (sum(t.shape[axis] for t in op.inputs),) + first[axis + 1:]
        return [(shape, op.inputs[0].dtype)]

    def space(self, op):
        return elementwise_space(op.outputs[0].shape, fixed=(op.attrs["axis"],))

    def input_regions(self, op, region):
        axis = op.attrs["axis"]
        if op.attrs.get("stack"):
            piece = region[:axis] + region[axis + 1:]
            return [piece for _ in op.inputs]
        return [region[:axis] + ((0, t.shape[axis]),) + region[axis + 1:] for t in op.inputs]


@register
class Split(OpType):
    """Split along ``axis`` into pieces of ``sizes``; the space is the input's shape."""

    name = "split"

    def check(self, op):
        require(len(op.inputs) == 1, op, "takes one input")
        axis, sizes = op.attrs["axis"], op.attrs["sizes"]
        shape = op.inputs[0].shape
        require(0 <= axis < len(shape), op, f"axis {axis} out of range for shape {shape}")
        require(sum(sizes) == shape[axis] and all(s > 0 for s in sizes), op,
                f"sizes {sizes} must be positive and add up to {shape[axis]}")

    def infer(self, op):
        axis, shape = op.attrs["axis"], op.inputs[0].shape
        return [(shape[:axis] + (s,) + shape[axis + 1:], op.inputs[0].dtype)
                for s in op.attrs["sizes"]]

    def space(self, op):
        return elementwise_space(op.inputs[0].shape, fixed=(op.attrs["axis"],))

    def input_regions(self, op, region):
        return [region]

    def output_regions(self, op, region):
        axis = op.attrs["axis"]
        return [region[:axis] + ((0, s),) + region[axis + 1:] for s in op.attrs["sizes"]]


@register
class Reshape(OpType):
    """Reshape (flatten included) that keeps dim 0, the batch; only it is parallel."""

    name = "reshape"

    def check(self, op):
        src, dst = op.inputs[0].shape, tuple(op.attrs["shape"])
        require(dst[0] == src[0], op, f"must keep the batch dim: {src} -> {dst}")
        require(math.prod(src) == math.prod(dst), op, f"cannot reshape {src} to {dst}")

    def infer(self, op):
        return [(tuple(op.attrs["shape"]), op.inputs[0].dtype)]

    def space(self, op):
        shape = op.outputs[0].shape
        return (Dim("sample", shape[0], DimKind.SAMPLE),) + tuple(
            Dim(f"d{i}", s, None) for i, s in enumerate(shape[1:], start=1))

    def input_regions(self, op, region):
        return [(region[0],) + tuple((0, s) for s in op.inputs[0].shape[1:])]
