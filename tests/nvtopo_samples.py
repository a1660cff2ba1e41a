"""`nvidia-smi topo -m` output of real machines, as the tests feed it to detection: which
GPUs they hold (the names CUDA reports) and the NVLink bandwidth each GPU has, per
direction, according to NVIDIA's datasheets."""

import subprocess
from dataclasses import dataclass
from types import SimpleNamespace

from flextui.machine import detect

LEGEND = """
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""


def matrix(cells: list[list[str]], nics: list[list[str]], affinity: list[str]) -> str:
    """The text of a matrix of GPU-to-GPU ``cells`` (the diagonal written for us), each
    GPU's path to the NICs, and its CPU affinity, as nvidia-smi prints it."""
    n, k = len(cells), len(nics[0]) if nics else 0
    head = [f"GPU{i}" for i in range(n)] + [f"NIC{i}" for i in range(k)]
    lines = ["\x1b[4m\t" + "\t".join(head + ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"])
             + "\x1b[0m"]
    for i, row in enumerate(cells):
        gpu = [" X " if i == j else c for j, c in enumerate(row)]
        node = "0" if i < n // 2 else "1"
        lines.append("\t".join([f"GPU{i}", *gpu, *(nics[i] if nics else []), affinity[i], node,
                                "N/A"]))
    for j in range(k):
        row = [nics[i][j] for i in range(n)] + [" X " if j == m else "SYS" for m in range(k)]
        lines.append("\t".join([f"NIC{j}", *row]))
    return "\n".join(lines) + "\n" + LEGEND


def uniform(n: int, cell: str) -> list[list[str]]:
    return [[cell] * n for _ in range(n)]


def eight_nics() -> list[list[str]]:
    """A DGX's 8 compute NICs, one beside each GPU (PXB), the rest across the sockets."""
    return [["PXB" if j == i else ("NODE" if j // 4 == i // 4 else "SYS") for j in range(8)]
            for i in range(8)]


AFFINITY8 = ["0-55,112-167"] * 4 + ["56-111,168-223"] * 4

#: the DGX-1's hybrid cube mesh (V100: NV1 and NV2; GPU i reaches 4 peers, 6 lanes in all)
DGX1 = [["X", "NV1", "NV1", "NV2", "NV2", "SYS", "SYS", "SYS"],
        ["NV1", "X", "NV2", "NV1", "SYS", "NV2", "SYS", "SYS"],
        ["NV1", "NV2", "X", "NV2", "SYS", "SYS", "NV1", "SYS"],
        ["NV2", "NV1", "NV2", "X", "SYS", "SYS", "SYS", "NV1"],
        ["NV2", "SYS", "SYS", "SYS", "X", "NV1", "NV1", "NV2"],
        ["SYS", "NV2", "SYS", "SYS", "NV1", "X", "NV2", "NV1"],
        ["SYS", "SYS", "NV1", "SYS", "NV1", "NV2", "X", "NV2"],
        ["SYS", "SYS", "SYS", "NV1", "NV2", "NV1", "NV2", "X"]]

#: a PCIe server: two GPUs per PCIe switch, the pairs on different sockets
PCIE4 = [["X", "PIX", "SYS", "SYS"], ["PIX", "X", "SYS", "SYS"],
         ["SYS", "SYS", "X", "PIX"], ["SYS", "SYS", "PIX", "X"]]


@dataclass(frozen=True)
class Sample:
    name: str
    gpu: str                    # what CUDA calls each GPU
    text: str                   # nvidia-smi topo -m
    switched: bool              # an NVSwitch box
    per_gpu: float              # NVLink bytes/s each GPU sends (its links added up)

    @property
    def count(self) -> int:
        return self.text.count("\nGPU")


GB = 1e9
SAMPLES = [
    Sample("DGX A100", "NVIDIA A100-SXM4-80GB",
           matrix(uniform(8, "NV12"), eight_nics(), AFFINITY8), True, 12 * 25 * GB),
    Sample("DGX H100", "NVIDIA H100 80GB HBM3",
           matrix(uniform(8, "NV18"), eight_nics(), AFFINITY8), True, 18 * 25 * GB),
    Sample("HGX B200", "NVIDIA B200",
           matrix(uniform(8, "NV18"), eight_nics(), AFFINITY8), True, 18 * 50 * GB),
    # HGX A100 4-GPU: every pair joined directly by 4 NVLinks, no NVSwitch
    Sample("HGX A100 4-GPU NV4 mesh", "NVIDIA A100-SXM4-40GB",
           matrix(uniform(4, "NV4"), [], ["0-63"] * 4), False, 3 * 4 * 25 * GB),
    # HGX H100 4-GPU: every pair joined directly by 6 NVLinks
    Sample("HGX H100 4-GPU NV6 mesh", "NVIDIA H100 80GB HBM3",
           matrix(uniform(4, "NV6"), [], ["0-63"] * 4), False, 3 * 6 * 25 * GB),
    Sample("DGX-1 (V100) hybrid cube mesh", "Tesla V100-SXM2-32GB",
           matrix(DGX1, [], ["0-19,40-59"] * 4 + ["20-39,60-79"] * 4), False, 6 * 25 * GB),
    # the DGX-1 with P100s: the same cube, one NVLink 1 lane per joined pair
    Sample("DGX-1 (P100) hybrid cube mesh", "Tesla P100-SXM2-16GB",
           matrix([[c.replace("NV2", "NV1") for c in row] for row in DGX1], [],
                  ["0-19,40-59"] * 4 + ["20-39,60-79"] * 4), False, 4 * 20 * GB),
    Sample("PCIe only", "NVIDIA L40S", matrix(PCIE4, [], ["0-31"] * 2 + ["32-63"] * 2),
           False, 0.0),
]


def fake_gpus(monkeypatch, name: str, count: int, topology: str) -> None:
    """This process sees ``count`` GPUs called ``name`` and nvidia-smi prints ``topology``."""
    props = SimpleNamespace(total_memory=80 * 2**30)
    cuda = SimpleNamespace(is_available=lambda: True, device_count=lambda: count,
                           get_device_name=lambda i: name, get_device_properties=lambda i: props,
                           can_device_access_peer=lambda i, j: True)
    torch = SimpleNamespace(cuda=cuda, __version__="2.13.0", version=SimpleNamespace(cuda="12.8"))
    monkeypatch.setattr(detect, "_torch", lambda: torch)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: SimpleNamespace(stdout=topology))
