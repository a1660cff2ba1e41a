"""The ring all-reduce time of a replica group from the cluster's link specs."""

from __future__ import annotations

from flextui.machine import Cluster


def ring_allreduce_s(nbytes: float, devices: tuple[int, ...], cluster: Cluster) -> float:
    """Ring all-reduce: 2(p-1)/p of the bytes over the ring's slowest link, plus
    2(p-1) steps of the slowest hop's latency (DESIGN.md)."""
    p = len(devices)
    bandwidth, latency = cluster.ring_figures(tuple(devices))
    return 2 * (p - 1) / p * nbytes / bandwidth + 2 * (p - 1) * latency
