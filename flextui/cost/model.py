"""The CostModel protocol: what the simulator asks of any source of task times."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from flextui.graph import Op
from flextui.machine import Device, Link


@dataclass(frozen=True)
class OpCost:
    """Time of one task (a block of an op) on one device, and its scratch memory."""

    forward_s: float
    backward_s: float
    workspace_bytes: int = 0


def sgd_update_s(nbytes: float, device: Device) -> float:
    """Optimizer step (SGD with momentum): read weight, gradient and momentum, write
    weight and momentum — five passes over the shard at memory bandwidth. What a cost
    model without an ``update_s`` of its own charges."""
    return 5 * nbytes / device.spec.mem_bandwidth


@runtime_checkable
class CostModel(Protocol):
    """Any object with these methods can drive the simulator; tests use hand-written
    ones with fixed times. ``identity`` names the model in search logs."""

    @property
    def identity(self) -> str: ...

    def op_cost(self, op: Op, block_shape: tuple[int, ...], device: Device) -> OpCost: ...

    def transfer_s(self, nbytes: int, link: Link) -> float: ...
