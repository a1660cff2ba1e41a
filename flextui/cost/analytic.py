"""A roofline cost model computed from the device spec, so everything works with no GPU.

A task takes max(FLOPs / (peak x compute efficiency), bytes / (bandwidth x memory
efficiency)) plus a launch overhead per kernel it runs (one, but for an opaque region);
the peak is that of the op's dtype, and for float32 ops torch runs on TF32 tensor cores
by default (convolutions: ``cost.mathmode``) the device's ``tfloat32`` peak where it
gives one, as profiles measured on it find;
backward uses the op type's backward FLOPs and twice the forward bytes (it reads the
forward's inputs and the output gradient and writes input and weight gradients). Graph
inputs cost nothing (data loading is not modelled). A transfer over a link takes latency
+ bytes / bandwidth (paper assumption A2).
"""

from __future__ import annotations

import re
import weakref
from dataclasses import dataclass, field

from flextui.cost.mathmode import DEFAULT_FP32_MATH, uses_tf32
from flextui.cost.model import CostModel, LinkTerms, OpCost
from flextui.errors import FlextuiError
from flextui.graph import Op
from flextui.machine import Device, Link

IDENTITY_PREFIX = "analytic-roofline-v1"
_NUMBER = r"([0-9.eE+-]+)"
_IDENTITY = re.compile(re.escape(IDENTITY_PREFIX) + r"\(compute_efficiency=" + _NUMBER
                       + r",memory_efficiency=" + _NUMBER
                       + r",launch_overhead_s=" + _NUMBER + r"\)")


def peak_name(op: Op) -> str:
    """Which of a device's peaks ``op`` computes at: its dtype's, or ``tfloat32`` for a
    float32 op that runs on TF32 tensor cores in torch's default math mode."""
    dtype = str(op.outputs[0].dtype)
    if dtype == "float32" and uses_tf32(op.type, DEFAULT_FP32_MATH):
        return "tfloat32"
    return dtype


@dataclass
class AnalyticCostModel(CostModel):
    compute_efficiency: float = 0.6
    memory_efficiency: float = 0.8
    launch_overhead_s: float = 5e-6
    _memo: weakref.WeakKeyDictionary = field(default_factory=weakref.WeakKeyDictionary,
                                             repr=False, compare=False)

    def __post_init__(self) -> None:
        """Efficiencies are fractions of the peak, from 0.001 to 1; the overhead is from
        0 to 1 s. Checked here, so a model rebuilt from a hand-edited search log never
        divides by 0 or makes infinite times."""
        for name, low, high in (("compute_efficiency", 1e-3, 1.0),
                                ("memory_efficiency", 1e-3, 1.0),
                                ("launch_overhead_s", 0.0, 1.0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not low <= value <= high:
                raise FlextuiError(f"analytic cost model: {name} must be a number from "
                                   f"{low:g} to {high:g}, found {value!r:.40}")
            setattr(self, name, float(value))

    @property
    def identity(self) -> str:
        """Names the model and its parameters; ``from_identity`` rebuilds it (replay and
        search workers do, so a search log needs no code to be re-simulated)."""
        return (f"{IDENTITY_PREFIX}(compute_efficiency={self.compute_efficiency!r},"
                f"memory_efficiency={self.memory_efficiency!r},"
                f"launch_overhead_s={self.launch_overhead_s!r})")

    @classmethod
    def from_identity(cls, identity: str) -> AnalyticCostModel | None:
        """The model an ``identity`` string names, or None if it is not this model's;
        FlextuiError if it is this model's but damaged."""
        if not identity.startswith(IDENTITY_PREFIX + "("):
            return None
        match = _IDENTITY.fullmatch(identity)
        try:
            values = [float(v) for v in match.groups()] if match else None
        except ValueError:
            values = None
        if values is None:
            raise FlextuiError(f"cost model {identity[:120]!r}: its parameters are not "
                               f"{IDENTITY_PREFIX}(compute_efficiency=N,memory_efficiency=N,"
                               "launch_overhead_s=N) with numbers N; the search log is damaged")
        compute, memory, overhead = values
        return cls(compute, memory, overhead)

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
        peak = device.spec.flops_for(peak_name(op)) * self.compute_efficiency
        bandwidth = device.spec.mem_bandwidth * self.memory_efficiency
        launches = self.launch_overhead_s * op.kind.kernels(op, region)
        forward = max(fwd_flops / peak, nbytes / bandwidth) + launches
        backward = max(bwd_flops / peak, 2 * nbytes / bandwidth) + launches
        return OpCost(forward, backward)

    def transfer_s(self, nbytes: int, link: Link) -> float:
        return link.transfer_time(nbytes)

    def transfer_terms(self, link: Link) -> LinkTerms:
        return LinkTerms(link.latency, link.bandwidth)   # Link.transfer_time's terms
