"""ParallelConfig: how one op is split into tasks and where each task runs (paper 4)."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import cached_property

from flextui.errors import StrategyError
from flextui.graph import Op, Region


@dataclass(frozen=True)
class ParallelConfig:
    """A degree for every dim of the op's partition space (1 for dims it does not
    split) and a device id for each of the ``prod(degrees)`` tasks; with ``recompute``
    the op keeps no activation between its passes and its backward tasks re-run their
    forward blocks first (activation checkpointing, op by op).

    Tasks are numbered in row-major order over the degrees: task ``k`` computes the
    block whose index along dim ``i`` is ``task_index(k)[i]``. Partitions are equal,
    so every degree divides its dim.
    """

    degrees: tuple[int, ...]
    devices: tuple[int, ...]
    recompute: bool = False

    @property
    def num_tasks(self) -> int:
        return math.prod(self.degrees)

    def task_index(self, k: int) -> tuple[int, ...]:
        index = []
        for degree in reversed(self.degrees):
            k, i = divmod(k, degree)
            index.append(i)
        return tuple(reversed(index))

    def task_region(self, op: Op, k: int) -> Region:
        """The block of ``op``'s partition space that task ``k`` computes."""
        return tuple((i * (d.size // n), (i + 1) * (d.size // n))
                     for i, n, d in zip(self.task_index(k), self.degrees, op.space))

    def regions(self, op: Op) -> list[Region]:
        """Every task's block, in task order (``task_region`` of each, built per dim)."""
        per_dim = [[(i * (d.size // n), (i + 1) * (d.size // n)) for i in range(n)]
                   for n, d in zip(self.degrees, op.space)]
        return list(itertools.product(*per_dim))

    def block_shape(self, op: Op) -> tuple[int, ...]:
        """Every task's block has this shape (partitions are equal)."""
        return tuple(d.size // n for n, d in zip(self.degrees, op.space))

    def with_recompute(self, recompute: bool) -> ParallelConfig:
        """This split, with or without recomputation."""
        return self if recompute == self.recompute else \
            ParallelConfig(self.degrees, self.devices, recompute)

    @cached_property
    def split(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(degrees, devices): what the op's blocks, their places and so its transfers
        and replica groups depend on; recomputation changes none of them."""
        return self.degrees, self.devices

    @cached_property
    def distinct_devices(self) -> tuple[int, ...]:
        return tuple(sorted(set(self.devices)))

    def check(self, op: Op, num_devices: int) -> None:
        """Raise StrategyError unless this config fits ``op`` on ``num_devices`` devices."""
        where = f"op {op.name!r}"
        if len(self.degrees) != len(op.space):
            raise StrategyError(f"{where}: {len(self.degrees)} degrees given, but its space has "
                                f"{len(op.space)} dims ({', '.join(d.name for d in op.space)})")
        for degree, dim in zip(self.degrees, op.space):
            if degree < 1:
                raise StrategyError(f"{where}: degree {degree} for dim {dim.name!r} must be >= 1")
            if degree > 1 and not dim.parallel:
                raise StrategyError(f"{where}: dim {dim.name!r} cannot be partitioned; "
                                    "give it degree 1")
            if dim.splits % degree:
                raise StrategyError(f"{where}: degree {degree} does not divide dim {dim.name!r} "
                                    f"(size {dim.size}); use one of {list(dim.valid_degrees())}")
        if len(self.devices) != self.num_tasks:
            raise StrategyError(f"{where}: {self.num_tasks} tasks (degrees {list(self.degrees)}) "
                                f"but {len(self.devices)} devices given")
        if self.recompute and op.type == "input":
            raise StrategyError(f"{where}: a graph input has no backward pass to recompute "
                                "in; drop its \"recompute\"")
        bad = [d for d in self.devices if not 0 <= d < num_devices]
        if bad:
            raise StrategyError(f"{where}: device {bad[0]} out of range; the cluster has devices "
                                f"0..{num_devices - 1}")


def replicated(op: Op, device: int = 0) -> ParallelConfig:
    """The whole op as one task on ``device``."""
    return ParallelConfig((1,) * len(op.space), (device,))
