"""A roofline cost model computed from the device spec, so everything works with no GPU.

A task takes max(FLOPs / (peak x compute efficiency), bytes / (bandwidth x memory
efficiency)) plus a kernel launch overhead; backward uses the op type's backward FLOPs
and twice the forward bytes (it reads the forward's inputs and the output gradient
and writes input and weight gradients). Graph inputs cost nothing (data loading is
not modelled). A transfer over a link takes latency + bytes / bandwidth (paper
assumption A2).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

from flextui.cost.model import OpCost
from flextui.graph import Op
from flextui.machine import Device, Link


@dataclass
class AnalyticCostModel:
    compute_efficiency: float = 0.6
    memory_efficiency: float = 0.8
    launch_overhead_s: float = 5e-6
    identity: str = "analytic-roofline-v1"
    _memo: weakref.WeakKeyDictionary = field(default_factory=weakref.WeakKeyDictionary,
                                             repr=False, compare=False)

    def op_cost(self, op: Op, block_shape: tuple[int, ...], device: Device) -> OpCost:
        per_op = self._memo.setdefault(op, {})
        key = (block_shape, device.spec)
        if key not in per_op:
            per_op[key] = self._compute(op, block_shape, device)
        return per_op[key]

    def _compute(self, op: Op, block_shape: tuple[int, ...], device: Device) -> OpCost:
        if op.type == "input":
            return OpCost(0.0, 0.0)
        region = tuple((0, s) for s in block_shape)
        fwd_flops, bwd_flops = op.flops(region)
        nbytes = op.block_bytes(region)
        peak = device.spec.flops_for(op.outputs[0].dtype) * self.compute_efficiency
        bandwidth = device.spec.mem_bandwidth * self.memory_efficiency
        forward = max(fwd_flops / peak, nbytes / bandwidth) + self.launch_overhead_s
        backward = max(bwd_flops / peak, 2 * nbytes / bandwidth) + self.launch_overhead_s
        return OpCost(forward, backward)

    def transfer_s(self, nbytes: int, link: Link) -> float:
        return link.transfer_time(nbytes)
