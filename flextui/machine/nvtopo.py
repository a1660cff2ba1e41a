"""NVLink between the local GPUs, read from ``nvidia-smi topo -m`` (torch cannot tell
NVLink from PCIe).

The matrix gives, for each pair of GPUs, ``NV<n>`` when they are joined by ``n`` NVLink
lanes, or a PCIe/system path (``PIX``, ``PXB``, ``PHB``, ``NODE``, ``SYS``). Every NVLink
generation since the V100's moves about 25 GB/s per lane and direction. When every pair
shows the same lane count (an NVSwitch box: DGX A100 ``NV12``, DGX H100 ``NV18``) the GPUs
are modelled on one switch, each with its lanes' bandwidth to it; otherwise each joined
pair gets a link of its own (a direct mesh such as the DGX-1's). Rows follow PCI bus
order, as CUDA numbers devices when they are all of one model; with
``CUDA_VISIBLE_DEVICES`` set the visible rows are picked by index (UUIDs are not matched:
detection then falls back to PCIe only).
"""

from __future__ import annotations

import os
import re
import subprocess

NVLINK_LANE_BANDWIDTH = 25e9   # bytes/s per lane and direction (NVLink 2, 3 and 4)
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


def is_switched(lanes: Lanes, count: int) -> bool:
    """Every pair joined, by the same number of lanes: GPUs on an NVSwitch."""
    pairs = count * (count - 1) // 2
    return count > 2 and len(lanes) == pairs and len(set(lanes.values())) == 1


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
