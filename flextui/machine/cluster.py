"""A cluster: compute devices, switches, and directed links (paper section 5.1).

Every direction of every physical connection is a :class:`Link`, and each link is a
*communication device* of its own in the simulator: transfers on it run one at a time.
Endpoints are named: a compute device (``n0.gpu0``) or a switch (``n0.nvswitch``, ``net``).
Only switches forward traffic; see :mod:`flextui.machine.routes`.

Units inside are bytes, bytes/s, seconds and FLOP/s.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import operator
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from flextui.errors import ClusterError
from flextui.fields import control_problem
from flextui.graph.tensor import FLOAT_DTYPES
from flextui.limits import DEVICES, LINKS, NAME_CHARS, TEXT_CHARS
from flextui.machine.cpus import is_cpu
from flextui.machine.routes import Router
from flextui.machine.units import BANDWIDTH, FLOPS, LATENCY_MOST

__all__ = ["DeviceSpec", "Device", "Link", "Cluster"]


def _within(x: object, least: float, most: float) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and least <= x <= most


#: what a device's peak FLOP/s may be given for: the float dtypes, and ``tfloat32``,
#: float32 on TF32 tensor cores (Ampere and later; ``cost.mathmode`` says which ops use it)
PEAK_NAMES: tuple[str, ...] = (*(d.value for d in FLOAT_DTYPES), "tfloat32")


@dataclass(frozen=True)
class DeviceSpec:
    """A kind of compute device: its memory, peak FLOP/s per dtype and memory bandwidth."""

    kind: str
    memory_bytes: int
    peak_flops: dict[str, float]
    mem_bandwidth: float

    def __post_init__(self) -> None:
        if not isinstance(self.kind, str) or not self.kind:
            raise ClusterError(f"device kind must be a non-empty name, found {self.kind!r:.60}")
        problem = NAME_CHARS.problem(len(self.kind)) or control_problem(self.kind)
        if problem:
            raise ClusterError(f"device kind {self.kind[:40]!r}: {problem}")
        if not (isinstance(self.memory_bytes, int) and not isinstance(self.memory_bytes, bool)
                and self.memory_bytes > 0):
            raise ClusterError(f"device kind {self.kind!r}: memory must be a positive whole "
                               f"number of bytes, found {self.memory_bytes!r:.60}")
        if not isinstance(self.peak_flops, dict) or "float32" not in self.peak_flops:
            raise ClusterError(f"device kind {self.kind!r}: peak_flops must give at least "
                               f"float32, found {self.peak_flops!r:.60}")
        for dtype, rate in self.peak_flops.items():
            if dtype not in PEAK_NAMES:
                raise ClusterError(f"device kind {self.kind!r}: peak_flops has unknown dtype "
                                   f"{dtype!r:.60}; use {', '.join(PEAK_NAMES)}")
            if not _within(rate, *FLOPS):
                raise ClusterError(f"device kind {self.kind!r}: peak_flops.{dtype} must be "
                                   f"from {FLOPS[0]:g} to {FLOPS[1]:g} FLOP/s, found "
                                   f"{rate!r:.60}")
        if not _within(self.mem_bandwidth, *BANDWIDTH):
            raise ClusterError(f"device kind {self.kind!r}: mem_bandwidth must be from "
                               f"{BANDWIDTH[0]:g} to {BANDWIDTH[1]:g} bytes/s, found "
                               f"{self.mem_bandwidth!r:.60}")
        # Own copy (never alias the caller's dict), floats, canonical dtype order.
        flops = {str(d): float(self.peak_flops[d]) for d in PEAK_NAMES if d in self.peak_flops}
        object.__setattr__(self, "peak_flops", flops)
        object.__setattr__(self, "mem_bandwidth", float(self.mem_bandwidth))

    def __hash__(self) -> int:
        return hash((self.kind, self.memory_bytes, tuple(self.peak_flops.items()),
                     self.mem_bandwidth))

    @property
    def is_cpu(self) -> bool:
        return is_cpu(self.kind)

    def flops_for(self, dtype: str) -> float:
        """Peak FLOP/s for ``dtype`` (``"float16"``, ``torch.bfloat16``, ``"tfloat32"``...);
        float32's if unknown."""
        name = str(dtype).removeprefix("torch.")
        return self.peak_flops.get(name, self.peak_flops["float32"])

    def to_dict(self) -> dict[str, Any]:
        return {"memory_bytes": self.memory_bytes, "peak_flops": dict(self.peak_flops),
                "mem_bandwidth": self.mem_bandwidth}


@dataclass(frozen=True)
class Device:
    """A compute device (GPU or CPU); ``id`` is its index in the cluster."""

    id: int
    name: str
    node: int
    spec: DeviceSpec

    @property
    def kind(self) -> str:
        return self.spec.kind


@dataclass(frozen=True)
class Link:
    """One direction of a connection; a communication device of its own (paper 5.1)."""

    id: int
    name: str
    kind: str
    src: str
    dst: str
    bandwidth: float
    latency: float

    def transfer_time(self, nbytes: float) -> float:
        """latency + nbytes / bandwidth, in seconds."""
        return self.latency + nbytes / self.bandwidth


class Cluster:
    """Devices, switches and directed links, with routes between devices.

    ``host_driven_comm``: the devices' own cores move the bytes of every transfer and
    all-reduce (CPU processes talking through the operating system, with no core to
    spare: gloo between the CPU ranks of ``local-cpu-N`` when they take every core), so
    communication occupies the devices at its ends as well as the links."""

    def __init__(self, name: str, devices: list[Device], links: list[Link],
                 switches: Sequence[str] = (), description: str = "",
                 host_driven_comm: bool = False) -> None:
        self.name = name
        self.description = description
        self.devices = list(devices)
        self.links = list(links)
        self.switches = list(switches)
        if not isinstance(host_driven_comm, bool):
            raise ClusterError(f"cluster {name!r}: host_driven_comm must be true or false")
        self.host_driven_comm = host_driven_comm
        self._validate()
        self._by_name = {d.name: d for d in self.devices}
        self._router = Router([d.name for d in self.devices], self.switches, self.links)
        self._routes: dict[tuple[int, int], tuple[Link, ...]] = {}
        self._rings: dict[tuple[int, ...], tuple[float, float]] = {}
        self._route_ids: dict[tuple[int, int], tuple[int, ...]] = {}
        self._fingerprint: str | None = None

    # -- validation -------------------------------------------------------------------

    def _fail(self, message: str) -> NoReturn:
        raise ClusterError(f"cluster {self.name!r}: {message}")

    def _validate(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ClusterError(f"a cluster needs a non-empty name, found {self.name!r:.60}")
        problem = NAME_CHARS.problem(len(self.name)) or control_problem(self.name)
        if problem:
            raise ClusterError(f"cluster name {self.name[:40]!r}: {problem}")
        if not isinstance(self.description, str) or TEXT_CHARS.problem(len(self.description)):
            self._fail(f"description: expected a string of at most {TEXT_CHARS.value:,} "
                       "characters")
        problem = control_problem(self.description, lines=True)
        if problem:
            self._fail(f"description {self.description[:40]!r}: {problem}")
        if not self.devices:
            self._fail("has no compute devices; declare at least one")
        names: set[str] = set()
        kinds: dict[str, DeviceSpec] = {}
        for i, d in enumerate(self.devices):
            if not isinstance(d, Device):
                self._fail(f"devices[{i}] is not a Device: {d!r}")
            if d.id != i:
                self._fail(f"device {d.name!r} has id {d.id} but is number {i} in the list; "
                           f"ids must be 0..n-1 in order")
            self._check_name(d.name, names, "device")
            if not (isinstance(d.node, int) and not isinstance(d.node, bool) and d.node >= 0):
                self._fail(f"device {d.name!r}: node must be a whole number >= 0, "
                           f"found {d.node!r:.60}")
            known = kinds.setdefault(d.spec.kind, d.spec)
            if known != d.spec:
                self._fail(f"device {d.name!r}: two different specs share the kind "
                           f"{d.spec.kind!r}; give each spec its own kind name")
        for s in self.switches:
            self._check_name(s, names, "switch")
        link_names: set[str] = set()
        pairs: set[tuple[str, str]] = set()
        for i, link in enumerate(self.links):
            if not isinstance(link, Link):
                self._fail(f"links[{i}] is not a Link: {link!r}")
            if link.id != i:
                self._fail(f"link {link.name!r} has id {link.id} but is number {i} in the list; "
                           f"ids must be 0..m-1 in order")
            if not isinstance(link.name, str) or len(link.name) > 2 * NAME_CHARS.value + 2:
                self._fail(f"links[{i}]: a link's name is its ends' names joined by '->', "
                           f"found {link.name!r:.60}")
            if link.name in link_names:
                self._fail(f"two links are named {link.name!r}")
            link_names.add(link.name)
            for end in (link.src, link.dst):
                if end not in names:
                    self._fail(f"link {link.name!r} ends at {end!r:.60}, which is neither a "
                               f"device nor a switch")
            if link.src == link.dst:
                self._fail(f"link {link.name!r} connects {link.src!r} to itself")
            if (link.src, link.dst) in pairs:
                self._fail(f"two links go from {link.src!r} to {link.dst!r}; declare one link "
                           f"with their combined bandwidth")
            pairs.add((link.src, link.dst))
            if not isinstance(link.kind, str) or not link.kind \
                    or NAME_CHARS.problem(len(link.kind)):
                self._fail(f"link {link.name!r}: kind must be a non-empty name of at most "
                           f"{NAME_CHARS.value} characters")
            problem = control_problem(link.kind)
            if problem:
                self._fail(f"link {link.name!r}: kind {link.kind!r:.60} {problem}")
            if not _within(link.bandwidth, *BANDWIDTH):
                self._fail(f"link {link.name!r}: bandwidth must be from {BANDWIDTH[0]:g} to "
                           f"{BANDWIDTH[1]:g} bytes/s, found {link.bandwidth!r:.60}")
            if not _within(link.latency, 0.0, LATENCY_MOST):
                self._fail(f"link {link.name!r}: latency must be from 0 to {LATENCY_MOST:g} s, "
                           f"found {link.latency!r:.60}")

    def _check_name(self, name: object, names: set[str], what: str) -> None:
        if not isinstance(name, str) or not name or "->" in name or name != name.strip() \
                or NAME_CHARS.problem(len(name)):
            self._fail(f"{what} name {name!r:.60} is not valid (non-empty, at most "
                       f"{NAME_CHARS.value} characters, no spaces around, no '->')")
        problem = control_problem(name)
        if problem:
            self._fail(f"{what} name {name!r:.60} {problem}")
        if name in names:
            self._fail(f"the name {name!r} is used twice (device and switch names must be unique)")
        names.add(name)

    # -- queries ----------------------------------------------------------------------

    @property
    def num_devices(self) -> int:
        return len(self.devices)

    @property
    def nodes(self) -> int:
        """The number of distinct node ids."""
        return len({d.node for d in self.devices})

    def device(self, i: int) -> Device:
        try:
            i = operator.index(i)  # numpy integers are fine too
        except TypeError:
            pass
        if not (isinstance(i, int) and not isinstance(i, bool) and 0 <= i < len(self.devices)):
            raise ClusterError(f"cluster {self.name!r} has no device {i!r} "
                               f"(ids are 0..{len(self.devices) - 1})")
        return self.devices[i]

    def device_by_name(self, name: str) -> Device:
        try:
            return self._by_name[name]
        except KeyError:
            raise ClusterError(f"cluster {self.name!r} has no device named {name!r}") from None

    def route(self, src_id: int, dst_id: int) -> tuple[Link, ...]:
        """The directed links from device ``src_id`` to ``dst_id``; ``()`` when they are equal."""
        key = (src_id, dst_id)
        cached = self._routes.get(key)
        if cached is not None:
            return cached
        src, dst = self.device(src_id), self.device(dst_id)
        links = self._router.route(src.name, dst.name)
        if links is None:
            raise ClusterError(
                f"cluster {self.name!r}: no route from {src.name} to {dst.name}; connect them "
                f"with links through switches (a device never forwards traffic for others)")
        self._routes[key] = links
        return links

    def route_link_ids(self, src_id: int, dst_id: int) -> tuple[int, ...]:
        """The ids of :meth:`route`'s links, memoised (what the simulator's core takes)."""
        key = (src_id, dst_id)
        ids = self._route_ids.get(key)
        if ids is None:
            ids = self._route_ids[key] = tuple(link.id for link in self.route(src_id, dst_id))
        return ids

    def bottleneck_bandwidth(self, ids: Sequence[int]) -> float:
        """The slowest link bandwidth on the ring ids[0] -> ids[1] -> ... -> ids[0]; inf for one."""
        return self.ring_figures(tuple(ids))[0]

    def ring_figures(self, ids: tuple[int, ...]) -> tuple[float, float]:
        """The ring ids[0] -> ids[1] -> ... -> ids[0]: its slowest link's bandwidth (inf
        for one device) and its slowest hop's latency (the sum of its route's links');
        memoised, as every parameter of a data-parallel op rings the same devices."""
        figures = self._rings.get(ids)
        if figures is None:
            bandwidth, latency = math.inf, 0.0
            if len(ids) >= 2:
                for a, b in zip(ids, ids[1:] + ids[:1]):
                    route = self.route(a, b)
                    latency = max(latency, sum(link.latency for link in route))
                    for link in route:
                        bandwidth = min(bandwidth, link.bandwidth)
            figures = self._rings[ids] = (bandwidth, latency)
        return figures

    def injection_bandwidth(self, device_id: int) -> float:
        """The sum of the bandwidths of the links leaving a device (bytes/s)."""
        name = self.device(device_id).name
        return sum(link.bandwidth for link in self.links if link.src == name)

    def with_memory_limit(self, limit: int) -> Cluster:
        """A copy whose devices have at most ``limit`` bytes of memory (a search's
        memory budget is simulated this way)."""
        devices = [dataclasses.replace(d, spec=dataclasses.replace(
            d.spec, memory_bytes=min(d.spec.memory_bytes, limit))) for d in self.devices]
        return Cluster(self.name, devices, self.links, self.switches, self.description,
                       self.host_driven_comm)

    def summary(self) -> dict[str, Any]:
        """Plain-data overview for people (JSON-safe).

        Keys: name, description, devices, nodes, switches (count), device_kinds ({kind:
        count}), total_memory_bytes, total_peak_flops_float32, link_count (directed links),
        links ({kind: {count, bandwidth (min), bandwidth_max, latency (max)}}), and
        injection_bandwidth ({device name: sum of its outgoing link bandwidths}).
        """
        links_by_kind: dict[str, dict[str, Any]] = {}
        for link in self.links:
            entry = links_by_kind.setdefault(link.kind, {"count": 0, "bandwidth": link.bandwidth,
                                                         "bandwidth_max": link.bandwidth,
                                                         "latency": link.latency})
            entry["count"] += 1
            entry["bandwidth"] = min(entry["bandwidth"], link.bandwidth)
            entry["bandwidth_max"] = max(entry["bandwidth_max"], link.bandwidth)
            entry["latency"] = max(entry["latency"], link.latency)
        outgoing: dict[str, float] = {d.name: 0.0 for d in self.devices}
        for link in self.links:
            if link.src in outgoing:
                outgoing[link.src] += link.bandwidth
        return {
            "name": self.name,
            "description": self.description,
            "devices": self.num_devices,
            "nodes": self.nodes,
            "switches": len(self.switches),
            "device_kinds": dict(Counter(d.spec.kind for d in self.devices)),
            "total_memory_bytes": sum(d.spec.memory_bytes for d in self.devices),
            "total_peak_flops_float32": sum(d.spec.peak_flops["float32"] for d in self.devices),
            "link_count": len(self.links),
            "links": links_by_kind,
            "injection_bandwidth": outgoing,
        }

    # -- plain data -------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """Plain data (JSON/msgpack-safe); ``Cluster.from_dict`` rebuilds an equal cluster.
        ``host_driven_comm`` is there only when set, so other clusters' data (and
        fingerprints) are as they were."""
        kinds: dict[str, Any] = {}
        for d in self.devices:
            kinds.setdefault(d.spec.kind, d.spec.to_dict())
        data: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "device_kinds": kinds,
            "devices": [{"name": d.name, "node": d.node, "kind": d.spec.kind}
                        for d in self.devices],
            "switches": list(self.switches),
            "links": [{"name": link.name, "kind": link.kind, "src": link.src, "dst": link.dst,
                       "bandwidth": float(link.bandwidth), "latency": float(link.latency)}
                      for link in self.links],
        }
        if self.host_driven_comm:
            data["host_driven_comm"] = True
        return data

    @classmethod
    def from_dict(cls, d: Any) -> Cluster:
        """Rebuild a cluster from ``to_dict`` output; malformed data raises ClusterError."""
        try:
            return cls._from_dict(d)
        except ClusterError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise ClusterError(f"cluster data is malformed ({type(e).__name__}: {e})") from None

    @classmethod
    def _from_dict(cls, d: Any) -> Cluster:
        if not isinstance(d, dict):
            raise ClusterError(f"cluster data must be a mapping, found {type(d).__name__}")
        for limit, key in ((DEVICES, "devices"), (LINKS, "links")):
            if isinstance(d.get(key), list) and limit.problem(len(d[key])):
                raise ClusterError(f"cluster data: {key}: {limit.problem(len(d[key]))}")
        specs: dict[str, DeviceSpec] = {}
        for kind, s in d["device_kinds"].items():
            flops = s["peak_flops"]
            if not isinstance(flops, dict):
                raise ClusterError(f"cluster data: device kind {kind!r}: peak_flops must be a "
                                   "mapping")
            memory = s["memory_bytes"]
            if isinstance(memory, float) and memory.is_integer():
                memory = int(memory)
            specs[kind] = DeviceSpec(kind=kind, memory_bytes=memory, peak_flops=dict(flops),
                                     mem_bandwidth=s["mem_bandwidth"])
        devices = []
        for i, dev in enumerate(d["devices"]):
            if dev["kind"] not in specs:
                raise ClusterError(f"cluster data: device {dev['name']!r} has unknown kind "
                                   f"{dev['kind']!r}")
            devices.append(Device(id=i, name=dev["name"], node=dev["node"],
                                  spec=specs[dev["kind"]]))
        links = [Link(id=i, name=link["name"], kind=link["kind"], src=link["src"],
                      dst=link["dst"], bandwidth=float(link["bandwidth"]),
                      latency=float(link["latency"]))
                 for i, link in enumerate(d["links"])]
        return cls(name=d["name"], devices=devices, links=links,
                   switches=list(d.get("switches", [])), description=d.get("description", ""),
                   host_driven_comm=d.get("host_driven_comm", False))

    @property
    def fingerprint(self) -> str:
        """The first 16 hex digits of the sha256 of the canonical JSON of ``to_dict()``."""
        if self._fingerprint is None:
            text = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"),
                              ensure_ascii=False, allow_nan=False)
            self._fingerprint = hashlib.sha256(text.encode()).hexdigest()[:16]
        return self._fingerprint

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Cluster):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    def __hash__(self) -> int:
        return hash(self.fingerprint)

    def __repr__(self) -> str:
        return (f"Cluster({self.name!r}, {self.num_devices} devices on {self.nodes} nodes, "
                f"{len(self.switches)} switches, {len(self.links)} links)")
