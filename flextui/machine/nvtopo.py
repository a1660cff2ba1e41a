"""NVLink between the local GPUs, read from ``nvidia-smi topo -m`` (torch cannot tell
NVLink from PCIe).

The matrix gives, for each pair of GPUs, ``NV<n>`` when they are joined by ``n`` NVLink
links ("lanes" here), or a PCIe/system path (``PIX``, ``PXB``, ``PHB``, ``NODE``,
``SYS``). What a lane moves depends on the NVLink generation, known from the GPU model
(``machine.gpus``: 20 GB/s per direction on a P100, 25 on V100 to H200, 50 on a B200).

On an NVSwitch box every pair shows the GPU's whole link count (DGX A100 ``NV12``, DGX
H100 and HGX B200 ``NV18``): each GPU reaches the switches over all its links, so the GPUs
are modelled on one switch at that bandwidth. A fully connected direct mesh shows one
count everywhere too (a 4-GPU HGX A100 ``NV4``, H100 ``NV6``), but there the count is per
pair: a GPU's lanes to its peers add up to at most the links it has. ``is_switched``
tells the two apart by that sum; a mesh, and any mixed matrix (the DGX-1's hybrid cube
mesh), gets a link per joined pair. Rows follow PCI bus
order, as CUDA numbers devices when they are all of one model; with
``CUDA_VISIBLE_DEVICES`` set the visible rows are picked by index (UUIDs are not matched:
detection then falls back to PCIe only).
"""

from __future__ import annotations

import os
import re
import subprocess

from flextui.machine.gpus import MOST_NVLINK_LINKS, GpuFigures

#: bytes/s per lane and direction assumed for a GPU not in ``machine.gpus`` (NVLink 2-4)
ASSUMED_LANE_BANDWIDTH = 25e9
NVLINK_LATENCY = 1e-6

Lanes = dict[tuple[int, int], int]   # (i, j), i < j -> NVLink lanes between GPU i and j


def parse_topology(text: str) -> list[list[str]] | None:
    """The GPU-by-GPU cells of ``nvidia-smi topo -m`` output (``"X"``, ``"NV12"``,
    ``"PIX"``...), or None when the text does not hold such a matrix. The header names
    the GPUs (``GPU0 GPU1 ...``); a GPU's row starts with its name and has ``X`` on the
    diagonal."""
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line).split() for line in text.splitlines()]
    header = next((cells for cells in lines if cells[:1] == ["GPU0"]), None)
    if header is None:
        return None
    count = 0
    while count < len(header) and header[count] == f"GPU{count}":
        count += 1
    rows: dict[int, list[str]] = {}
    for cells in lines:
        match = re.fullmatch(r"GPU(\d+)", cells[0]) if cells else None
        if match and int(match.group(1)) < count and len(cells) > count:
            k = int(match.group(1))
            if cells[1 + k] == "X":
                rows.setdefault(k, cells[1:1 + count])
    if len(rows) != count:
        return None
    return [rows[k] for k in range(count)]


def nvlink_lanes(matrix: list[list[str]], visible: list[int] | None = None) -> Lanes:
    """Lanes between the ``visible`` GPUs (rows of the matrix, renumbered 0, 1...)."""
    rows = visible if visible is not None else list(range(len(matrix)))
    lanes: Lanes = {}
    for a, i in enumerate(rows):
        for b, j in enumerate(rows):
            match = re.fullmatch(r"NV(\d+)", matrix[i][j]) if a < b else None
            if match:
                lanes[(a, b)] = int(match.group(1))
    return lanes


def is_switched(lanes: Lanes, count: int, links_per_gpu: int) -> bool:
    """GPUs on an NVSwitch: every pair joined by the same number of lanes, more in all
    per GPU than the ``links_per_gpu`` it has (which a direct mesh cannot show)."""
    pairs = count * (count - 1) // 2
    if count <= 2 or len(lanes) != pairs or len(set(lanes.values())) != 1:
        return False
    return next(iter(lanes.values())) * (count - 1) > links_per_gpu


def lane_figures(figures: GpuFigures) -> tuple[float, int, bool]:
    """(bytes/s per lane and direction, links per GPU, known) for a GPU model; for one
    whose NVLink is not in the table: the assumed lane bandwidth and the most links any
    known GPU has, and known False."""
    if figures.nvlink_bandwidth and figures.nvlink_links:
        return figures.nvlink_bandwidth, figures.nvlink_links, True
    return ASSUMED_LANE_BANDWIDTH, MOST_NVLINK_LINKS, False


def visible_rows(count: int) -> list[int] | None:
    """Which ``nvidia-smi`` rows the ``count`` CUDA devices are; None if not known."""
    setting = os.environ.get("CUDA_VISIBLE_DEVICES")
    if setting is None:
        return list(range(count))
    try:
        rows = [int(part) for part in setting.split(",") if part.strip()]
    except ValueError:
        return None   # UUIDs or MIG names
    return rows[:count] if len(rows) >= count else None


def detect_nvlink(count: int) -> Lanes | None:
    """The NVLink lanes between the ``count`` local CUDA devices; None when
    ``nvidia-smi`` is missing, fails, or its matrix does not fit."""
    rows = visible_rows(count)
    if rows is None:
        return None
    try:
        out = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True,
                             timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    matrix = parse_topology(out)
    if matrix is None or max(rows) >= len(matrix):
        return None
    return nvlink_lanes(matrix, rows)
