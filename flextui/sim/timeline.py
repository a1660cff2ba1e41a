"""Timeline: the result of simulating one iteration, as plain data: per device and per
link what it did, and the tasks, as columns made into objects only when read."""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, overload

from flextui.sim.memory import MemoryUsage
from flextui.sim.micro import micro_of_key
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
    micro: int = 0     # the micro-batch (``strategy.pipeline``); 0 for syncs and updates


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
    tasks: Sequence[TaskTiming]   # a TaskTable when simulated: objects made when read
    devices: list[DeviceStats]
    links: list[LinkStats]
    memory_penalty_s: float = 0.0
    #: per sync task's key whose bucket sums several parameters' gradients, those
    bucket_params: dict[tuple[int, ...], tuple[str, ...]] = field(default_factory=dict)
    _by_key: dict = field(default_factory=dict, repr=False)
    _kinds: frozenset[TaskKind] | None = field(default=None, repr=False)
    #: the micro-batches the iteration cuts the batch into
    microbatches: int = 1

    @property
    def cost(self) -> float:
        """Simulated iteration time plus the memory penalty, in seconds."""
        return self.makespan + self.memory_penalty_s

    @property
    def kinds(self) -> frozenset[TaskKind]:
        """The kinds of task the iteration has (a legend shows these)."""
        if self._kinds is None:
            tasks = self.tasks
            self._kinds = tasks.kinds() if isinstance(tasks, TaskTable) \
                else frozenset(t.kind for t in tasks)
        return self._kinds

    def by_key(self) -> dict[tuple, TaskTiming]:
        if not self._by_key:
            self._by_key = {t.key: t for t in self.tasks}
        return self._by_key

    def compute_by_op(self) -> dict[str, float]:
        """Seconds of forward and backward compute per op name."""
        if isinstance(self.tasks, TaskTable):
            return self.tasks.compute_by_op()
        by_op: dict[str, float] = {}
        for t in self.tasks:
            if t.kind in (TaskKind.FORWARD, TaskKind.BACKWARD):
                by_op[t.op] = by_op.get(t.op, 0.0) + (t.end - t.start)
        return by_op

    @property
    def overflows(self) -> dict[str, int]:
        """Devices over their memory capacity, and by how many bytes."""
        return {d.name: d.memory.over for d in self.devices if d.memory.over > 0}


def unpack_key(hi: int, lo: int) -> tuple[int, ...]:
    """A key the C store packed (see ``csrc/store.c``: 16 bits an int, biased, 0 after
    the last)."""
    key: list[int] = []
    for word in (hi, lo):
        for shift in (48, 32, 16, 0):
            field_ = (word >> shift) & 0xFFFF
            if not field_:
                return tuple(key)
            key.append(field_ - KEY_BIAS)
    return tuple(key)


#: what the C store adds to a key's ints to pack them (KEY_FIELD + 1)
KEY_BIAS = 16384


class TaskTable(Sequence[TaskTiming]):
    """The tasks of a simulated iteration as columns (a snapshot of the task store's and
    the times'), made into ``TaskTiming`` objects, sorted by start and key, only when a
    task is asked for: a large strategy has millions of tasks, and a screen or a trace
    shows few of them."""

    def __init__(self, tg: TaskGraph, times: Times, copy_times: bool = True) -> None:
        (self._ids, self._kind, self._op, self._part, self._rset, self._nbytes,
         self._keys) = tg.store.columns()
        self._ready, self._start, self._end = ((times.ready[:], times.start[:], times.end[:])
                                               if copy_times else
                                               (times.ready, times.start, times.end))
        names = [d.name for d in tg.cluster.devices] + [link.name for link in tg.cluster.links]
        self._rsets = [tuple(names[r] for r in rset) for rset in tg.store.resource_sets()]
        self._op_names = [op.name for op in tg.graph.ops] + [""]   # op -1 (syncs, updates)
        self._num_ops, self._micro = len(tg.graph.ops), tg.micro > 1
        self._sorted: list[TaskTiming] | None = None

    def __len__(self) -> int:
        return len(self._ids)

    @overload
    def __getitem__(self, i: int) -> TaskTiming: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[TaskTiming]: ...

    def __getitem__(self, i: int | slice) -> TaskTiming | Sequence[TaskTiming]:
        return self._objects()[i]

    def __iter__(self) -> Iterator[TaskTiming]:
        return iter(self._objects())

    def _key(self, i: int) -> tuple[int, ...]:
        keys = self._keys
        if isinstance(keys, list):
            return keys[i]
        return unpack_key(keys[2 * i], keys[2 * i + 1])

    def _objects(self) -> list[TaskTiming]:
        if self._sorted is None:
            kinds = list(TaskKind)
            ids, ready, start, end = self._ids, self._ready, self._start, self._end
            tasks = [TaskTiming(key, kinds[self._kind[i]], self._op_names[self._op[i]],
                                self._part[i], self._rsets[self._rset[i]], ready[t], start[t],
                                end[t], self._nbytes[i],
                                micro_of_key(key, self._op[i], self._num_ops) if self._micro
                                else 0)
                     for i, t in enumerate(ids) for key in (self._key(i),)]
            tasks.sort(key=lambda x: (x.start, x.key))
            self._sorted = tasks
        return self._sorted

    def kinds(self) -> frozenset[TaskKind]:
        return frozenset(TaskKind(k) for k in set(self._kind))

    def memory_bytes(self) -> int:
        """The bytes of the task columns, the times' aside (the simulation's, or a copy of
        them), and the objects, once made."""
        columns = (self._ids, self._kind, self._op, self._part, self._rset, self._nbytes)
        total = sum(c.itemsize * len(c) for c in columns)
        if isinstance(self._keys, array):
            total += self._keys.itemsize * len(self._keys)
        return total

    def compute_by_op(self) -> dict[str, float]:
        """Seconds of forward and backward compute per op name, summed over its tasks."""
        by_op: dict[str, float] = {}
        compute = (TaskKind.FORWARD, TaskKind.BACKWARD)
        names, start, end = self._op_names, self._start, self._end
        for kind, op, t in zip(self._kind, self._op, self._ids):
            if kind in compute:
                name = names[op]
                by_op[name] = by_op.get(name, 0.0) + (end[t] - start[t])
        return by_op


def build_timeline(tg: TaskGraph, times: Times, memory: list[MemoryUsage],
                   memory_penalty_s: float, copy_times: bool = True) -> Timeline:
    """The Timeline of ``tg`` scheduled at ``times``; ``copy_times=False`` hands the
    times over to it (the caller will not change them)."""
    cluster = tg.cluster
    times.grow(len(tg))   # an edit undone may have left ids the times never saw
    tasks = TaskTable(tg, times, copy_times)
    busy, moved = tg.store.resource_usage(times.start, times.end, tg.num_devices)
    sent = [0] * tg.num_devices
    received = [0] * tg.num_devices
    device_ids = {d.name: d.id for d in cluster.devices}
    for link in cluster.links:  # bytes a device puts on its own links, or takes off them
        if link.src in device_ids:
            sent[device_ids[link.src]] += moved[tg.link_resource[link.id]]
        if link.dst in device_ids:
            received[device_ids[link.dst]] += moved[tg.link_resource[link.id]]
    end = times.end
    makespan = max(map(end.__getitem__, tg.live_ids()), default=0.0)
    devices = [DeviceStats(d.name, busy[d.id], makespan - busy[d.id], sent[d.id], received[d.id],
                           memory[d.id]) for d in cluster.devices]
    links = [LinkStats(link.name, link.kind, busy[tg.link_resource[link.id]],
                       moved[tg.link_resource[link.id]]) for link in cluster.links]
    buckets = {b.key: b.params for b in tg.buckets() if len(b.params) > 1}
    return Timeline(makespan, tasks, devices, links, memory_penalty_s, buckets,
                    microbatches=tg.micro)
