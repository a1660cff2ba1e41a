"""Routes between compute devices over the links of a cluster (networkx shortest paths).

The topology is a directed graph whose nodes are endpoint names (devices and switches)
and whose edges are the directed :class:`~flextui.machine.cluster.Link` s. A route is the
shortest path under the weight ``latency + ROUTE_REFERENCE_BYTES / bandwidth`` (the time to
move a 1 MiB message over the link), so high-bandwidth paths win and, among equal ones,
the path with fewer hops (less latency) wins.

Only switches forward traffic: a route never passes *through* another compute device (a
GPU does not relay a peer's copy; two GPUs without a switched path between them are
unreachable). Routes are deterministic (the graph is built in link order) and cached:
one Dijkstra per source device answers every destination from it, and a route becomes
links only when asked for (a ring on 1,024 GPUs asks for 1,024 of the million).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import TYPE_CHECKING

import networkx as nx

if TYPE_CHECKING:
    from flextui.machine.cluster import Link

ROUTE_REFERENCE_BYTES = 2**20


def link_weight(link: Link) -> float:
    """The routing cost of one link: seconds to move ``ROUTE_REFERENCE_BYTES`` over it."""
    return link.latency + ROUTE_REFERENCE_BYTES / link.bandwidth


class Router:
    """Cached shortest paths between the compute devices of one topology."""

    def __init__(self, device_names: list[str], switches: list[str], links: list[Link]) -> None:
        self._devices = set(device_names)
        self._graph: nx.DiGraph[str] = nx.DiGraph()
        self._graph.add_nodes_from(device_names)
        self._graph.add_nodes_from(switches)
        for link in links:
            self._graph.add_edge(link.src, link.dst, link=link, weight=link_weight(link))
        #: per source device: the node path to every endpoint (one Dijkstra), and the
        #: routes asked for so far as links
        self._nodes: dict[str, dict[str, list[str]]] = {}
        self._routes: dict[tuple[str, str], tuple[Link, ...] | None] = {}

    @property
    def graph(self) -> nx.DiGraph:
        """The directed endpoint graph (edge attribute ``link`` holds the Link)."""
        return self._graph

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
        if (src, dst) in self._routes:
            return self._routes[(src, dst)]
        nodes = self._nodes.get(src)
        if nodes is None:
            nodes = self._nodes[src] = nx.single_source_dijkstra_path(
                self._graph, src, weight=self._weight_from(src))
        path = nodes.get(dst) if dst in self._devices else None
        route = None if path is None else tuple(self._graph.edges[u, v]["link"]
                                                for u, v in itertools.pairwise(path))
        self._routes[(src, dst)] = route
        return route
