"""An operator node of the graph."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from flextui.graph.dims import Dim
from flextui.graph.ops import OpType, ParamSpec, op_type
from flextui.graph.region import Region, full_region, region_volume
from flextui.graph.tensor import Parameter, Tensor, dtype_bytes


@dataclass(eq=False)
class Op:
    """One operator: its type, attributes, inputs, outputs and parameters.

    ``space`` lists the dims a parallel config partitions (see ``flextui.graph.dims``);
    ``param_specs[i]`` says how ``params[i]`` is split along them. ``index`` is the
    op's position in the graph's topological order.
    """

    name: str
    type: str
    attrs: dict[str, Any]
    inputs: tuple[Tensor, ...]
    index: int = 0
    layer: str = ""
    #: the key under which this op shares its parameters with others, or None
    shared: str | None = None
    outputs: tuple[Tensor, ...] = ()
    params: tuple[Parameter, ...] = ()
    param_specs: tuple[ParamSpec, ...] = ()
    space: tuple[Dim, ...] = field(default=())

    @property
    def kind(self) -> OpType:
        return op_type(self.type)

    @property
    def parallel_dims(self) -> tuple[int, ...]:
        return tuple(i for i, d in enumerate(self.space) if d.parallel)

    @property
    def space_shape(self) -> tuple[int, ...]:
        return tuple(d.size for d in self.space)

    def input_regions(self, region: Region) -> list[Region]:
        """The region of each input that the output block ``region`` reads."""
        return self.kind.input_regions(self, region)

    def output_regions(self, region: Region) -> list[Region]:
        """The region of each output that the block ``region`` of the space writes."""
        return self.kind.output_regions(self, region)

    def param_region(self, i: int, region: Region) -> Region:
        """The shard of parameter ``i`` that the block ``region`` uses."""
        spec = self.param_specs[i]
        return tuple(full if dim is None else _scale(region[dim], self.space[dim].size, size)
                     for dim, size, full in zip(spec.dim_map, spec.shape, full_region(spec.shape)))

    def flops(self, region: Region) -> tuple[float, float]:
        """Forward and backward FLOPs of the block ``region``."""
        fwd = self.kind.flops(self, region)
        return fwd, fwd * self.kind.backward_factor

    def block_bytes(self, region: Region) -> int:
        """Bytes a forward task reads and writes: what the op type counted, else its
        input regions, parameter shards and output regions."""
        counted = self.kind.counted_bytes(self, region)
        if counted is not None:
            return counted
        total = sum(region_volume(r) * dtype_bytes(t.dtype)
                    for r, t in zip(self.input_regions(region), self.inputs))
        total += sum(region_volume(r) * dtype_bytes(t.dtype)
                     for r, t in zip(self.output_regions(region), self.outputs))
        total += sum(region_volume(self.param_region(i, region)) * dtype_bytes(p.dtype)
                     for i, p in enumerate(self.params))
        return total

    @property
    def param_count(self) -> int:
        return sum(p.numel for p in self.params)


def _scale(rng: tuple[int, int], space_size: int, param_size: int) -> tuple[int, int]:
    """Map a range of a space dim onto the parameter dim it splits (same size, or a
    whole multiple when the parameter dim is coarser)."""
    start, stop = rng
    return start * param_size // space_size, stop * param_size // space_size
