"""Published peak figures of known GPUs, looked up by the name CUDA reports.

Figures are NVIDIA datasheet numbers per GPU: FP32 is the non-tensor (CUDA core) peak;
FP16/BF16 are *dense* tensor-core peaks (no 2:4 sparsity); memory bandwidth is the HBM/
GDDR peak. GPUs without tensor cores list their plain FP16 rate (or none: the K80 has
no fast FP16, so float16 falls back to the float32 figure). ``tfloat32`` is the dense
TF32 tensor-core peak (Ampere and later), what float32 convolutions reach under torch's
default math mode (``cost.mathmode``).

NVLink: ``nvlink_links`` is how many links a GPU has and ``nvlink_bandwidth`` what one
link moves per direction, by generation: NVLink 1 (P100) 20 GB/s, NVLink 2-4 (V100,
A100, H100/H200) 25 GB/s, NVLink 5 (B200) 50 GB/s. PCIe cards list their NVLink bridge's
links (A100 and H100 PCIe: 12).

An unknown GPU gets :data:`UNKNOWN_GPU`, a deliberately conservative guess, and
``known=False`` so the caller can say so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from flextui.machine.cpus import is_cpu

__all__ = ["GpuFigures", "KNOWN_GPUS", "UNKNOWN_GPU", "lookup_gpu", "device_kind_name",
           "same_device_kind"]

T = 1e12
GB = 1e9


@dataclass(frozen=True)
class GpuFigures:
    pattern: str          # regex searched in the CUDA device name
    label: str            # what the entry describes (datasheet variant)
    float32: float        # FLOP/s
    float16: float | None
    bfloat16: float | None
    mem_bandwidth: float  # bytes/s
    tfloat32: float | None = None          # FLOP/s, dense TF32 tensor cores
    nvlink_links: int = 0                  # NVLink links per GPU (0: none)
    nvlink_bandwidth: float | None = None  # bytes/s per link and direction
    known: bool = True

    def peak_flops(self) -> dict[str, float]:
        flops = {"float32": self.float32}
        if self.float16:
            flops["float16"] = self.float16
        if self.bfloat16:
            flops["bfloat16"] = self.bfloat16
        if self.tfloat32:
            flops["tfloat32"] = self.tfloat32
        return flops


def _g(key: str) -> str:
    """Match ``key`` as a whole model number: A10 matches "A10G" but not "A100"."""
    return rf"(?<![A-Za-z0-9]){key}(?![0-9])"


# Most specific first: the first pattern found in the name wins.
NV1, NV2, NV4, NV5 = 20 * GB, 25 * GB, 25 * GB, 50 * GB   # per link and direction, by generation

KNOWN_GPUS: tuple[GpuFigures, ...] = (
    GpuFigures(_g("GH200"), "GH200 (96 GB HBM3)", 67 * T, 989 * T, 989 * T, 4000 * GB,
               494.5 * T, 18, NV4),
    GpuFigures(_g("B200"), "B200 (HGX)", 75 * T, 2250 * T, 2250 * T, 8000 * GB, 1125 * T, 18, NV5),
    GpuFigures(_g("H200"), "H200 SXM", 67 * T, 989 * T, 989 * T, 4800 * GB, 494.5 * T, 18, NV4),
    GpuFigures(_g("H100") + r".*(PCIe|PCIE)", "H100 PCIe", 51 * T, 756 * T, 756 * T, 2000 * GB,
               378 * T, 12, NV4),
    GpuFigures(_g("H100") + r".*NVL", "H100 NVL", 60 * T, 835 * T, 835 * T, 3900 * GB,
               417.5 * T, 12, NV4),
    GpuFigures(_g("H100"), "H100 SXM", 67 * T, 989 * T, 989 * T, 3350 * GB, 494.5 * T, 18, NV4),
    GpuFigures(_g("A100") + r".*80GB.*(PCIe|PCIE)", "A100 80GB PCIe", 19.5 * T, 312 * T, 312 * T,
               1935 * GB, 156 * T, 12, NV2),
    GpuFigures(_g("A100") + r".*80GB", "A100 SXM4 80GB", 19.5 * T, 312 * T, 312 * T, 2039 * GB,
               156 * T, 12, NV2),
    GpuFigures(_g("A100"), "A100 40GB", 19.5 * T, 312 * T, 312 * T, 1555 * GB, 156 * T, 12, NV2),
    GpuFigures(_g("L40S"), "L40S", 91.6 * T, 362 * T, 362 * T, 864 * GB, 183 * T),
    GpuFigures(_g("L40"), "L40", 90.5 * T, 181 * T, 181 * T, 864 * GB, 90.5 * T),
    GpuFigures(_g("L4"), "L4", 30.3 * T, 121 * T, 121 * T, 300 * GB, 60 * T),
    GpuFigures(_g("A10"), "A10", 31.2 * T, 125 * T, 125 * T, 600 * GB, 62.5 * T),
    GpuFigures(_g("T4"), "T4", 8.1 * T, 65 * T, None, 320 * GB),
    GpuFigures(_g("V100") + r".*(PCIe|PCIE)", "V100 PCIe", 14 * T, 112 * T, None, 900 * GB),
    GpuFigures(_g("V100"), "V100 SXM2", 15.7 * T, 125 * T, None, 900 * GB, None, 6, NV2),
    GpuFigures(_g("P100") + r".*(PCIe|PCIE)", "P100 PCIe 16GB", 9.3 * T, 18.7 * T, None, 732 * GB),
    GpuFigures(_g("P100"), "P100 SXM2", 10.6 * T, 21.2 * T, None, 732 * GB, None, 4, NV1),
    # One GK210 die of a K80 board (what CUDA shows as a device), at boost clock.
    GpuFigures(_g("K80"), "K80 (one GK210 die, boost)", 4.37 * T, None, None, 240 * GB),
)

# A conservative guess for a GPU not in the table (a mid-range card of recent years).
UNKNOWN_GPU = GpuFigures("", "unknown GPU (conservative estimate)", 10 * T, 20 * T, None,
                         300 * GB, known=False)
#: the most NVLink links any GPU above has: a GPU with more lanes than that to its peers
#: reaches them through NVSwitches (``machine.nvtopo``)
MOST_NVLINK_LINKS = max(g.nvlink_links for g in KNOWN_GPUS)


def lookup_gpu(name: str) -> GpuFigures:
    """The figures for a CUDA device name (e.g. ``"NVIDIA A100-SXM4-80GB"``)."""
    for entry in KNOWN_GPUS:
        if re.search(entry.pattern, name):
            return entry
    return UNKNOWN_GPU


def device_kind_name(name: str) -> str:
    """A device kind from a CUDA name: ``"NVIDIA A100-SXM4-80GB"`` -> ``"A100-SXM4-80GB"``."""
    kind = name.strip()
    for prefix in ("NVIDIA ", "Tesla ", "NVIDIA "):
        kind = kind.removeprefix(prefix)
    kind = re.sub(r"\s+", "-", kind.strip())
    return kind or "gpu"


def same_device_kind(kind: str, device_name: str) -> bool:
    """Whether a cluster's device kind (``"H100-SXM"``, ``"cpu"``) names the device
    ``device_name`` is (``"NVIDIA H100 80GB HBM3"``, or a CPU's name as profiles
    record it, ``"cpu: <model>, <n> threads"``): the same kind name, or the same known
    GPU model. Both CPU kinds, the whole machine (``"cpu"``) and one process of several
    (``"cpu-rank"``), are CPUs: which threads a profile was measured with is chosen
    where profiles are looked up (``cost.choose``)."""
    if is_cpu(kind) or is_cpu(device_name):
        return is_cpu(kind) and is_cpu(device_name)
    if kind == device_kind_name(device_name):
        return True
    figures = lookup_gpu(kind)
    return figures.known and figures is lookup_gpu(device_name)
