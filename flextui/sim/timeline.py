"""Timeline: the result of simulating one iteration, as plain data."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from flextui.sim.memory import MemoryUsage
from flextui.sim.schedule import Times
from flextui.sim.taskgraph import TaskGraph, TaskKind


class TaskTiming(NamedTuple):
    """One task of a simulated iteration (a named tuple: a timeline makes one per task,
    hundreds of thousands for a large strategy)."""

    key: tuple[int, ...]
    kind: TaskKind
    op: str            # the op (for a transfer: the op whose task it feeds); "" for syncs/updates
    part: int
    resources: tuple[str, ...]
    ready: float
    start: float
    end: float
    nbytes: int


@dataclass(frozen=True)
class DeviceStats:
    name: str
    busy_s: float
    idle_s: float
    bytes_sent: int
    bytes_received: int
    memory: MemoryUsage


@dataclass(frozen=True)
class LinkStats:
    name: str
    kind: str
    busy_s: float
    bytes: int


@dataclass
class Timeline:
    makespan: float
    tasks: list[TaskTiming]
    devices: list[DeviceStats]
    links: list[LinkStats]
    memory_penalty_s: float = 0.0
    _by_key: dict = field(default_factory=dict, repr=False)

    @property
    def cost(self) -> float:
        """Simulated iteration time plus the memory penalty, in seconds."""
        return self.makespan + self.memory_penalty_s

    def by_key(self) -> dict[tuple, TaskTiming]:
        if not self._by_key:
            self._by_key = {t.key: t for t in self.tasks}
        return self._by_key

    @property
    def overflows(self) -> dict[str, int]:
        """Devices over their memory capacity, and by how many bytes."""
        return {d.name: d.memory.over for d in self.devices if d.memory.over > 0}


def build_timeline(tg: TaskGraph, times: Times, memory: list[MemoryUsage],
                   memory_penalty_s: float) -> Timeline:
    cluster, ops = tg.cluster, tg.graph.ops
    names = [d.name for d in cluster.devices] + [link.name for link in cluster.links]
    op_names = [op.name for op in ops] + [""]          # op -1 (syncs, updates): ""
    kinds = list(TaskKind)
    moving = (TaskKind.TRANSFER, TaskKind.SYNC)
    resource_names: dict[tuple[int, ...], tuple[str, ...]] = {}
    tasks = []
    busy = [0.0] * tg.num_resources
    moved = [0] * tg.num_resources
    sent = [0] * tg.num_devices
    received = [0] * tg.num_devices
    ready, start, end = times.ready, times.start, times.end
    for t in tg.live_ids():
        kind, resources, nbytes = kinds[tg.kind[t]], tg.resources[t], tg.nbytes[t]
        shown = resource_names.get(resources)
        if shown is None:
            shown = resource_names[resources] = tuple(names[r] for r in resources)
        tasks.append(TaskTiming(tg.key[t], kind, op_names[tg.op[t]], tg.part[t], shown,
                                ready[t], start[t], end[t], nbytes))
        for r in resources:
            if kind in moving:
                moved[r] += nbytes
                if r < tg.num_devices:
                    continue   # a device's busy time is its compute (host-driven clusters)
            busy[r] += end[t] - start[t]
    device_ids = {d.name: d.id for d in cluster.devices}
    for link in cluster.links:  # bytes a device puts on its own links, or takes off them
        if link.src in device_ids:
            sent[device_ids[link.src]] += moved[tg.link_resource[link.id]]
        if link.dst in device_ids:
            received[device_ids[link.dst]] += moved[tg.link_resource[link.id]]
    tasks.sort(key=lambda x: (x.start, x.key))
    makespan = max((t.end for t in tasks), default=0.0)
    devices = [DeviceStats(d.name, busy[d.id], makespan - busy[d.id], sent[d.id], received[d.id],
                           memory[d.id]) for d in cluster.devices]
    links = [LinkStats(link.name, link.kind, busy[tg.link_resource[link.id]],
                       moved[tg.link_resource[link.id]]) for link in cluster.links]
    return Timeline(makespan, tasks, devices, links, memory_penalty_s)

