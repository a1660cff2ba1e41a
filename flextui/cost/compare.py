"""How measured task times compare with the analytic model's, per op type."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from flextui.cost.analytic import AnalyticCostModel
from flextui.cost.cache import ProfileCache
from flextui.cost.cpu_threads import threads_of
from flextui.cost.signatures import TaskSignature
from flextui.machine import Device, DeviceSpec
from flextui.machine.detect import cpu_peak_flops, detect_local
from flextui.machine.gpus import device_kind_name, lookup_gpu, same_device_kind


@dataclass
class OpTypeComparison:
    """Totals over the measured tasks of one op type (seconds)."""

    op_type: str
    tasks: int = 0
    oom: int = 0
    measured_forward_s: float = 0.0
    analytic_forward_s: float = 0.0
    measured_backward_s: float = 0.0
    analytic_backward_s: float = 0.0

    @property
    def forward_ratio(self) -> float | None:
        if not self.analytic_forward_s:
            return None
        return self.measured_forward_s / self.analytic_forward_s

    @property
    def backward_ratio(self) -> float | None:
        return (self.measured_backward_s / self.analytic_backward_s
                if self.analytic_backward_s else None)


def reference_device(device_name: str) -> Device:
    """A device of the kind a profile was measured on, with the figures the analytic
    model uses: this machine's, when it has that kind (a CPU's peak that of the threads
    the profile was measured with); else the GPU's datasheet."""
    for device in detect_local().devices:
        if same_device_kind(device.spec.kind, device_name):
            threads = threads_of(device_name)
            if threads is None:
                return device
            return replace(device, spec=replace(
                device.spec, peak_flops={"float32": cpu_peak_flops(threads)}))
    figures = lookup_gpu(device_name)
    spec = DeviceSpec(device_kind_name(device_name), 1, figures.peak_flops(), figures.mem_bandwidth)
    return Device(0, device_name, 0, spec)


def compare_with_analytic(signatures: Sequence[TaskSignature], cache: ProfileCache,
                          device: Device, analytic: AnalyticCostModel | None = None,
                          ) -> list[OpTypeComparison]:
    """Per op type, the measured and analytic times of the signatures the cache has,
    the op types with the most measured time first."""
    analytic = analytic or AnalyticCostModel()
    rows: dict[str, OpTypeComparison] = {}
    for signature in signatures:
        entry = cache.get(signature.key)
        if entry is None:
            continue
        row = rows.setdefault(signature.op.type, OpTypeComparison(signature.op.type))
        if entry.oom:
            row.oom += 1
            continue
        model = analytic.op_cost(signature.op, signature.block, device)
        assert entry.forward_s is not None  # ProfileEntry: only an oom entry has none
        row.tasks += 1
        row.measured_forward_s += entry.forward_s
        row.analytic_forward_s += model.forward_s
        if entry.backward_s is not None:
            row.measured_backward_s += entry.backward_s
            row.analytic_backward_s += model.backward_s
    return sorted(rows.values(), key=lambda r: -(r.measured_forward_s + r.measured_backward_s))
