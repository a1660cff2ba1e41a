"""The contract every operator type fulfils, and the registry of op types.

An op type knows, for an op of its type: the shapes of its outputs, its partition
space (the dims a parallel config splits, each labelled sample/attribute/parameter as
in the FlexFlow paper's Table 2), its parameters and which space dim splits each
parameter dim, which region of each input an output block needs (conv/pool include the
halo), which region of each output a block of the space covers, and the FLOPs of a
block. Memory traffic is derived from the regions, so it has one source of truth.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from flextui.errors import GraphError
from flextui.graph.dims import Dim, DimKind
from flextui.graph.region import Region

if TYPE_CHECKING:
    from flextui.graph.op import Op


@dataclass(frozen=True)
class ParamSpec:
    """A parameter an op type needs: its role, shape, and for each of its dims the
    index of the space dim that splits it (None: that dim is never split, so blocks
    of the op along other dims hold replicas)."""

    role: str
    shape: tuple[int, ...]
    dim_map: tuple[int | None, ...]


class OpType:
    """Base class of op types; subclasses are stateless singletons."""

    name: ClassVar[str]
    #: backward FLOPs over forward FLOPs: 2 when both input and weight gradients are
    #: computed by a contraction, 1 for elementwise ops.
    backward_factor: ClassVar[float] = 1.0

    def check(self, op: Op) -> None:
        """Raise GraphError when the inputs or attributes do not fit this op type."""

    def infer(self, op: Op) -> list[tuple[tuple[int, ...], str]]:
        """Shapes and dtypes of the outputs."""
        raise NotImplementedError

    def space(self, op: Op) -> tuple[Dim, ...]:
        """The partition space; by default the dims of the (first) output."""
        return elementwise_space(op.outputs[0].shape)

    def params(self, op: Op) -> list[ParamSpec]:
        return []

    def input_regions(self, op: Op, region: Region) -> list[Region]:
        raise NotImplementedError

    def output_regions(self, op: Op, region: Region) -> list[Region]:
        return [region for _ in op.outputs]

    def flops(self, op: Op, region: Region) -> float:
        """Forward FLOPs (a multiply-add counts 2) to compute the block ``region``."""
        return 0.0

    def counted_bytes(self, op: Op, region: Region) -> int | None:
        """Bytes the forward of the block ``region`` reads and writes when the op type
        knows them (an opaque region, counted as it ran); None: its operands, parameter
        shards and outputs, once each (``Op.block_bytes``)."""
        return None

    def kernels(self, op: Op, region: Region) -> int:
        """The kernels the forward of a block runs (each costs a launch)."""
        return 1


def elementwise_space(shape: tuple[int, ...], fixed: tuple[int, ...] = ()) -> tuple[Dim, ...]:
    """Dim 0 is the sample dim, the others attribute dims, except ``fixed`` dims."""
    dims = []
    for i, size in enumerate(shape):
        kind = None if i in fixed else (DimKind.SAMPLE if i == 0 else DimKind.ATTRIBUTE)
        dims.append(Dim("sample" if i == 0 else f"d{i}", size, kind))
    return tuple(dims)


def out_size(size: int, kernel: int, stride: int, padding: int, dilation: int = 1) -> int:
    return (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


def window_range(start: int, stop: int, size: int, kernel: int, stride: int,
                 padding: int, dilation: int = 1) -> tuple[int, int]:
    """Input rows that output rows [start, stop) of a sliding window read (the halo)."""
    lo = start * stride - padding
    hi = (stop - 1) * stride - padding + dilation * (kernel - 1) + 1
    return max(lo, 0), min(hi, size)


def pair(value: int | tuple[int, int] | list[int]) -> tuple[int, int]:
    if isinstance(value, int):
        return value, value
    a, b = value
    return int(a), int(b)


def require(cond: bool, op: Op, message: str) -> None:
    """Raise GraphError with ``message`` (cut at 300 characters: it may quote an
    attribute of any size) unless ``cond``."""
    if not cond:
        shown = message if len(message) <= 300 else message[:300] + "..."
        raise GraphError(f"op {op.name!r} ({op.type}): {shown}")


OP_TYPES: dict[str, OpType] = {}


def register(cls: type[OpType]) -> type[OpType]:
    OP_TYPES[cls.name] = cls()
    return cls


def op_type(name: str) -> OpType:
    try:
        return OP_TYPES[name]
    except KeyError:
        known = ", ".join(sorted(OP_TYPES))
        raise GraphError(f"unknown op type {name!r:.60}; known types: {known}") from None
