"""The routes as flextui computed them before they were searched per kind of source: one
networkx Dijkstra per source device over the whole graph, with the out-links of every
other device hidden. The referee that ``flextui.machine.routes`` must equal link for link
(tests/test_machine_routes.py, benchmarks/routes_speed.py)."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import networkx as nx

from flextui.machine.cluster import Cluster, Link
from flextui.machine.routes import link_weight


class ReferenceRouter:
    """Per source device, one Dijkstra to every endpoint; routes as links on demand."""

    def __init__(self, cluster: Cluster) -> None:
        self._devices = {d.name for d in cluster.devices}
        self._graph: nx.DiGraph[str] = nx.DiGraph()
        self._graph.add_nodes_from(d.name for d in cluster.devices)
        self._graph.add_nodes_from(cluster.switches)
        for link in cluster.links:
            self._graph.add_edge(link.src, link.dst, link=link, weight=link_weight(link))
        self._nodes: dict[str, dict[str, list[str]]] = {}

    def _weight_from(self, src: str) -> Callable[[str, str, dict], float | None]:
        devices = self._devices

        def weight(u: str, v: str, data: dict) -> float | None:
            # Hide the out-edges of every device but the source: devices never forward.
            if u != src and u in devices:
                return None
            return data["weight"]

        return weight

    def route(self, src: str, dst: str) -> tuple[Link, ...] | None:
        """The directed links from device ``src`` to device ``dst``; ``None`` if unreachable."""
        if src == dst:
            return ()
        nodes = self._nodes.get(src)
        if nodes is None:
            nodes = self._nodes[src] = nx.single_source_dijkstra_path(
                self._graph, src, weight=self._weight_from(src))
        path = nodes.get(dst) if dst in self._devices else None
        return None if path is None else tuple(self._graph.edges[u, v]["link"]
                                               for u, v in itertools.pairwise(path))
