"""Whether a device is a CPU: the one place that knows.

Device kinds are open (a cluster file names its GPUs as it likes: "P100", "H100-SXM"),
but the CPU kinds are a closed set flextui makes itself (``machine.detect``): the whole
machine as one device, and one process of several. What was measured on a CPU is named
after it: a profile by ``"cpu: <model>, <n> threads"`` (``cost.cpu_threads``), a
communication calibration by the kind (``"cpu"``). ``is_cpu`` answers for both, and
``DeviceSpec.is_cpu`` for a cluster's devices; nothing else compares names with "cpu".
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["CPU_NAME_PREFIX", "CpuKind", "is_cpu"]


class CpuKind(StrEnum):
    MACHINE = "cpu"        # this machine as one device (``local`` without a GPU)
    RANK = "cpu-rank"      # one process of several (``local-cpu-N``, ``cpu-HxN``)


#: how the name of a CPU a profile was measured on begins
CPU_NAME_PREFIX = "cpu: "
_KINDS = frozenset(k.value for k in CpuKind)


def is_cpu(kind_or_name: str) -> bool:
    """Whether a device kind (``"cpu-rank"``, ``"A100-SXM4-80GB"``) or the name of a
    device something was measured on (``"cpu: <model>, 4 threads"``, ``"NVIDIA H100 80GB
    HBM3"``) is a CPU's."""
    return kind_or_name in _KINDS or kind_or_name.startswith(CPU_NAME_PREFIX.rstrip())
