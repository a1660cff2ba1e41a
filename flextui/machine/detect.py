"""The machine flextui runs on, as a one-node Cluster (``flextui clusters --detect``).

With CUDA: every visible GPU, its memory from torch, its peak FLOP/s and memory bandwidth
from the table in :mod:`flextui.machine.gpus` (an unknown GPU gets a conservative
estimate, and the description says so). The GPUs hang off one PCIe switch (``n0.pcie``,
PCIe 4 x16 at ~25 GB/s per direction, 1 µs per hop), plus the NVLink that
``nvidia-smi topo -m`` shows (torch cannot tell NVLink from PCIe; see
:mod:`flextui.machine.nvtopo`); without ``nvidia-smi`` the description says NVLink is
not known, and a library cluster (``dgx-a100``...) or a TOML file describes such a box.

Without CUDA: one CPU device ``n0.cpu0`` of kind ``cpu`` with the machine's physical
memory and an *estimated* float32 peak of ``cores x 2.5 GHz x FLOP/cycle``, the FLOP a
core does per cycle read from its vector units (``cpu_flop_per_cycle``), and an assumed
20 GB/s memory bandwidth (what one process's threads typically reach).

torch is imported lazily, inside the functions: importing this module is cheap.
"""

from __future__ import annotations

import functools
import os
import platform
from typing import Any

from flextui.machine.cluster import Cluster, Device, DeviceSpec, Link
from flextui.machine.cpus import CpuKind
from flextui.machine.gpus import device_kind_name, lookup_gpu
from flextui.machine.nvtopo import NVLINK_LATENCY, Lanes, detect_nvlink, is_switched, lane_figures

__all__ = ["CPU_CLOCK_HZ", "cpu_flop_per_cycle", "cpu_peak_flops", "cpu_ranks", "describe_local",
           "detect_local", "rank_threads", "usable_cpus"]

CPU_CLOCK_HZ = 2.5e9
#: /proc/cpuinfo's flags of a core's vector units, and the float32 FLOP it does per cycle
#: with them: two 8-wide FMA ports (AVX2 with FMA, Haswell and Zen 2 on; AVX-512 counted
#: alike, as many cores run it in 256-bit halves or at a lower clock), 8-wide add and
#: multiply ports (AVX alone), 4-wide (SSE); 16 where the flags cannot be read
CPU_VECTOR_UNITS = ((frozenset({"avx2", "fma"}), 32), (frozenset({"avx"}), 16),
                    (frozenset({"sse"}), 8))
CPU_UNKNOWN_FLOP_PER_CYCLE = 16
CPUINFO = "/proc/cpuinfo"
CPU_MEM_BANDWIDTH = 20e9
PCIE_BANDWIDTH = 25e9
PCIE_LATENCY = 1e-6
#: gloo between processes of one machine (TCP over loopback), assumed until calibrated
#: (``flextui profile --comm --device cpu`` measures the link kind "loopback")
LOOPBACK_BANDWIDTH = 2e9
LOOPBACK_LATENCY = 30e-6
#: between the machines of a launch over hosts without a cluster file: 10 Gb/s ethernet
ETHERNET_BANDWIDTH = 1.25e9
ETHERNET_LATENCY = 50e-6
#: what sets a CPU rank's threads (``flextui launch`` passes it on to its ranks)
THREADS_ENV = "OMP_NUM_THREADS"


def rank_threads() -> int:
    """The threads a CPU rank computes with: ``OMP_NUM_THREADS`` when it is set to a
    positive whole number (``flextui launch`` hands it to its ranks), else 1 (what a
    launch sets when it is not set). Profiles for CPU ranks are measured with as many."""
    text = os.environ.get(THREADS_ENV, "").strip()
    return int(text) if text.isdigit() and int(text) > 0 else 1


def usable_cpus() -> int:
    """The CPU cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


@functools.cache
def cpu_flop_per_cycle() -> int:
    """The float32 FLOP a core of this machine does per cycle, from the vector units its
    flags in /proc/cpuinfo name (``CPU_VECTOR_UNITS``): an estimate, which profiles
    replace."""
    try:
        with open(CPUINFO, encoding="utf-8", errors="replace") as file:
            flags = next((set(line.partition(":")[2].split()) for line in file
                          if line.startswith("flags")), set())
    except OSError:  # not Linux
        return CPU_UNKNOWN_FLOP_PER_CYCLE
    return next((flop for units, flop in CPU_VECTOR_UNITS if units <= flags),
                CPU_UNKNOWN_FLOP_PER_CYCLE)


def cpu_peak_flops(cores: int) -> float:
    """The estimated float32 peak of ``cores`` of this machine's cores (or threads)."""
    return cores * CPU_CLOCK_HZ * cpu_flop_per_cycle()


def _physical_memory() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return 8 * 2**30  # sysconf unavailable (not POSIX): assume 8 GiB


def _torch() -> Any | None:
    try:
        import torch  # lazy on purpose
    except Exception:  # noqa: BLE001 (not installed, or a broken install: treat as CPU-only)
        return None
    return torch


def _cuda_available(torch: Any | None) -> bool:
    if torch is None:
        return False
    try:
        return bool(torch.cuda.is_available()) and torch.cuda.device_count() > 0
    except Exception:  # noqa: BLE001 (a broken CUDA setup reads as no GPU)
        return False


def _cpu_cluster() -> Cluster:
    cores = usable_cpus()
    peak = cpu_peak_flops(cores)
    spec = DeviceSpec(kind=CpuKind.MACHINE.value, memory_bytes=_physical_memory(),
                      peak_flops={"float32": peak}, mem_bandwidth=CPU_MEM_BANDWIDTH)
    description = (f"this machine, no CUDA GPU: one CPU device ({cores} cores; peak float32 "
                   f"estimated as cores x 2.5 GHz x {cpu_flop_per_cycle()} FLOP/cycle = "
                   f"{peak / 1e12:.2f} TFLOPS, "
                   f"memory bandwidth assumed {CPU_MEM_BANDWIDTH / 1e9:.0f} GB/s); estimated=True")
    return Cluster("local", [Device(0, "n0.cpu0", 0, spec)], [], description=description)


def cpu_ranks(ranks: int, nodes: int = 1) -> Cluster:
    """``ranks`` CPU processes, ``rank_threads()`` threads each, on each of ``nodes``
    machines like this one, as a cluster: what ``flextui launch`` runs on without a GPU.
    One node is named ``local-cpu-N`` so a search can target it by name; several (a
    launch over hosts) ``cpu-NODESxN``. Each rank has its threads' estimated peak and an
    equal share of the memory; the ranks of a node talk through its loopback switch,
    nodes through an ethernet switch, and when the ranks take every core their
    communication runs on their own cores (``host_driven_comm``). Its figures are
    estimates; ``--cost profiled`` replaces them with CPU profiles measured at the
    ranks' thread count and the loopback calibration (``flextui profile --device cpu``,
    ``flextui profile --comm --device cpu``)."""
    threads = rank_threads()
    spec = DeviceSpec(kind=CpuKind.RANK.value, memory_bytes=max(1, _physical_memory() // ranks),
                      peak_flops={"float32": cpu_peak_flops(threads)},
                      mem_bandwidth=CPU_MEM_BANDWIDTH / max(1, min(ranks, usable_cpus())))
    devices = [Device(n * ranks + i, f"n{n}.rank{i}", n, spec)
               for n in range(nodes) for i in range(ranks)]
    wires = [(d.name, f"n{d.node}.loopback", "loopback", LOOPBACK_BANDWIDTH, LOOPBACK_LATENCY)
             for d in devices]
    switches = [f"n{n}.loopback" for n in range(nodes)]
    if nodes > 1:
        wires += [(f"n{n}.loopback", "network", "ethernet", ETHERNET_BANDWIDTH,
                   ETHERNET_LATENCY) for n in range(nodes)]
        switches.append("network")
    links = [Link(2 * i + j, f"{a}->{b}", kind, a, b, bandwidth, latency)
             for i, (x, y, kind, bandwidth, latency) in enumerate(wires)
             for j, (a, b) in enumerate(((x, y), (y, x)))]
    where = "this machine" if nodes == 1 else f"each of {nodes} machines like this one"
    each = f"{threads} thread{'s' if threads > 1 else ''} each"
    # with no core to spare, gloo's copies and sums run on the ranks' own cores
    host = len(devices) > 1 and ranks * threads >= usable_cpus()
    description = (f"{ranks} CPU processes of {where}, {each} (peak float32 "
                   f"estimated as {threads} core{'s' if threads > 1 else ''} at 2.5 GHz x "
                   f"{cpu_flop_per_cycle()} FLOP/cycle; gloo over loopback assumed "
                   f"{LOOPBACK_BANDWIDTH / 1e9:.0f} GB/s, {LOOPBACK_LATENCY * 1e6:.0f} us"
                   + (f"; between machines {ETHERNET_BANDWIDTH * 8 / 1e9:.0f} Gb/s ethernet, "
                      f"{ETHERNET_LATENCY * 1e6:.0f} us" if nodes > 1 else "") + ")"
                   f"{'; every core computes, so gloo runs on the ranks own cores' if host else ''}"
                   "; estimated=True")
    name = f"local-cpu-{ranks}" if nodes == 1 else f"cpu-{nodes}x{ranks}"
    many = len(devices) > 1
    return Cluster(name, devices, links if many else [], switches=switches if many else [],
                   description=description, host_driven_comm=host)


def _gpu_cluster(torch: Any) -> Cluster:
    count = torch.cuda.device_count()
    names = [torch.cuda.get_device_name(i) for i in range(count)]
    memory = [int(torch.cuda.get_device_properties(i).total_memory) for i in range(count)]
    specs: dict[str, DeviceSpec] = {}
    unknown: list[str] = []
    for name in dict.fromkeys(names):
        figures = lookup_gpu(name)
        if not figures.known:
            unknown.append(name)
        kind = device_kind_name(name)
        specs[name] = DeviceSpec(kind=kind,
                                 memory_bytes=min(m for n, m in zip(names, memory) if n == name),
                                 peak_flops=figures.peak_flops(),
                                 mem_bandwidth=figures.mem_bandwidth)
    devices = [Device(i, f"n0.gpu{i}", 0, specs[name]) for i, name in enumerate(names)]
    lanes = detect_nvlink(count) if count > 1 else None
    links, switches, how = gpu_links(devices, lanes)
    kinds = ", ".join(f"{names.count(n)} x {specs[n].kind}" for n in specs)
    description = f"this machine: {kinds}" + (f"; {how}" if how else "")
    if unknown:
        description += (f"; peak FLOP/s and memory bandwidth of {', '.join(unknown)} are a "
                        f"conservative guess: estimated=True")
    return Cluster("local", devices, links, switches=switches, description=description)


def gpu_links(devices: list[Device], lanes: Lanes | None) -> tuple[list[Link], list[str], str]:
    """The links and switches joining one node's GPUs, and a phrase saying how they were
    found: every GPU on a PCIe switch, plus NVLink where ``lanes`` (from
    ``nvidia-smi topo -m``; None if it could not be read) joins GPUs — through one
    NVSwitch (``nvtopo.is_switched``), else pair by pair — at the lane bandwidth of the
    GPUs' NVLink generation (``machine.gpus``)."""
    links: list[Link] = []
    if len(devices) < 2:
        return links, [], ""

    def join(a: str, b: str, kind: str, bandwidth: float, latency: float) -> None:
        for src, dst in ((a, b), (b, a)):
            links.append(Link(len(links), f"{src}->{dst}", kind, src, dst, bandwidth, latency))

    switches = ["n0.pcie"]
    for d in devices:
        join(d.name, "n0.pcie", "pcie", PCIE_BANDWIDTH, PCIE_LATENCY)
    pcie = "every GPU on one PCIe 4 switch at 25 GB/s per direction"
    if lanes is None:
        return links, switches, (f"links assumed: {pcie} (nvidia-smi topo -m could not be "
                                 "read, so NVLink is not known; use a library cluster or a "
                                 "TOML file for NVLink boxes)")
    if not lanes:
        return links, switches, f"links: {pcie} (no NVLink, per nvidia-smi topo -m)"
    figures = [lane_figures(lookup_gpu(d.spec.kind)) for d in devices]
    lane_bw = [bandwidth for bandwidth, _, _ in figures]
    unknown = sorted({d.spec.kind for d, (_, _, known) in zip(devices, figures) if not known})
    assumed = (f"; the NVLink of {', '.join(unknown)} is not known: {min(lane_bw) / 1e9:g} "
               "GB/s per lane assumed, estimated=True" if unknown else "")
    if is_switched(lanes, len(devices), min(f[1] for f in figures)):
        switches.append("n0.nvswitch")
        count = next(iter(lanes.values()))
        for d, bandwidth in zip(devices, lane_bw):
            join(d.name, "n0.nvswitch", "nvswitch", count * bandwidth, NVLINK_LATENCY)
        per_gpu = count * min(lane_bw)
        return links, switches, (f"links: an NVSwitch at {per_gpu / 1e9:g} GB/s per GPU and "
                                 f"direction ({count} NVLinks of {min(lane_bw) / 1e9:g} GB/s), "
                                 f"and {pcie} (nvidia-smi topo -m){assumed}")
    per_gpu_bw = [0.0] * len(devices)
    for (i, j), n in sorted(lanes.items()):
        bandwidth = n * min(lane_bw[i], lane_bw[j])
        per_gpu_bw[i] += bandwidth
        per_gpu_bw[j] += bandwidth
        join(devices[i].name, devices[j].name, "nvlink", bandwidth, NVLINK_LATENCY)
    most = max(per_gpu_bw)
    return links, switches, (f"links: NVLink between {len(lanes)} GPU pairs at "
                             f"{min(lane_bw) / 1e9:g} GB/s per lane and direction (up to "
                             f"{most / 1e9:g} GB/s per GPU), and {pcie} (nvidia-smi topo -m)"
                             f"{assumed}")


def detect_local() -> Cluster:
    """This machine as a one-node cluster: its CUDA GPUs, or one CPU device without CUDA."""
    torch = _torch()
    if _cuda_available(torch):
        return _gpu_cluster(torch)
    return _cpu_cluster()


def describe_local() -> dict[str, Any]:
    """What detection sees: torch/CUDA versions, the GPUs and how they were looked up."""
    torch = _torch()
    info: dict[str, Any] = {
        "hostname": platform.node(),
        "python": platform.python_version(),
        "torch_version": getattr(torch, "__version__", None) if torch is not None else None,
        "cuda_available": _cuda_available(torch),
        "cuda_version": getattr(getattr(torch, "version", None), "cuda", None),
        "cpu_cores": usable_cpus(),
        "memory_bytes": _physical_memory(),
        "devices": [],
    }
    if torch is not None and info["cuda_available"]:  # (CUDA is never available without torch)
        count = torch.cuda.device_count()
        for i in range(count):
            name = torch.cuda.get_device_name(i)
            figures = lookup_gpu(name)
            info["devices"].append({
                "index": i,
                "name": name,
                "kind": device_kind_name(name),
                "memory_bytes": int(torch.cuda.get_device_properties(i).total_memory),
                "figures": figures.label,
                "known": figures.known,
            })
        peer: list[list[bool]] = []
        try:
            peer = [[i == j or bool(torch.cuda.can_device_access_peer(i, j))
                     for j in range(count)] for i in range(count)]
        except Exception:  # noqa: BLE001 (peer access unknown: report none)
            peer = []
        info["peer_access"] = peer
    else:
        info["devices"].append({"index": 0, "name": platform.processor() or platform.machine(),
                                "kind": CpuKind.MACHINE.value, "memory_bytes": info["memory_bytes"],
                                "figures": "estimated", "known": False})
    return info
