"""The opaque op: a region of a PyTorch module the importer cannot map op by op
(``--opaque``), run as it is. It is never split, except along the batch when the
region computes each sample on its own (``attrs["batchwise"]``, tested at import);
its parameters are whole on every device that runs it."""

from __future__ import annotations

from flextui.graph.dims import Dim, DimKind
from flextui.graph.ops.base import OpType, ParamSpec, register, require


@register
class Opaque(OpType):
    """attrs: ``nodes`` (the exported graph's nodes it runs; the program they are in is
    given to the op where it runs, ``kernels.opaque``, never named here),
    ``inputs``/``params``/``constants`` (the nodes its inputs, parameters and buffers
    are), ``outputs`` ([node, shape, dtype] each), ``param_shapes``, ``batch``,
    ``batchwise``, and the work its forward does on the whole batch, counted at import:
    ``flops``, ``bytes`` (its kernels' tensors, in and out) and ``kernels``."""

    name = "opaque"
    backward_factor = 2.0

    def check(self, op):
        attrs = op.attrs
        require(len(op.inputs) == len(attrs["inputs"]), op, "one input per input node")
        require(bool(attrs["outputs"]), op, "has no outputs")
        require(len(attrs["params"]) == len(attrs["param_shapes"]), op,
                "one shape per parameter")
        if attrs["batchwise"]:
            require(all(t.shape and t.shape[0] == attrs["batch"] for t in op.inputs), op,
                    "a batch-wise region's inputs all start with the batch dim")

    def infer(self, op):
        return [(tuple(shape), dtype) for _, shape, dtype in op.attrs["outputs"]]

    def space(self, op):
        kind = DimKind.SAMPLE if op.attrs["batchwise"] else None
        return (Dim("sample", op.attrs["batch"], kind),)

    def params(self, op):
        return [ParamSpec(f"p{i}", tuple(shape), (None,) * len(shape))
                for i, shape in enumerate(op.attrs["param_shapes"])]

    def input_regions(self, op, region):
        return [_rows(op, t.shape, region) for t in op.inputs]

    def output_regions(self, op, region):
        return [_rows(op, t.shape, region) for t in op.outputs]

    def flops(self, op, region):
        return float(op.attrs["flops"]) * _share(op, region)

    def counted_bytes(self, op, region):
        return round(op.attrs["bytes"] * _share(op, region))

    def kernels(self, op, region):
        return int(op.attrs["kernels"])


def _share(op, region) -> float:
    """The part of the whole batch a block of the op's space is."""
    (start, stop), = region
    return (stop - start) / op.attrs["batch"]


def _rows(op, shape: tuple[int, ...], region) -> tuple[tuple[int, int], ...]:
    """The part of a tensor of the op the block ``region`` reads or writes: rows
    ``region`` of a batch-wise region's (each starts with the batch dim), the whole of
    any other's (whatever its first dim is: ``[B*H*W, C]`` pixels)."""
    whole = tuple((0, size) for size in shape)
    return (region[0], *whole[1:]) if op.attrs["batchwise"] and shape else whole
