"""Routes between compute devices over the links of a cluster: shortest paths, one search
per *kind of source*, not per device.

The topology is a directed graph whose nodes are endpoint names (devices and switches)
and whose edges are the directed :class:`~flextui.machine.cluster.Link` s. A route is the
shortest path under the weight ``latency + ROUTE_REFERENCE_BYTES / bandwidth`` (the time to
move a 1 MiB message over the link), so high-bandwidth paths win and, among equal ones,
the path with fewer hops (less latency) wins.

Only switches forward traffic: a route never passes *through* another compute device (a
GPU does not relay a peer's copy; two GPUs without a switched path between them are
unreachable). So a route is a first link out of the source, a path among switches, and a
last link into the destination (or one direct device-to-device link).

**What is computed.** The routes are those of a Dijkstra from the source device over the
whole graph with the out-links of every other device hidden, ties broken as networkx's
``single_source_dijkstra_path`` breaks them (the graph built in link order): a heap of
(distance, push counter) pops endpoints, a popped endpoint relaxes its out-links in link
order, and an endpoint keeps the path of the *first* popped predecessor that gave its
least distance (a later equal one is no strict improvement). The same routes come from
less work, exactly, because:

1. Devices other than the source forward nothing: popping one pushes nothing, so the
   switches are popped in the same order, at the same distances (the same float sums
   ``dist + weight`` along the same paths) and with the same paths in a search that
   leaves the devices out. Each popped switch relaxes only its links to switches, in
   link order (the counter's order among switch entries is unchanged).
2. That switch search depends on the source only through its links to switches (their
   ends and weights, in link order): links *into* the source are never taken. Sources
   with the same such links share one search (the GPUs of a node in a regular cluster,
   so 1,024 H100s in nodes of 8 take 128 small searches), a path kept as the index of
   the source's first link and the switch-to-switch links after it.
3. A destination device is relaxed by each of its in-links' ends when that end is popped:
   the source itself first (distance 0), then switches in pop order. Its route is that of
   the first in that order with the least ``dist + weight``, the last link appended. This
   costs the destination's in-degree per pair, asked for only when a route is.

``tests/route_referee.py`` keeps the per-device networkx Dijkstra, and the tests check
every pair of every library cluster, resized ones and irregular, tie-heavy ones against it.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from heapq import heappop, heappush
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from flextui.machine.cluster import Link

ROUTE_REFERENCE_BYTES = 2**20


def link_weight(link: Link) -> float:
    """The routing cost of one link: seconds to move ``ROUTE_REFERENCE_BYTES`` over it."""
    return link.latency + ROUTE_REFERENCE_BYTES / link.bandwidth


@dataclass(frozen=True)
class _Reached:
    """A switch reached by a switch search: its distance, pop rank, and path (the index
    of the source's first link among its links to switches, then switch-to-switch links)."""

    dist: float
    rank: int
    first: int
    rest: tuple[Link, ...]


# A source's links to switches as a search sees them: (switch, weight) in link order.
_Signature = tuple[tuple[str, float], ...]


class Router:
    """Shortest paths between the compute devices of one topology (see the module doc)."""

    def __init__(self, device_names: list[str], switches: list[str], links: list[Link]) -> None:
        switch_set = set(switches)
        #: per endpoint, its links to switches in link order
        self._to_switches: dict[str, list[Link]] = {}
        #: per device, its in-links with their weights, in link order
        self._into: dict[str, list[tuple[Link, float]]] = {d: [] for d in device_names}
        for link in links:
            if link.dst in switch_set:
                self._to_switches.setdefault(link.src, []).append(link)
            else:
                self._into[link.dst].append((link, link_weight(link)))
        self._searches: dict[_Signature, dict[str, _Reached]] = {}
        self._from: dict[str, dict[str, _Reached]] = {}

    @property
    def searches(self) -> int:
        """How many switch searches have run so far (one per distinct source signature)."""
        return len(self._searches)

    def _reached_from(self, src: str) -> dict[str, _Reached]:
        reached = self._from.get(src)
        if reached is None:
            signature = tuple((link.dst, link_weight(link))
                              for link in self._to_switches.get(src, ()))
            reached = self._searches.get(signature)
            if reached is None:
                reached = self._searches[signature] = self._search(signature)
            self._from[src] = reached
        return reached

    def _search(self, signature: _Signature) -> dict[str, _Reached]:
        """Dijkstra over the switches from a source whose links to switches are
        ``signature``, in networkx's pop and tie order (module doc, point 1)."""
        counter = itertools.count()
        fringe: list[tuple[float, int, str]] = []
        seen: dict[str, float] = {}
        paths: dict[str, tuple[int, tuple[Link, ...]]] = {}
        for first, (switch, weight) in enumerate(signature):
            if switch not in seen or weight < seen[switch]:     # 0 + weight, as networkx
                seen[switch] = weight
                heappush(fringe, (weight, next(counter), switch))
                paths[switch] = (first, ())
        reached: dict[str, _Reached] = {}
        while fringe:
            dist, _, v = heappop(fringe)
            if v in reached:
                continue
            first, rest = paths[v]
            reached[v] = _Reached(dist, len(reached), first, rest)
            for link in self._to_switches.get(v, ()):
                u = link.dst
                if u in reached:
                    continue
                to_u = dist + link_weight(link)
                if u not in seen or to_u < seen[u]:
                    seen[u] = to_u
                    heappush(fringe, (to_u, next(counter), u))
                    paths[u] = (first, (*rest, link))
        return reached

    def route(self, src: str, dst: str) -> tuple[Link, ...] | None:
        """The directed links from device ``src`` to device ``dst``; ``None`` if unreachable."""
        if src == dst:
            return ()
        reached = self._reached_from(src)
        best: tuple[float, int] | None = None
        last: Link | None = None
        via: _Reached | None = None
        for link, weight in self._into[dst]:
            if link.src == src:
                key, hop = (weight, -1), None           # the source pops first
            else:
                hop = reached.get(link.src)
                if hop is None:                           # another device, or unreached
                    continue
                key = (hop.dist + weight, hop.rank)
            if best is None or key < best:
                best, last, via = key, link, hop
        if last is None:
            return None
        if via is None:
            return (last,)
        return (self._to_switches[src][via.first], *via.rest, last)
