"""The distinct tasks a profiler must time (paper assumption A1: a task's time depends
only on what it computes, so each distinct task is measured once and reused).

A task is one op's block of a given shape. Two tasks are the same when their profile
keys are: same op type and attributes, same input, parameter and output block shapes,
dtype, mode and device. Blocks are keyed at the origin of the op's space (a conv block
at the top-left corner has a one-sided halo); the simulator asks by block shape alone,
and ``ProfiledCostModel`` looks up the same origin block, so the two always agree.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from flextui.cost.cache_records import ProfileKey
from flextui.graph import DType, Op, OpGraph
from flextui.graph.region import Region
from flextui.strategy import Strategy
from flextui.strategy.enumerate import degree_choices


@dataclass(frozen=True)
class TaskSignature:
    """One distinct task: an op that has it (any of several alike), its block shape and
    the key its profile is cached under."""

    op: Op
    block: tuple[int, ...]
    key: ProfileKey


#: the dtypes a profile may be measured in, by their command-line names
DTYPE_NAMES = {"fp32": DType.FLOAT32, "bf16": DType.BFLOAT16, "fp16": DType.FLOAT16}


@dataclass(frozen=True)
class Measurement:
    """What the timed task is measured as: dtype, mode, the device it runs on, and the
    float32 math mode on a GPU (``cost.mathmode``; "" otherwise)."""

    dtype: str
    training: bool
    device_name: str
    torch_version: str
    math: str = ""

    def key(self, op: Op, block: tuple[int, ...]) -> ProfileKey:
        return ProfileKey.for_task(op, origin_block(block), self.dtype, self.training,
                                   self.device_name, self.torch_version, self.math)


def origin_block(shape: tuple[int, ...]) -> Region:
    """The block of this shape at the origin of the space."""
    return tuple((0, size) for size in shape)


def block_shapes(op: Op, num_devices: int) -> list[tuple[int, ...]]:
    """Every block shape a search over ``num_devices`` devices may give ``op``."""
    return [tuple(d.size // n for n, d in zip(degrees, op.space))
            for degrees in degree_choices(op, num_devices)]


def task_signatures(graph: OpGraph, measurement: Measurement, *, num_devices: int | None = None,
                    strategies: Iterable[Strategy] = ()) -> list[TaskSignature]:
    """The distinct tasks of ``strategies``, and with ``num_devices`` of every config a
    search over that many devices may visit, in the graph's order."""
    wanted: list[tuple[Op, tuple[int, ...]]] = []
    for strategy in strategies:
        wanted += [(op, strategy[op.name].block_shape(op)) for op in graph.ops]
    if num_devices is not None:
        wanted += [(op, shape) for op in graph.ops for shape in block_shapes(op, num_devices)]
    found: dict[bytes, TaskSignature] = {}
    for op, shape in wanted:
        key = measurement.key(op, shape)
        found.setdefault(key.encoded, TaskSignature(op, shape, key))
    return list(found.values())
