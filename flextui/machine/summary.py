"""A cluster at a glance, for the app's Setup screen and the CLI: its devices and the
aggregate bandwidth inside its nodes and between them.

Switches carry no node id, so each is placed by what it is wired to: a switch whose
placed neighbours all lie in one node belongs to that node (``n0.nvswitch``, the host
bridge, the node's NIC, placed outward from the devices), one that joins several nodes
is part of the network (``net``). Then:

- intra-node bandwidth: the sum of the links from each device to its own node (what the
  devices can inject into their nodes' fabrics at once);
- inter-node bandwidth: the sum of the links from the nodes into the network (what all
  nodes can send to one another at once); 0 for one node.
"""

from __future__ import annotations

from typing import Any

from flextui.machine.cluster import Cluster

NETWORK = -1  # the placement of a switch that joins several nodes


def place_endpoints(cluster: Cluster) -> dict[str, int]:
    """Every device and reachable switch -> its node id, or NETWORK."""
    placed = {d.name: d.node for d in cluster.devices}
    neighbours: dict[str, set[str]] = {}
    for link in cluster.links:
        neighbours.setdefault(link.src, set()).add(link.dst)
        neighbours.setdefault(link.dst, set()).add(link.src)
    frontier = [s for s in cluster.switches if neighbours.get(s, set()) & set(placed)]
    while frontier:
        placed.update({switch: _placement(placed, neighbours[switch]) for switch in frontier})
        frontier = [s for s in cluster.switches
                    if s not in placed and neighbours.get(s, set()) & set(placed)]
    return placed


def _placement(placed: dict[str, int], neighbours: set[str]) -> int:
    nodes = {placed[n] for n in neighbours if n in placed} - {NETWORK}
    return nodes.pop() if len(nodes) == 1 else NETWORK


def node_bandwidths(cluster: Cluster) -> dict[str, Any]:
    """Aggregate intra- and inter-node bandwidth (bytes/s) and the link kinds of each."""
    placed = place_endpoints(cluster)
    devices = {d.name for d in cluster.devices}
    intra = inter = 0.0
    intra_kinds: dict[str, None] = {}
    inter_kinds: dict[str, None] = {}
    for link in cluster.links:
        src, dst = placed.get(link.src), placed.get(link.dst)
        if link.src in devices and src == dst:
            intra += link.bandwidth
            intra_kinds[link.kind] = None
        elif src is not None and src != NETWORK and dst == NETWORK:
            inter += link.bandwidth
            inter_kinds[link.kind] = None
    return {"intra_node_bandwidth": intra, "intra_node_link_kinds": list(intra_kinds),
            "inter_node_bandwidth": inter, "inter_node_link_kinds": list(inter_kinds)}


def cluster_summary(cluster: Cluster) -> dict[str, Any]:
    """:meth:`Cluster.summary` plus each device kind's memory and peak float32 FLOP/s
    (``device_specs``) and the aggregate bandwidths of :func:`node_bandwidths`."""
    specs = {d.kind: {"memory_bytes": d.spec.memory_bytes,
                      "peak_flops_float32": d.spec.peak_flops["float32"]}
             for d in cluster.devices}
    return {**cluster.summary(), "device_specs": specs, **node_bandwidths(cluster)}
